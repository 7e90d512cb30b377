"""A transcript document as OTLP/JSON traces.

``otel`` — OTLP/JSON (``resourceSpans``), one trace per turn, following the OpenTelemetry
GenAI and MCP conventions; see ``_otel_turn_spans`` for the span layout. Bodies are never
put in attributes: spans reference the exchange (``inspector.exchange.id``, and the
content-addressed ``inspector.exchange.hash``) whose raw bodies the ``json`` export holds.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from conversations.models import Exchange, Step, Turn
from conversations.transcripts.document import chain_order, dumps
from conversations.transcripts.fields import (
    VERSION,
    ConversationDoc,
    ExchangeDoc,
    StepDoc,
    TranscriptDoc,
    TurnDoc,
)
from conversations.typealias import JSONDict, JSONList, JSONValue

# --- OTLP/JSON -----------------------------------------------------------------------------------

SERVICE_NAME = "tool-call-inspector"
SCOPE_VERSION = str(VERSION)
SPAN_KIND_INTERNAL = 1
SPAN_KIND_SERVER = 2
SPAN_KIND_CLIENT = 3
STATUS_ERROR = 2

# gen_ai.provider.name per ModelProfile.provider (well-known values of the GenAI conventions).
OTEL_PROVIDER_NAMES = {
    "openai_chat": "openai",
    "openai_responses": "openai",
    "anthropic": "anthropic",
    "gemini": "gcp.gemini",
}
# network.transport per MCP server transport.
OTEL_NETWORK_TRANSPORTS = {"stdio": "pipe", "http": "tcp", "sse": "tcp"}
MCP_SPAN_KINDS = {"client": SPAN_KIND_CLIENT, "server": SPAN_KIND_SERVER, "local": SPAN_KIND_INTERNAL}
MODEL_CALL_KINDS = {Step.Kind.DECIDE.value, Step.Kind.ANSWER.value}

# Token counts under the names providers give them (OpenAI Chat / Responses, Anthropic, Gemini).
USAGE_INPUT_KEYS = ("prompt_tokens", "input_tokens", "promptTokenCount")
USAGE_OUTPUT_KEYS = ("completion_tokens", "output_tokens", "candidatesTokenCount")

AttrValue = str | int | float | bool | list[str]


def _any_value(value: AttrValue) -> JSONDict:
    """An OTLP ``AnyValue``: 64-bit integers are strings in OTLP/JSON."""
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, list):
        return {"arrayValue": {"values": [_any_value(item) for item in value]}}
    return {"stringValue": value}


def _attributes(values: dict[str, AttrValue | None]) -> JSONList:
    return [{"key": key, "value": _any_value(value)} for key, value in values.items() if value is not None]


def _nanos(iso: str) -> int:
    moment = datetime.fromisoformat(iso)
    return (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1) * 1000


def _hex_id(seed: str, length: int) -> str:
    return hashlib.sha256(seed.encode()).hexdigest()[:length]


def _parsed(text: str) -> JSONDict:
    """A body as a JSON object; empty when it is not one (bodies are data, not trusted)."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def _dict(value: JSONValue) -> JSONDict:
    return value if isinstance(value, dict) else {}


def _text(value: JSONValue) -> str | None:
    return value if isinstance(value, str) and value else None


def _count(value: JSONValue, keys: tuple[str, ...]) -> int | None:
    mapping = _dict(value)
    for key in keys:
        count = mapping.get(key)
        if isinstance(count, int) and not isinstance(count, bool):
            return count
    return None


def _finish_reasons(body: JSONDict) -> list[str] | None:
    """OpenAI ``choices[].finish_reason``, Gemini ``candidates[].finishReason``, Anthropic ``stop_reason``."""
    choices = body.get("choices", body.get("candidates"))
    reasons: list[str] = []
    for choice in choices if isinstance(choices, list) else []:
        reason = _dict(choice).get("finish_reason", _dict(choice).get("finishReason"))
        if isinstance(reason, str):
            reasons.append(reason)
    stop_reason = body.get("stop_reason")
    if not reasons and isinstance(stop_reason, str):
        reasons.append(stop_reason)
    return reasons or None


