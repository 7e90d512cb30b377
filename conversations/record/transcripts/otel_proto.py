"""OTLP/protobuf: the same traces as ``otel`` (OTLP/JSON), as the binary protobuf encoding.

Collectors and backends that take only protobuf on ``/v1/traces`` read this one. It is the
``ExportTraceServiceRequest`` of the official OpenTelemetry protobuf definitions
(``opentelemetry-proto``), built from the OTLP/JSON request: OTLP/JSON differs from protobuf's
own JSON mapping only in writing trace and span ids as hex instead of base64 (``docs/traces.md``
§4), so the ids are converted and the rest parsed as it is.
"""

from __future__ import annotations

import base64
from typing import Any

from google.protobuf.json_format import ParseDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from conversations.escaping import carriable
from conversations.typealias import JSONDict, JSONValue

MEDIA_TYPE = "application/x-protobuf"
_ID_KEYS = frozenset({"traceId", "spanId", "parentSpanId"})


def _protobuf_ready(value: JSONValue) -> Any:
    """``value`` with every hex trace/span id (at any depth: links too) in base64, and every lone
    surrogate in a string written as its escape (``escaping.carriable``, as the text exports do):
    a protobuf string is UTF-8, which cannot hold one."""
    if isinstance(value, str):
        return carriable(value)
    if isinstance(value, list):
        return [_protobuf_ready(item) for item in value]
    if isinstance(value, dict):
        return {
            key: base64.b64encode(bytes.fromhex(item)).decode()
            if key in _ID_KEYS and isinstance(item, str)
            else _protobuf_ready(item)
            for key, item in value.items()
        }
    return value


def otlp_message(request: JSONDict) -> ExportTraceServiceRequest:
    """An OTLP/JSON ``ExportTraceServiceRequest`` as the protobuf message.

    Raises:
        google.protobuf.json_format.ParseError: ``request`` is not a valid OTLP/JSON request.
        ValueError: an id is not hex.
    """
    message = ExportTraceServiceRequest()
    ParseDict(_protobuf_ready(request), message)
    return message


def otlp_protobuf(request: JSONDict) -> bytes:
    """An OTLP/JSON request's protobuf bytes (deterministic: the same request, the same bytes)."""
    return otlp_message(request).SerializeToString(deterministic=True)
