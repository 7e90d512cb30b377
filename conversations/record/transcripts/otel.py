"""A transcript document as OTLP/JSON traces.

``otel`` — OTLP/JSON (``resourceSpans``), one trace per turn, following the OpenTelemetry
GenAI and MCP conventions (``docs/traces.md``); see ``_otel_turn_spans`` for the span layout.
Content — the messages, system instructions and tool definitions of each model call, the
arguments and result of each tool call — is on the spans in the GenAI JSON shapes, passed
through the one redactor (``secret_sources.active_redactor``), unless ``OTEL_EXPORT_CONTENT`` is
off. Raw bodies are never put in attributes: spans reference the exchange
(``inspector.exchange.id``, and the content-addressed ``inspector.exchange.hash``) whose raw
bodies the ``json`` export holds.

Trace and span ids derive from the record (``trace_origin``: the conversation's first id,
kept through imports; the turn's seq; the step's seq or the exchange's place in the chain),
so the same turn always has the same ids.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

from django.conf import settings

from conversations.loop.providers import OTEL_PROVIDER_NAMES, PROVIDERS, USAGE_INPUT_KEYS, USAGE_OUTPUT_KEYS
from conversations.loop.providers.http import SYNTHESIZED_ID_PREFIX
from conversations.models import Conversation, Exchange, Step, Turn
from conversations.record.transcripts.document import chain_order, dumps
from conversations.record.transcripts.fields import (
    VERSION,
    ConversationDoc,
    ExchangeDoc,
    StepDoc,
    TranscriptDoc,
    TurnDoc,
)
from conversations.record.transcripts.otel_content import CallContent, call_content
from conversations.redaction import Redactor
from conversations.secret_sources import active_redactor
from conversations.typealias import JSONDict, JSONList, JSONValue

# --- OTLP/JSON -----------------------------------------------------------------------------------

SERVICE_NAME = "tool-call-inspector"
SCOPE_VERSION = str(VERSION)
SPAN_KIND_INTERNAL = 1
SPAN_KIND_SERVER = 2
SPAN_KIND_CLIENT = 3
STATUS_ERROR = 2

# network.transport per MCP server transport.
OTEL_NETWORK_TRANSPORTS = {"stdio": "pipe", "http": "tcp", "sse": "tcp"}
MCP_SPAN_KINDS = {"client": SPAN_KIND_CLIENT, "server": SPAN_KIND_SERVER, "local": SPAN_KIND_INTERNAL}
MODEL_CALL_KINDS = {Step.Kind.DECIDE.value, Step.Kind.ANSWER.value}
# OpenInference (Arize Phoenix) infers a TOOL span from `gen_ai.tool.name` alone, which would make
# each `tools/call` span a second, empty tool span beside `execute_tool`; an MCP span says what it
# is in its terms instead: a link between steps, CHAIN (docs/traces.md §1).
OPENINFERENCE_SPAN_KIND = "openinference.span.kind"
MCP_OPENINFERENCE_KIND = "CHAIN"

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


def _is_hex(value: str, length: int) -> bool:
    return len(value) == length and all(c in "0123456789abcdef" for c in value) and value != "0" * length


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
    origin: str
    trace_id: str
    protocol_versions: dict[str, str]
    redact: Redactor | None
    spans: list[_Span] = field(default_factory=list)
    # An imported trace's own span ids: "root", and "steps" by step seq (trace_span_ids).
    kept: JSONDict = field(default_factory=dict)

    def span_id(self, what: str) -> str:
        steps = self.kept.get("steps")
        kept = self.kept.get("root") if what == "turn" else None
        if what.startswith("step/") and isinstance(steps, dict):
            kept = steps.get(what.removeprefix("step/"))
        if isinstance(kept, str) and _is_hex(kept, 16):
            return kept
        return _hex_id(f"{self.origin}/{self.turn['seq']}/{what}", 16)

    def common(self) -> dict[str, AttrValue | None]:
        return {"gen_ai.conversation.id": self.origin}

    def add(self, span: _Span) -> _Span:
        self.spans.append(span)
        return span

    def content(self, value: JSONValue) -> str | None:
        """``value`` as a content attribute (compact JSON, redacted), or None when content is off."""
        if self.redact is None or value is None or value == []:
            return None
        return json.dumps(self.redact.json(value), ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _exchange_attributes(exchange: ExchangeDoc, step: StepDoc | None) -> dict[str, AttrValue | None]:
    return {
        "inspector.exchange.id": exchange["id"],
        "inspector.exchange.seq": exchange["seq"],
        "inspector.exchange.hash": exchange["hash"] or None,
        "inspector.exchange.label": exchange["label"],
        "inspector.step.seq": step["seq"] if step is not None else None,
        "inspector.step.kind": step["kind"] if step is not None else None,
    }


def _server(profile_base_url: str, provider: str, demo: bool) -> tuple[str | None, int | None]:
    """``server.address`` and ``server.port`` of the model endpoint the profile names."""
    implementation = PROVIDERS.get(provider)
    default = (
        ""
        if implementation is None
        else (implementation.demo_base_url if demo else implementation.default_base_url)
    )
    try:
        parts = urlsplit(profile_base_url or default)
        port = parts.port or {"https": 443, "http": 80}.get(parts.scheme)
    except ValueError:
        return None, None
    return parts.hostname or None, port


def _content_attributes(ctx: _TraceContext, content: CallContent) -> dict[str, AttrValue | None]:
    return {
        "gen_ai.system_instructions": ctx.content(content.system_instructions),
        "gen_ai.input.messages": ctx.content(content.input_messages),
        "gen_ai.output.messages": ctx.content(content.output_messages),
        "gen_ai.tool.definitions": ctx.content(content.tool_definitions),
    }


# The paradigms that give the model its tools as prompt text (or a response schema), not as a
# request's ``tools``: their chat spans name the turn's offered tools as its tool definitions.
PROMPT_TOOL_PARADIGMS = frozenset({"prompt_xml", "prompt_json", "structured"})


def _prompt_tool_definitions(turn: TurnDoc) -> JSONList:
    """The tools a prompt paradigm's model call was given (none when tool_choice is ``none``;
    the named one only when it is ``named``), in ``gen_ai.tool.definitions``' shape."""
    if turn["paradigm"] not in PROMPT_TOOL_PARADIGMS or turn["tool_choice"] == "none":
        return []
    named = turn["tool_choice_name"] if turn["tool_choice"] == "named" else ""
    return [
        {
            "type": "function",
            "name": tool.get("provider_name") or tool.get("name") or "",
            **({"description": tool["description"]} if tool.get("description") else {}),
            "parameters": tool.get("inputSchema") or {"type": "object", "properties": {}},
        }
        for tool in _offered_tools(turn)
        if not named or named in (tool.get("provider_name"), tool.get("name"))
    ]


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
    content = (
        call_content(
            provider=profile["provider"],
            request_body=exchange["request_body"],
            response_body=exchange["response_body"],
            label=exchange["label"],
        )
        if exchange
        else CallContent()
    )
    if not content.tool_definitions:
        content.tool_definitions = _prompt_tool_definitions(ctx.turn)
    request = content.request
    model = _text(request.get("model")) or ctx.turn["model"] or profile["model"]
    usage = content.usage if content.usage is not None else usage_fallback
    config = _dict(request.get("generationConfig"))
    max_tokens = request.get(
        "max_tokens", request.get("max_completion_tokens", request.get("max_output_tokens"))
    )
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
    address, port = _server(profile["base_url"], profile["provider"], profile["demo"])
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
            "gen_ai.output.type": content.output_type,
            "gen_ai.request.stream": content.stream if exchange is not None else None,
            "gen_ai.request.temperature": _number(request.get("temperature", config.get("temperature"))),
            "gen_ai.request.top_p": _number(request.get("top_p", config.get("topP"))),
            "gen_ai.request.max_tokens": _whole(
                max_tokens if max_tokens is not None else config.get("maxOutputTokens")
            ),
            "gen_ai.response.id": content.response_id,
            "gen_ai.response.model": content.response_model,
            "gen_ai.response.finish_reasons": content.finish_reasons or None,
            "gen_ai.usage.input_tokens": _count(usage, USAGE_INPUT_KEYS),
            "gen_ai.usage.output_tokens": _count(usage, USAGE_OUTPUT_KEYS),
            "server.address": address,
            "server.port": port,
            "http.response.status_code": _http_status(status),
            "error.type": (status if status and not _ok_http(status) else "_OTHER") if error else None,
            **_content_attributes(ctx, content),
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
            "gen_ai.tool.name": target if method == "tools/call" else None,
            "gen_ai.prompt.name": target if method == "prompts/get" else None,
            "mcp.resource.uri": _text(params.get("uri")) if method.startswith("resources/") else None,
            "mcp.protocol.version": ctx.protocol_versions.get(server),
            "mcp.session.id": _text(headers.get("mcp-session-id")),
            "network.transport": OTEL_NETWORK_TRANSPORTS.get(transports.get(server, "")),
            "rpc.response.status_code": str(code) if isinstance(code, int) else None,
            "error.type": error_type,
            OPENINFERENCE_SPAN_KIND: MCP_OPENINFERENCE_KIND,
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
            # The model's own id; never one this app made up for a wire without ids (Gemini's),
            # which no message on the trace carries (docs/traces.md §3).
            call_id = _text(chosen.get("id"))
            if call_id and not call_id.startswith(SYNTHESIZED_ID_PREFIX):
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