def _http_status(status: str) -> int | None:
    """The HTTP status code an exchange's ``status`` holds (MCP ones hold ok / error / timeout)."""
    return int(status) if re.fullmatch(r"[1-5][0-9]{2}", status) else None


def _ok_http(status: str) -> bool:
    code = _http_status(status)
    return code is not None and 200 <= code < 300


@dataclass
class _Span:
    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    kind: int
    start: int
    end: int
    attributes: dict[str, AttrValue | None]
    error: str | None = None

    def as_json(self) -> JSONDict:
        span: JSONDict = {
            "traceId": self.trace_id,
            "spanId": self.span_id,
            "name": self.name,
            "kind": self.kind,
            "startTimeUnixNano": str(self.start),
            "endTimeUnixNano": str(max(self.end, self.start)),
            "attributes": _attributes(self.attributes),
        }
        if self.parent_id is not None:
            span["parentSpanId"] = self.parent_id
        if self.error is not None:
            span["status"] = {"code": STATUS_ERROR, "message": self.error}
        return span


@dataclass
class _TraceContext:
    """What every span of one turn's trace shares."""

    conversation: ConversationDoc
    turn: TurnDoc
    trace_id: str
    protocol_versions: dict[str, str]
    spans: list[_Span] = field(default_factory=list)

    def span_id(self, what: str) -> str:
        return _hex_id(f"{self.conversation['id']}/{self.turn['seq']}/{what}", 16)

    def common(self) -> dict[str, AttrValue | None]:
        return {"gen_ai.conversation.id": self.conversation["id"]}

    def add(self, span: _Span) -> _Span:
        self.spans.append(span)
        return span


def _exchange_attributes(exchange: ExchangeDoc, step: StepDoc | None) -> dict[str, AttrValue | None]:
    return {
        "inspector.exchange.id": exchange["id"],
        "inspector.exchange.seq": exchange["seq"],
        "inspector.exchange.hash": exchange["hash"] or None,
        "inspector.exchange.label": exchange["label"],
        "inspector.step.seq": step["seq"] if step is not None else None,
        "inspector.step.kind": step["kind"] if step is not None else None,
    }


def _chat_span(
    ctx: _TraceContext,
    *,
    parent: str,
    step: StepDoc | None,
    exchange: ExchangeDoc | None,
    usage_fallback: JSONValue,
    span_id: str,
) -> _Span:
    """A ``chat {model}`` inference span: one model call (an LLM exchange, or a step without one)."""
    profile = ctx.conversation["model_profile"]
    request = _parsed(exchange["request_body"]) if exchange else {}
    response = _parsed(exchange["response_body"]) if exchange else {}
    model = _text(request.get("model")) or ctx.turn["model"] or profile["model"]
    usage = response.get("usage", response.get("usageMetadata"))
    if usage is None:
        usage = usage_fallback
    max_tokens = request.get("max_tokens", request.get("max_completion_tokens"))
    error: str | None = None
    references: dict[str, AttrValue | None]
    if exchange is not None:
        references = _exchange_attributes(exchange, step)
        start = _nanos(exchange["started_at"])
        end = start + round((exchange["duration_ms"] or 0) * 1_000_000)
        status = exchange["status"]
        if exchange["error"] or (status and not _ok_http(status)):
            error = exchange["error"] or f"status {status}"
    else:
        assert step is not None, "a model call without an exchange is a step"
        references = {"inspector.step.seq": step["seq"], "inspector.step.kind": step["kind"]}
        start = _nanos(step["started_at"])
        end = _nanos(step["finished_at"]) if step["finished_at"] else start
        status = ""
        if step["status"] == Step.Status.ERROR:
            error = step["error"] or "the model call failed"
    return _Span(
        trace_id=ctx.trace_id,
        span_id=span_id,
        parent_id=parent,
        name=f"chat {model}",
        kind=SPAN_KIND_INTERNAL if profile["demo"] else SPAN_KIND_CLIENT,
        start=start,
        end=end,
        attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": OTEL_PROVIDER_NAMES.get(profile["provider"], profile["provider"]),
            "gen_ai.request.model": model,
            **ctx.common(),
            "gen_ai.request.temperature": _number(request.get("temperature")),
            "gen_ai.request.top_p": _number(request.get("top_p")),
            "gen_ai.request.max_tokens": _whole(max_tokens),
            "gen_ai.response.id": _text(response.get("id")) or _text(response.get("responseId")),
            "gen_ai.response.model": _text(response.get("model")) or _text(response.get("modelVersion")),
            "gen_ai.response.finish_reasons": _finish_reasons(response),
            "gen_ai.usage.input_tokens": _count(usage, USAGE_INPUT_KEYS),
            "gen_ai.usage.output_tokens": _count(usage, USAGE_OUTPUT_KEYS),
            "http.response.status_code": _http_status(status),
            "error.type": (status if status and not _ok_http(status) else "_OTHER") if error else None,
            **references,
        },
        error=error,
    )


