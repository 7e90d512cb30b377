"""Transcripts out: the export formats, their media types, and the text of a conversation in each.

The formats are described in ``conversations.record.transcripts.document`` (``json``, ``jsonl``),
``conversations.record.transcripts.otel`` (``otel``, OTLP/JSON) and ``conversations.record.transcripts.otel_proto``
(``otlp``, OTLP/protobuf, the one binary format).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from conversations.escaping import carriable
from conversations.models import Conversation
from conversations.record.transcripts.document import export_json, export_jsonl, transcript_document
from conversations.record.transcripts.fields import TranscriptDoc
from conversations.record.transcripts.otel import export_otel, otlp_request, trace_origin, trace_span_ids
from conversations.record.transcripts.otel_proto import MEDIA_TYPE as PROTOBUF_MEDIA_TYPE
from conversations.record.transcripts.otel_proto import otlp_protobuf

ExportFormat = Literal["json", "jsonl", "otel", "otlp"]
EXPORT_FORMATS: tuple[ExportFormat, ...] = ("json", "jsonl", "otel", "otlp")
MEDIA_TYPES: dict[ExportFormat, str] = {
    "json": "application/json",
    "jsonl": "application/jsonl",
    "otel": "application/json",
    "otlp": PROTOBUF_MEDIA_TYPE,
}
# Formats that are bytes, not text (``transcript_export_bytes`` only).
BINARY_FORMATS: frozenset[ExportFormat] = frozenset({"otlp"})


# Each takes the document and the id its traces derive from (``otel.trace_origin``).
EXPORTERS: dict[ExportFormat, Callable[[TranscriptDoc, str], str]] = {
    "json": lambda document, _origin: export_json(document),
    "jsonl": lambda document, _origin: export_jsonl(document),
    "otel": lambda document, origin: export_otel(document, origin=origin),
}


def transcript_export(*, conversation: Conversation, fmt: ExportFormat) -> str:
    """The conversation as text in ``fmt`` (see this module's docstring); the same bytes every time.

    Raises:
        ValueError: an unknown format.
    """
    exporter = EXPORTERS.get(fmt)
    if fmt in BINARY_FORMATS:
        raise ValueError(f"{fmt} is a binary format: use transcript_export_bytes")
    if exporter is None:
        raise ValueError(f"unknown export format {fmt!r}; choose one of {', '.join(EXPORT_FORMATS)}")
    # Whatever a stored value holds (a lone surrogate read back from SQLite's JSON), the export is
    # text every file and terminal can carry.
    document = transcript_document(conversation=conversation, signed=fmt == "json")
    if fmt == "otel":  # an imported trace keeps its own span ids
        return carriable(
            export_otel(document, origin=trace_origin(conversation), span_ids=trace_span_ids(conversation))
        )
    return carriable(exporter(document, trace_origin(conversation)))


def transcript_export_bytes(*, conversation: Conversation, fmt: ExportFormat) -> bytes:
    """The conversation as a file in ``fmt``: a text format's UTF-8 bytes, or ``otlp``'s protobuf.

    Raises:
        ValueError: an unknown format.
    """
    if fmt == "otlp":
        document = transcript_document(conversation=conversation, signed=False)
        return otlp_protobuf(
            otlp_request(document, origin=trace_origin(conversation), span_ids=trace_span_ids(conversation))
        )
    return transcript_export(conversation=conversation, fmt=fmt).encode()