def _offered_tools(turn: TurnDoc) -> list[JSONDict]:
    return (
        [tool for tool in turn["tools"] if isinstance(tool, dict)] if isinstance(turn["tools"], list) else []
    )


def _mcp_tool(turn: TurnDoc, step: StepDoc, servers: list[str]) -> tuple[str, JSONDict]:
    """A tool step's MCP tool name and its offered definition (empty when none matches).

    A call the host refused as unknown is recorded under the name the model used (the
    provider-side ``<server>__<tool>``); it is named here like every other tool span, by the
    MCP name, when the model's name has a known server's prefix.
    """
    name = step["tool_name"]
    for tool in _offered_tools(turn):
        if name in (tool.get("provider_name"), tool.get("name")) and (
            step["server"] in (None, tool.get("server")) or name == tool.get("provider_name")
        ):
            return str(tool.get("name") or name), tool
    for server in servers:
        prefix = f"{re.sub(r'[^A-Za-z0-9_-]', '_', server)}__"
        if name.startswith(prefix) and len(name) > len(prefix):
            return name[len(prefix) :], {}
    return name, {}


def _tool_error_type(step: StepDoc) -> str | None:
    """``tool_error`` only for a tool that ran and answered ``isError`` (MCP conventions); a call
    refused before sending (unknown tool, arguments against the schema) is ``invalid_tool_call``."""
    if step["error"].startswith("not sent"):
        return "invalid_tool_call"
    if step["is_error"] and not step["error"]:
        return "tool_error"
    if step["is_error"] or step["status"] == Step.Status.ERROR:
        return "_OTHER"
    return None