def _number(value: JSONValue) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _whole(value: JSONValue) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _mcp_span(
    ctx: _TraceContext, *, parent: str, step: StepDoc | None, exchange: ExchangeDoc, index: int
) -> _Span:
    """``{mcp.method.name} {target}``: one JSON-RPC message or request/response pair."""
    request = _parsed(exchange["request_body"])
    response = _parsed(exchange["response_body"])
    method = _text(request.get("method")) or exchange["label"]
    params = _dict(request.get("params"))
    target = _text(params.get("name")) if method in {"tools/call", "prompts/get"} else None
    server = exchange["server"] or (step["server"] if step else None) or ""
    transports = {s["name"]: s["transport"] for s in ctx.conversation["servers"]}
    rpc_error = _dict(response.get("error"))
    code = rpc_error.get("code")
    tool_error = _dict(response.get("result")).get("isError") is True
    error: str | None = None
    error_type: str | None = None
    if rpc_error:
        error = _text(rpc_error.get("message")) or "JSON-RPC error"
        error_type = str(code) if isinstance(code, int) else "_OTHER"
    elif tool_error:
        error, error_type = "the tool reported an error (isError)", "tool_error"
    elif exchange["error"] or exchange["status"] in {"error", "timeout"}:
        error = exchange["error"] or exchange["status"]
        error_type = exchange["status"] if exchange["status"] == "timeout" else "_OTHER"
    start = _nanos(exchange["started_at"])
    headers = {str(k).lower(): v for k, v in _dict(exchange["response_headers"]).items()}
    return _Span(
        trace_id=ctx.trace_id,
        span_id=ctx.span_id(f"exchange/{index}"),
        parent_id=parent,
        name=f"{method} {target}" if target else method,
        kind=MCP_SPAN_KINDS.get(exchange["direction"], SPAN_KIND_INTERNAL),
        start=start,
        end=start + round((exchange["duration_ms"] or 0) * 1_000_000),
        attributes={
            "mcp.method.name": method,
            "jsonrpc.request.id": exchange["jsonrpc_id"] or None,
            "gen_ai.operation.name": "execute_tool" if method == "tools/call" else None,
            "gen_ai.tool.name": target if method == "tools/call" else None,
            "gen_ai.prompt.name": target if method == "prompts/get" else None,
            "mcp.resource.uri": _text(params.get("uri")) if method.startswith("resources/") else None,
            "mcp.protocol.version": ctx.protocol_versions.get(server),
            "mcp.session.id": _text(headers.get("mcp-session-id")),
            "network.transport": OTEL_NETWORK_TRANSPORTS.get(transports.get(server, "")),
            "rpc.response.status_code": str(code) if isinstance(code, int) else None,
            "error.type": error_type,
            **ctx.common(),
            "inspector.mcp.server": server or None,
            **_exchange_attributes(exchange, step),
        },
        error=error,
    )