def _tool_span(ctx: _TraceContext, step: StepDoc, *, span_id: str, parent: str, call_id: str | None) -> _Span:
    """``execute_tool {tool}``: the one tool span of a tool call (its JSON-RPC exchanges are children)."""
    start = _nanos(step["started_at"])
    servers = [server["name"] for server in ctx.conversation["servers"]]
    name, offered = _mcp_tool(ctx.turn, step, servers)
    error_type = _tool_error_type(step)
    return _Span(
        trace_id=ctx.trace_id,
        span_id=span_id,
        parent_id=parent,
        name=f"execute_tool {name}",
        kind=SPAN_KIND_INTERNAL,
        start=start,
        end=_nanos(step["finished_at"]) if step["finished_at"] else start,
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.type": "extension",
            "gen_ai.tool.description": _text(offered.get("description")),
            "gen_ai.tool.call.arguments": ctx.content(step["arguments"]),
            "gen_ai.tool.call.result": ctx.content(step["result"]),
            "error.type": error_type,
            **ctx.common(),
            "inspector.step.seq": step["seq"],
            "inspector.step.kind": step["kind"],
            "inspector.mcp.server": step["server"],
            "inspector.tool.provider_name": _text(offered.get("provider_name"))
            or (step["tool_name"] if step["tool_name"] != name else None),
        },
        error=(step["error"] or "the tool reported an error (isError)") if error_type else None,
    )