def _tool_call_ids(steps: list[StepDoc]) -> dict[int, str]:
    """Each tool step's call id, from its parent decide step's parsed calls (in call order)."""
    calls_by_step: dict[int, list[JSONDict]] = {}
    for step in steps:
        parsed = step["calls"]
        if isinstance(parsed, list):
            calls_by_step[step["id"]] = [call for call in parsed if isinstance(call, dict)]
    found: dict[int, str] = {}
    for step in steps:
        open_calls = calls_by_step.get(step["parent"], []) if step["parent"] is not None else []
        if step["kind"] != Step.Kind.TOOL or not open_calls:
            continue
        tool = step["tool_name"]
        matching = [c for c in open_calls if tool in (c.get("tool"), c.get("name"))]
        chosen = next((c for c in matching if c.get("arguments") == step["arguments"]), None)
        chosen = chosen or (matching[0] if matching else None)
        if chosen is not None:
            open_calls.remove(chosen)
            if call_id := _text(chosen.get("id")):
                found[step["id"]] = call_id
    return found


def _protocol_versions(turn: TurnDoc, known: dict[str, str]) -> dict[str, str]:
    """Per server, the MCP protocol version this turn spoke (else the one seen last before)."""
    versions = dict(known)
    for step in turn["steps"]:
        if step["kind"] == Step.Kind.CONNECT:
            for name, session in _dict(step["result"]).items():
                if version := _text(_dict(session).get("protocol_version")):
                    versions[name] = version
    for _, exchange in chain_order(turn):
        if exchange["label"] == "initialize" and exchange["server"]:
            result = _dict(_parsed(exchange["response_body"]).get("result"))
            if version := _text(result.get("protocolVersion")):
                versions[exchange["server"]] = version
    return versions


def _otel_turn_spans(conversation: ConversationDoc, turn: TurnDoc, versions: dict[str, str]) -> list[_Span]:
    """One turn as a trace.

    Layout (span ids are derived from the conversation id, turn seq and step/exchange
    positions, so they are stable and an imported conversation exports the same shape)::

        invoke_agent                          INTERNAL  root; the turn
        ├─ chat {model}                       CLIENT (INTERNAL for the demo model), per LLM
        │                                     exchange of a decide/answer step (or per such
        │                                     step that never reached the wire)
        ├─ execute_tool {tool}                INTERNAL  per tool step
        │  └─ {mcp.method.name} {tool}        CLIENT    per MCP exchange of the step
        └─ {step kind}                        INTERNAL  per connect / fallback / error step
           ├─ {mcp.method.name}               CLIENT    its MCP exchanges (initialize, tools/list…)
           └─ chat {model}                    its LLM exchanges (e.g. a refused request)
    """
    trace_id = _hex_id(f"{conversation['id']}/{turn['seq']}", 32)
    ctx = _TraceContext(conversation=conversation, turn=turn, trace_id=trace_id, protocol_versions=versions)
    profile = conversation["model_profile"]
    root_id = ctx.span_id("turn")
    call_ids = _tool_call_ids(turn["steps"])
    index = {id(exchange): n for n, (_, exchange) in enumerate(chain_order(turn))}

    def exchange_spans(parent: str, step: StepDoc | None, exchanges: list[ExchangeDoc]) -> None:
        llm = [e for e in exchanges if e["channel"] == Exchange.Channel.LLM]
        for exchange in exchanges:
            if exchange["channel"] == Exchange.Channel.MCP:
                ctx.add(
                    _mcp_span(ctx, parent=parent, step=step, exchange=exchange, index=index[id(exchange)])
                )
            else:
                fallback = step["usage"] if step is not None and len(llm) == 1 else None
                ctx.add(
                    _chat_span(
                        ctx,
                        parent=parent,
                        step=step,
                        exchange=exchange,
                        usage_fallback=fallback,
                        span_id=ctx.span_id(f"exchange/{index[id(exchange)]}"),
                    )
                )

    for step in turn["steps"]:
        start = _nanos(step["started_at"])
        end = _nanos(step["finished_at"]) if step["finished_at"] else start
        failed = step["status"] == Step.Status.ERROR
        if step["kind"] in MODEL_CALL_KINDS:
            if not any(e["channel"] == Exchange.Channel.LLM for e in step["exchanges"]):
                ctx.add(
                    _chat_span(
                        ctx,
                        parent=root_id,
                        step=step,
                        exchange=None,
                        usage_fallback=step["usage"],
                        span_id=ctx.span_id(f"step/{step['seq']}"),
                    )
                )
            exchange_spans(root_id, step, step["exchanges"])
            continue
        span_id = ctx.span_id(f"step/{step['seq']}")
        common = {**ctx.common(), "inspector.step.seq": step["seq"], "inspector.step.kind": step["kind"]}
        if step["kind"] == Step.Kind.TOOL:
            tool_failed = failed or step["is_error"]
            ctx.add(
                _Span(
                    trace_id=trace_id,
                    span_id=span_id,
                    parent_id=root_id,
                    name=f"execute_tool {step['tool_name']}",
                    kind=SPAN_KIND_INTERNAL,
                    start=start,
                    end=end,
                    attributes={
                        "gen_ai.operation.name": "execute_tool",
                        "gen_ai.tool.name": step["tool_name"],
                        "gen_ai.tool.call.id": call_ids.get(step["id"]),
                        "gen_ai.tool.type": "extension",
                        "error.type": "tool_error" if step["is_error"] else ("_OTHER" if failed else None),
                        **common,
                        "inspector.mcp.server": step["server"],
                    },
                    error=(step["error"] or "the tool call failed") if tool_failed else None,
                )
            )
        else:
            ctx.add(
                _Span(
                    trace_id=trace_id,
                    span_id=span_id,
                    parent_id=root_id,
                    name=step["kind"],
                    kind=SPAN_KIND_INTERNAL,
                    start=start,
                    end=end,
                    attributes={**common, "inspector.step.title": step["title"] or None},
                    error=(step["error"] or step["title"] or "failed") if failed else None,
                )
            )
        exchange_spans(span_id, step, step["exchanges"])
    exchange_spans(root_id, None, turn["exchanges"])

    turn_start = _nanos(turn["started_at"] or turn["created_at"])
    turn_end = (
        _nanos(turn["finished_at"])
        if turn["finished_at"]
        else max([span.end for span in ctx.spans], default=turn_start)
    )
    failed_turn = turn["status"] in {Turn.Status.FAILED, Turn.Status.INTERRUPTED, Turn.Status.CANCELLED}
    root = _Span(
        trace_id=trace_id,
        span_id=root_id,
        parent_id=None,
        name="invoke_agent",
        kind=SPAN_KIND_INTERNAL,
        start=turn_start,
        end=turn_end,
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": OTEL_PROVIDER_NAMES.get(profile["provider"], profile["provider"]),
            "gen_ai.request.model": turn["model"] or profile["model"],
            **ctx.common(),
            "inspector.turn.seq": turn["seq"],
            "inspector.turn.status": turn["status"],
            "inspector.paradigm": turn["paradigm"],
            "inspector.tool_choice": turn["tool_choice"],
        },
        error=(turn["error"] or turn["status"]) if failed_turn else None,
    )
    return [root, *ctx.spans]


def export_otel(document: TranscriptDoc) -> str:
    conversation = document["conversation"]
    spans: JSONList = []
    versions: dict[str, str] = {}
    for turn in document["turns"]:
        versions = _protocol_versions(turn, versions)
        spans.extend(span.as_json() for span in _otel_turn_spans(conversation, turn, versions))
    otlp = {
        "resourceSpans": [
            {
                "resource": {"attributes": _attributes({"service.name": SERVICE_NAME})},
                "scopeSpans": [{"scope": {"name": SERVICE_NAME, "version": SCOPE_VERSION}, "spans": spans}],
            }
        ]
    }
    return dumps(otlp)