def _otel_turn_spans(
    conversation: ConversationDoc,
    turn: TurnDoc,
    versions: dict[str, str],
    *,
    origin: str,
    redact: Redactor | None,
    span_ids: JSONDict | None = None,
) -> list[_Span]:
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
    kept = _dict((span_ids or {}).get(str(turn["seq"])))
    trace_id = (
        str(kept["trace"]) if _is_hex(str(kept.get("trace")), 32) else turn_trace_id(origin, turn["seq"])
    )
    ctx = _TraceContext(
        kept=kept,
        conversation=conversation,
        turn=turn,
        origin=origin,
        trace_id=trace_id,
        protocol_versions=versions,
        redact=redact,
    )
    profile = conversation["model_profile"]
    root_id = ctx.span_id("turn")
    call_ids = _tool_call_ids(turn["steps"])
    index = {id(exchange): n for n, (_, exchange) in enumerate(chain_order(turn))}

    def exchange_spans(parent: str, step: StepDoc | None, exchanges: list[ExchangeDoc]) -> None:
        llm = [e for e in exchanges if e["channel"] == Exchange.Channel.LLM]
        for exchange in exchanges:
            # A model step's model call (its last, the one whose reply it parsed) has the step's
            # span id, as the chat span of the same step imported without exchanges does: a
            # re-export names the same span.
            what = (
                f"step/{step['seq']}"
                if step is not None and step["kind"] in MODEL_CALL_KINDS and exchange is llm[-1]
                else f"exchange/{index[id(exchange)]}"
            )
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
                        span_id=ctx.span_id(what),
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
            ctx.add(_tool_span(ctx, step, span_id=span_id, parent=root_id, call_id=call_ids.get(step["id"])))
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


def turn_trace_id(origin: str, seq: int) -> str:
    """The trace id of the turn ``seq`` of the conversation whose ``trace_origin`` is ``origin``."""
    return _hex_id(f"{origin}/{seq}", 32)


def trace_origin(conversation: Conversation) -> str:
    """The id a conversation's traces derive from: its public id, or for an imported one the id
    it was first exported under (``imported_meta``), so a re-export names the same traces."""
    meta = conversation.imported_meta if isinstance(conversation.imported_meta, dict) else {}
    for key in ("trace_origin", "original_id"):
        if isinstance(meta.get(key), str) and meta[key]:
            return str(meta[key])
    return str(conversation.public_id)


def trace_span_ids(conversation: Conversation) -> JSONDict:
    """An imported trace's own trace and span ids, by turn seq (``otel_import`` keeps them in
    ``imported_meta``), so its re-export names the same spans and a backend deduplicates them."""
    meta = conversation.imported_meta if isinstance(conversation.imported_meta, dict) else {}
    return _dict(meta.get("span_ids"))


def otlp_request(
    document: TranscriptDoc,
    *,
    origin: str | None = None,
    content: bool | None = None,
    seq: int | None = None,
    span_ids: JSONDict | None = None,
) -> JSONDict:
    """The document as an OTLP ``ExportTraceServiceRequest`` in its JSON mapping.

    ``origin`` is ``trace_origin`` of the conversation (default: the document's id);
    ``content`` says whether content attributes are included (default: ``OTEL_EXPORT_CONTENT``);
    ``seq`` keeps the trace of that turn only; ``span_ids`` is ``trace_span_ids`` of the
    conversation.
    """
    conversation = document["conversation"]
    include = settings.OTEL_EXPORT_CONTENT if content is None else content
    redact = active_redactor() if include else None
    spans: JSONList = []
    versions: dict[str, str] = {}
    for turn in document["turns"]:
        versions = _protocol_versions(turn, versions)
        if seq is not None and turn["seq"] != seq:
            continue
        spans.extend(
            span.as_json()
            for span in _otel_turn_spans(
                conversation,
                turn,
                versions,
                origin=origin or conversation["id"],
                redact=redact,
                span_ids=span_ids,
            )
        )
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": _attributes({"service.name": SERVICE_NAME})},
                "scopeSpans": [{"scope": {"name": SERVICE_NAME, "version": SCOPE_VERSION}, "spans": spans}],
            }
        ]
    }


def export_otel(
    document: TranscriptDoc, *, origin: str | None = None, span_ids: JSONDict | None = None
) -> str:
    return dumps(otlp_request(document, origin=origin, span_ids=span_ids))
