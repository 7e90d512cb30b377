"""Transcripts out and in: a versioned JSON document, JSON Lines, and OTLP/JSON traces.

``json`` — the whole record, enough to rebuild the conversation elsewhere::

    {"format": "tool-call-inspector/transcript", "version": 1,
     "conversation": {id, title, owner, model_profile: {name, provider, model, base_url, demo},
                      paradigm, tool_choice, tool_choice_name, servers: [{name, transport}],
                      created_at},
     "turns": [{id, seq, question, status, answer, error, paradigm, tool_choice,
                tool_choice_name, model, tools, transcript, created_at, started_at, finished_at,
                steps: [{id, parent, seq, kind, status, title, prompt, prompt_exact,
                         prompt_source, tokens, usage, text, calls, diagnostics, server,
                         tool_name, arguments, result, is_error, error, started_at,
                         finished_at, exchanges: [EXCHANGE, ...]}],
                exchanges: [EXCHANGE, ...]}]}          # the turn's exchanges that have no step
    EXCHANGE = {id, seq, channel, direction, label, server, jsonrpc_id, status, error,
                started_at, duration_ms, request_headers, request_body, response_headers,
                response_body, prev_hash, hash}

Values are stored values, unchanged (empty strings stay empty; ``server`` is the server's
name or null). The document holds nothing volatile — no export time — and is written with
sorted keys, two-space indents and a final newline, so the same conversation always exports to
the same bytes. Step ``updated_at`` is left out: it is the live view's catch-up cursor, not
part of the record.

The keys that change when a transcript is imported are listed in ``ID_KEYS``: the
conversation's public id, and the database ids of turns, steps and exchanges (with each step's
``parent``, a step id). Everything else survives export → import → export byte for byte:
an imported conversation keeps what the export said about its owner, model profile, servers,
title, paradigm and creation time in ``Conversation.imported_meta``, and its re-export reads
them from there. Ids inside recorded JSON (a turn's ``tools[].server_id``) are data of the
original installation and are kept verbatim.

``jsonl`` — one exchange a line in hash-chain order: the exchange's keys as above plus
``conversation_id``, ``turn_seq`` and ``step_seq`` (null for an exchange with no step).

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
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal, NotRequired, TypedDict, cast

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from django.utils import timezone
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from conversations.escaping import carriable
from conversations.integrity import (
    KEYED,
    LEGACY,
    ChainReport,
    conversation_rechain,
    conversation_verify,
    key_id,
    manifest_sign,
    manifest_verify,
    public_key_fingerprint,
)
from conversations.models import (
    TOOL_CHOICE_MODES,
    Conversation,
    Exchange,
    ModelProfile,
    Step,
    Turn,
)
from conversations.paradigms import PARADIGMS
from conversations.providers import PROVIDERS
from conversations.typealias import JSONDict, JSONList, JSONValue
from servers.gateway.transports import TRANSPORTS

FORMAT = "tool-call-inspector/transcript"
VERSION = 1
ExportFormat = Literal["json", "jsonl", "otel"]
EXPORT_FORMATS: tuple[ExportFormat, ...] = ("json", "jsonl", "otel")
MEDIA_TYPES: dict[ExportFormat, str] = {
    "json": "application/json",
    "jsonl": "application/jsonl",
    "otel": "application/json",
}

# The keys whose values are this installation's: its ids, and its keyed chain (an import is
# re-chained and re-sealed with the importer's key). They change on import, nothing else does.
ID_KEYS: dict[str, tuple[str, ...]] = {
    "conversation": ("id", "integrity"),
    "turn": ("id", "seal", "seal_steps"),
    "step": ("id", "parent"),
    "exchange": ("id", "chain_version", "prev_hash", "hash"),
}
# Keys a version-1 transcript written before keyed sealing does not have (optional on import).
_SEALING_KEYS = {"integrity", "seal", "seal_steps", "chain_version", "signature"}

IMPORTED_PROFILE_PREFIX = "imported: "


class TranscriptError(ValueError):
    """A transcript that cannot be imported; the message says what is wrong and where."""


# --- the document ------------------------------------------------------------------------------


class ProfileDoc(TypedDict):
    name: str
    provider: str
    model: str
    base_url: str
    demo: bool


class ServerDoc(TypedDict):
    name: str
    transport: str


class IntegrityDoc(TypedDict):
    """The conversation's anchor (``conversations.integrity``), the id of the key it is under,
    and the export's signature (``integrity.manifest_sign``)."""

    key_id: str
    turns: int
    head: str
    anchor: str
    signature: NotRequired[JSONDict]


class ConversationDoc(TypedDict):
    id: str
    title: str
    owner: str
    model_profile: ProfileDoc
    paradigm: str
    tool_choice: str
    tool_choice_name: str
    servers: list[ServerDoc]
    created_at: str
    integrity: NotRequired[IntegrityDoc]


class ExchangeDoc(TypedDict):
    id: int
    seq: int
    channel: str
    direction: str
    label: str
    server: str | None
    jsonrpc_id: str
    status: str
    error: str
    started_at: str
    duration_ms: float | None
    request_headers: JSONValue
    request_body: str
    response_headers: JSONValue
    response_body: str
    chain_version: NotRequired[int]
    prev_hash: str
    hash: str


class StepDoc(TypedDict):
    id: int
    parent: int | None
    seq: int
    kind: str
    status: str
    title: str
    prompt: str
    prompt_exact: bool
    prompt_source: str
    tokens: JSONValue
    usage: JSONValue
    text: str
    calls: JSONValue
    diagnostics: JSONValue
    server: str | None
    tool_name: str
    arguments: JSONValue
    result: JSONValue
    is_error: bool
    error: str
    started_at: str
    finished_at: str | None
    exchanges: list[ExchangeDoc]


class TurnDoc(TypedDict):
    id: int
    seq: int
    question: str
    status: str
    answer: str
    error: str
    paradigm: str
    tool_choice: str
    tool_choice_name: str
    model: str
    tools: JSONValue
    transcript: JSONValue
    created_at: str
    started_at: str | None
    finished_at: str | None
    seal: NotRequired[str]
    seal_steps: NotRequired[JSONValue]
    steps: list[StepDoc]
    exchanges: list[ExchangeDoc]


class TranscriptDoc(TypedDict):
    format: str
    version: int
    conversation: ConversationDoc
    turns: list[TurnDoc]


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _profile_doc(profile: ModelProfile) -> ProfileDoc:
    return {
        "name": profile.name,
        "provider": profile.provider,
        "model": profile.model,
        "base_url": profile.base_url,
        "demo": profile.is_demo,
    }


def _conversation_doc(conversation: Conversation, *, signed: bool) -> ConversationDoc:
    """The conversation's own block; an imported conversation's comes from ``imported_meta``."""
    live = _live_conversation_doc(conversation, signed=signed)
    meta = conversation.imported_meta
    if not isinstance(meta, dict):
        return live
    kept = {key: meta[key] for key in live if key not in ID_KEYS["conversation"] and key in meta}
    return cast(ConversationDoc, {**live, **kept})


def _live_conversation_doc(conversation: Conversation, *, signed: bool) -> ConversationDoc:
    return {
        "id": str(conversation.public_id),
        "title": conversation.title,
        "owner": conversation.owner.get_username(),
        "model_profile": _profile_doc(conversation.model_profile),
        "paradigm": conversation.paradigm,
        "tool_choice": conversation.tool_choice,
        "tool_choice_name": conversation.tool_choice_name,
        "servers": [
            {"name": server.name, "transport": server.transport}
            for server in conversation.servers.order_by("name")
        ],
        "created_at": conversation.created_at.isoformat(),
        "integrity": _integrity_doc(conversation, signed=signed),
    }


def _integrity_doc(conversation: Conversation, *, signed: bool) -> IntegrityDoc:
    """The anchor as stored now (a turn sealed since ``conversation`` was read moved it), and
    with ``signed`` the export's signature (it reads every record again: the json export only)."""
    turns, head, anchor = Conversation.objects.values_list("chain_turns", "chain_head", "chain_anchor").get(
        pk=conversation.pk
    )
    doc: IntegrityDoc = {"key_id": key_id(), "turns": turns, "head": head, "anchor": anchor}
    if signed:
        doc["signature"] = cast(JSONDict, manifest_sign(conversation=conversation))
    return doc


def _exchange_doc(exchange: Exchange) -> ExchangeDoc:
    return {
        "id": exchange.pk,
        "seq": exchange.seq,
        "channel": exchange.channel,
        "direction": exchange.direction,
        "label": exchange.label,
        "server": exchange.server.name if exchange.server else (exchange.server_name or None),
        "jsonrpc_id": exchange.jsonrpc_id,
        "status": exchange.status,
        "error": exchange.error,
        "started_at": exchange.started_at.isoformat(),
        "duration_ms": exchange.duration_ms,
        "request_headers": exchange.request_headers,
        "request_body": exchange.request_body,
        "response_headers": exchange.response_headers,
        "response_body": exchange.response_body,
        "chain_version": exchange.chain_version,
        "prev_hash": exchange.prev_hash,
        "hash": exchange.hash,
    }


def _step_doc(step: Step, exchanges: list[ExchangeDoc]) -> StepDoc:
    return {
        "id": step.pk,
        "parent": step.parent_id,
        "seq": step.seq,
        "kind": step.kind,
        "status": step.status,
        "title": step.title,
        "prompt": step.prompt,
        "prompt_exact": step.prompt_exact,
        "prompt_source": step.prompt_source,
        "tokens": step.tokens,
        "usage": step.usage,
        "text": step.text,
        "calls": step.calls,
        "diagnostics": step.diagnostics,
        "server": step.server.name if step.server else (step.server_name or None),
        "tool_name": step.tool_name,
        "arguments": step.arguments,
        "result": step.result,
        "is_error": step.is_error,
        "error": step.error,
        "started_at": step.started_at.isoformat(),
        "finished_at": _iso(step.finished_at),
        "exchanges": exchanges,
    }


def _turn_doc(turn: Turn, steps: list[StepDoc], exchanges: list[ExchangeDoc]) -> TurnDoc:
    return {
        "id": turn.pk,
        "seq": turn.seq,
        "question": turn.question,
        "status": turn.status,
        "answer": turn.answer,
        "error": turn.error,
        "paradigm": turn.paradigm,
        "tool_choice": turn.tool_choice,
        "tool_choice_name": turn.tool_choice_name,
        "model": turn.model_name,
        "tools": turn.tools,
        "transcript": turn.transcript,
        "created_at": turn.created_at.isoformat(),
        "started_at": _iso(turn.started_at),
        "finished_at": _iso(turn.finished_at),
        "seal": turn.seal,
        "seal_steps": turn.seal_steps,
        "steps": steps,
        "exchanges": exchanges,
    }


def transcript_document(*, conversation: Conversation, signed: bool = True) -> TranscriptDoc:
    """The ``json`` export as a structure (three queries for the rows, whatever their number;
    ``signed`` adds the signature, which reads them again)."""
    by_step: dict[int, list[ExchangeDoc]] = {}
    by_turn: dict[int, list[ExchangeDoc]] = {}
    exchanges = (
        Exchange.objects.filter(turn__conversation=conversation)
        .select_related("server")
        .order_by("seq", "id")
    )
    for exchange in exchanges:
        doc = _exchange_doc(exchange)
        if exchange.step_id is not None:
            by_step.setdefault(exchange.step_id, []).append(doc)
        elif exchange.turn_id is not None:
            by_turn.setdefault(exchange.turn_id, []).append(doc)
    steps: dict[int, list[StepDoc]] = {}
    rows = Step.objects.filter(turn__conversation=conversation).select_related("server").order_by("seq")
    for step in rows:
        steps.setdefault(step.turn_id, []).append(_step_doc(step, by_step.get(step.pk, [])))
    return {
        "format": FORMAT,
        "version": VERSION,
        "conversation": _conversation_doc(conversation, signed=signed),
        "turns": [
            _turn_doc(turn, steps.get(turn.pk, []), by_turn.get(turn.pk, []))
            for turn in conversation.turns.order_by("seq")
        ],
    }


def _dumps(value: object) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True) + "\n"


def _export_json(document: TranscriptDoc) -> str:
    return _dumps(document)


def _chain_order(turn: TurnDoc) -> list[tuple[int | None, ExchangeDoc]]:
    """A turn's exchanges with their step's seq, in the hash chain's order (seq, then id)."""
    pairs: list[tuple[int | None, ExchangeDoc]] = [(None, e) for e in turn["exchanges"]]
    pairs.extend((step["seq"], e) for step in turn["steps"] for e in step["exchanges"])
    return sorted(pairs, key=lambda pair: (pair[1]["seq"], pair[1]["id"]))


def _export_jsonl(document: TranscriptDoc) -> str:
    conversation_id = document["conversation"]["id"]
    lines = [
        json.dumps(
            {"conversation_id": conversation_id, "turn_seq": turn["seq"], "step_seq": step_seq, **exchange},
            ensure_ascii=False,
            sort_keys=True,
            separators=(",", ":"),
        )
        for turn in document["turns"]
        for step_seq, exchange in _chain_order(turn)
    ]
    return "".join(line + "\n" for line in lines)


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
    for _, exchange in _chain_order(turn):
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
    index = {id(exchange): n for n, (_, exchange) in enumerate(_chain_order(turn))}

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


def _export_otel(document: TranscriptDoc) -> str:
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
    return _dumps(otlp)


EXPORTERS: dict[ExportFormat, Callable[[TranscriptDoc], str]] = {
    "json": _export_json,
    "jsonl": _export_jsonl,
    "otel": _export_otel,
}


def transcript_export(*, conversation: Conversation, fmt: ExportFormat) -> str:
    """The conversation as text in ``fmt`` (see the module docstring); the same bytes every time.

    Raises:
        ValueError: an unknown format.
    """
    exporter = EXPORTERS.get(fmt)
    if exporter is None:
        raise ValueError(f"unknown export format {fmt!r}; choose one of {', '.join(EXPORT_FORMATS)}")
    # Whatever a stored value holds (a lone surrogate read back from SQLite's JSON), the export is
    # text every file and terminal can carry.
    return carriable(exporter(transcript_document(conversation=conversation, signed=fmt == "json")))


# --- import --------------------------------------------------------------------------------------


def _string(max_length: int | None = None, *, null: bool = False) -> JSONDict:
    schema: JSONDict = {"type": ["string", "null"] if null else "string"}
    if max_length is not None:
        schema["maxLength"] = max_length
    return schema


def _enum(values: list[str]) -> JSONDict:
    return {"type": "string", "enum": cast(JSONValue, values)}


def _object(properties: JSONDict) -> JSONDict:
    return {
        "type": "object",
        "properties": properties,
        "required": [key for key in properties if key not in _SEALING_KEYS],
        "additionalProperties": False,
    }


# Seqs are stored in PositiveIntegerField columns.
_SEQ: JSONDict = {"type": "integer", "minimum": 0, "maximum": 2_147_483_647}
_ID: JSONDict = {"type": "integer"}
_ANY: JSONDict = {}
_HASH: JSONDict = {"type": "string", "pattern": "^([0-9a-f]{64})?$"}

_EXCHANGE_SCHEMA = _object(
    {
        "id": _ID,
        "seq": _SEQ,
        "channel": _enum(list(Exchange.Channel.values)),
        "direction": _enum(list(Exchange.Direction.values)),
        "label": _string(200),
        "server": _string(40, null=True),
        "jsonrpc_id": _string(64),
        "status": _string(32),
        "error": _string(),
        "started_at": _string(),
        "duration_ms": {"type": ["number", "null"]},
        "request_headers": _ANY,
        "request_body": _string(),
        "response_headers": _ANY,
        "response_body": _string(),
        "chain_version": {"enum": [LEGACY, KEYED]},
        "prev_hash": _HASH,
        "hash": _HASH,
    }
)
_STEP_SCHEMA = _object(
    {
        "id": _ID,
        "parent": {"type": ["integer", "null"]},
        "seq": _SEQ,
        "kind": _enum(list(Step.Kind.values)),
        "status": _enum(list(Step.Status.values)),
        "title": _string(300),
        "prompt": _string(),
        "prompt_exact": {"type": "boolean"},
        "prompt_source": _string(300),
        "tokens": _ANY,
        "usage": _ANY,
        "text": _string(),
        "calls": _ANY,
        "diagnostics": _ANY,
        "server": _string(40, null=True),
        "tool_name": _string(200),
        "arguments": _ANY,
        "result": _ANY,
        "is_error": {"type": "boolean"},
        "error": _string(),
        "started_at": _string(),
        "finished_at": _string(null=True),
        "exchanges": {"type": "array", "items": _EXCHANGE_SCHEMA},
    }
)
_TURN_SCHEMA = _object(
    {
        "id": _ID,
        "seq": {**_SEQ, "minimum": 1},
        "question": _string(),
        "status": _enum(list(Turn.Status.values)),
        "answer": _string(),
        "error": _string(),
        "paradigm": _string(16),
        "tool_choice": _string(10),
        "tool_choice_name": _string(200),
        "model": _string(120),
        "tools": _ANY,
        "transcript": _ANY,
        "created_at": _string(),
        "started_at": _string(null=True),
        "finished_at": _string(null=True),
        "seal": _HASH,
        "seal_steps": {"type": "array", "items": {**_HASH, "minLength": 64}},
        "steps": {"type": "array", "items": _STEP_SCHEMA},
        "exchanges": {"type": "array", "items": _EXCHANGE_SCHEMA},
    }
)
_CONVERSATION_SCHEMA = _object(
    {
        "id": _string(),
        "title": _string(200),
        "owner": _string(),
        "model_profile": _object(
            {
                "name": {"type": "string", "minLength": 1, "maxLength": 80},
                "provider": _enum(list(PROVIDERS)),
                "model": _string(120),
                "base_url": _string(500),
                "demo": {"type": "boolean"},
            }
        ),
        "paradigm": _enum(list(PARADIGMS)),
        "tool_choice": _enum([key for key, _ in TOOL_CHOICE_MODES]),
        "tool_choice_name": _string(200),
        "servers": {
            "type": "array",
            "items": _object({"name": _string(40), "transport": _enum(list(TRANSPORTS))}),
        },
        "created_at": _string(),
        "integrity": _object(
            {
                "key_id": _string(64),
                "turns": {"type": "integer", "minimum": 0},
                "head": _HASH,
                "anchor": _HASH,
                "signature": {"type": "object"},
            }
        ),
    }
)
# The JSON Schema of a version-1 transcript; ``transcript_import`` checks documents against it.
TRANSCRIPT_SCHEMA: JSONDict = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    **_object(
        {
            "format": {"const": FORMAT},
            "version": {"const": VERSION},
            "conversation": _CONVERSATION_SCHEMA,
            "turns": {"type": "array", "items": _TURN_SCHEMA},
        }
    ),
}
_VALIDATOR = Draft202012Validator(TRANSCRIPT_SCHEMA)
_MESSAGE_LIMIT = 240


def _where(path: Iterable[str | int]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text or "the document"


def _short(message: str) -> str:
    return message if len(message) <= _MESSAGE_LIMIT else message[: _MESSAGE_LIMIT - 1] + "…"


def _reject_constant(name: str) -> JSONValue:
    raise TranscriptError(f"not valid JSON: {name} is not a JSON number")


def _nul_free(document: JSONValue) -> None:
    """No NUL characters anywhere: PostgreSQL cannot store them (and our exports never have them).

    Iterative: recorded JSON may nest as deep as the parser allowed.
    """
    pending: list[tuple[JSONValue, list[str | int]]] = [(document, [])]
    while pending:
        value, path = pending.pop()
        if isinstance(value, str):
            if "\x00" in value:
                raise TranscriptError(f"{_where(path)}: contains a NUL character")
        elif isinstance(value, list):
            pending.extend((item, [*path, position]) for position, item in enumerate(value))
        elif isinstance(value, dict):
            for key, item in value.items():
                pending.extend([(key, path), (item, [*path, key])])


def _parse(data: str | bytes) -> TranscriptDoc:
    """The document, checked against ``TRANSCRIPT_SCHEMA`` and for things a schema cannot say."""
    try:
        value: JSONValue = json.loads(data, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        if isinstance(exc, TranscriptError):
            raise
        raise TranscriptError(f"not valid JSON: {_short(str(exc))}") from exc
    if not isinstance(value, dict):
        raise TranscriptError("not a transcript: the document must be a JSON object")
    if value.get("format") != FORMAT:
        raise TranscriptError(
            f"not a Tool-Call Inspector transcript: format is {_short(repr(value.get('format')))}, "
            f"expected {FORMAT!r} (only `--format json` exports can be imported)"
        )
    if value.get("version") != VERSION or isinstance(value.get("version"), bool):
        raise TranscriptError(
            f"unsupported transcript version {_short(repr(value.get('version')))}: "
            f"this installation reads version {VERSION}"
        )
    error = best_match(_VALIDATOR.iter_errors(value))
    if error is not None:
        raise TranscriptError(f"{_where(list(error.absolute_path))}: {_short(error.message)}")
    _nul_free(value)
    document = cast(TranscriptDoc, value)
    _check_structure(document)
    return document


def _when(value: str, where: str) -> datetime:
    try:
        moment = datetime.fromisoformat(value)
    except ValueError as exc:
        raise TranscriptError(f"{where}: {value!r} is not an ISO 8601 date and time") from exc
    if moment.tzinfo is None:
        raise TranscriptError(f"{where}: {value!r} has no time zone")
    return moment.astimezone(UTC)


def _when_or_none(value: str | None, where: str) -> datetime | None:
    return _when(value, where) if value is not None else None


def _check_structure(document: TranscriptDoc) -> None:
    """Unique seqs and ids, parents within their turn, parseable times."""
    _when(document["conversation"]["created_at"], "conversation.created_at")
    turn_seqs: set[int] = set()
    step_ids: set[int] = set()
    for t, turn in enumerate(document["turns"]):
        where = f"turns[{t}]"
        if turn["seq"] in turn_seqs:
            raise TranscriptError(f"{where}.seq: turn {turn['seq']} appears twice")
        turn_seqs.add(turn["seq"])
        _when(turn["created_at"], f"{where}.created_at")
        _when_or_none(turn["started_at"], f"{where}.started_at")
        _when_or_none(turn["finished_at"], f"{where}.finished_at")
        seqs: set[int] = set()
        ids = {step["id"] for step in turn["steps"]}
        for s, step in enumerate(turn["steps"]):
            here = f"{where}.steps[{s}]"
            if step["seq"] in seqs:
                raise TranscriptError(f"{here}.seq: step {step['seq']} appears twice in turn {turn['seq']}")
            if step["id"] in step_ids:
                raise TranscriptError(f"{here}.id: step id {step['id']} appears twice")
            seqs.add(step["seq"])
            step_ids.add(step["id"])
            if step["parent"] is not None and (step["parent"] not in ids or step["parent"] == step["id"]):
                raise TranscriptError(f"{here}.parent: {step['parent']} is not another step of this turn")
            _when(step["started_at"], f"{here}.started_at")
            _when_or_none(step["finished_at"], f"{here}.finished_at")
        for _, exchange in _chain_order(turn):
            _when(exchange["started_at"], f"{where}: exchange {exchange['seq']}.started_at")


def _imported_profile(profile: ProfileDoc, owner: AbstractBaseUser) -> ModelProfile:
    """The profile an imported conversation hangs off (it is never run again).

    An existing profile of this installation with the same name, provider and model is reused
    (e.g. the demo profile); otherwise the importer's own placeholder ``imported: <name>`` —
    no base URL, no key, ``imported_by`` the importer, so it is offered in no picker — is
    reused or created (numbered when that name is taken by another user's or another model's).
    An import creates nothing anyone else sees.
    """
    same = ModelProfile.objects.filter(
        name=profile["name"], provider=profile["provider"], model=profile["model"], imported_by__isnull=True
    ).first()
    if same is not None:
        return same
    base = f"{IMPORTED_PROFILE_PREFIX}{profile['name']}"
    for number in range(1, 1000):
        name = base[:80] if number == 1 else f"{base[:72]} #{number}"
        existing, created = ModelProfile.objects.get_or_create(
            name=name,
            defaults={
                "provider": profile["provider"],
                "model": profile["model"],
                "is_demo": False,
                "imported_by_id": owner.pk,
            },
        )
        mine = existing.imported_by_id == owner.pk
        if created or (
            mine and (existing.provider, existing.model) == (profile["provider"], profile["model"])
        ):
            return existing
    raise TranscriptError(f"too many imported profiles named {base!r}")


def _exchange_row(doc: ExchangeDoc, *, turn: Turn, step_id: int | None) -> Exchange:
    return Exchange(
        turn=turn,
        conversation_id=turn.conversation_id,
        step_id=step_id,
        server=None,
        server_name=doc["server"] or "",
        seq=doc["seq"],
        channel=doc["channel"],
        direction=doc["direction"],
        label=doc["label"],
        jsonrpc_id=doc["jsonrpc_id"],
        request_headers=doc["request_headers"],
        request_body=doc["request_body"],
        response_headers=doc["response_headers"],
        response_body=doc["response_body"],
        status=doc["status"],
        error=doc["error"],
        started_at=_when(doc["started_at"], "exchange"),
        duration_ms=float(doc["duration_ms"]) if doc["duration_ms"] is not None else None,
        chain_version=doc.get("chain_version", LEGACY),
        prev_hash=doc["prev_hash"],
        hash=doc["hash"],
    )


def _import_turn(conversation: Conversation, doc: TurnDoc) -> None:
    turn = Turn.objects.create(
        conversation=conversation,
        seq=doc["seq"],
        question=doc["question"],
        status=doc["status"],
        answer=doc["answer"],
        error=doc["error"],
        paradigm=doc["paradigm"],
        tool_choice=doc["tool_choice"],
        tool_choice_name=doc["tool_choice_name"],
        model_name=doc["model"],
        tools=doc["tools"],
        transcript=doc["transcript"],
        created_at=_when(doc["created_at"], "turn"),
        started_at=_when_or_none(doc["started_at"], "turn"),
        finished_at=_when_or_none(doc["finished_at"], "turn"),
        seal=doc.get("seal", ""),
        seal_steps=doc.get("seal_steps", []),
    )
    steps = []
    for step in doc["steps"]:
        started = _when(step["started_at"], "step")
        finished = _when_or_none(step["finished_at"], "step")
        steps.append(
            Step(
                turn=turn,
                seq=step["seq"],
                kind=step["kind"],
                status=step["status"],
                title=step["title"],
                prompt=step["prompt"],
                prompt_exact=step["prompt_exact"],
                prompt_source=step["prompt_source"],
                tokens=step["tokens"],
                usage=step["usage"],
                text=step["text"],
                calls=step["calls"],
                diagnostics=step["diagnostics"],
                server=None,
                server_name=step["server"] or "",
                tool_name=step["tool_name"],
                arguments=step["arguments"],
                result=step["result"],
                is_error=step["is_error"],
                error=step["error"],
                started_at=started,
                finished_at=finished,
                updated_at=finished or started,
            )
        )
    Step.objects.bulk_create(steps)
    new_ids = {step["id"]: row.pk for step, row in zip(doc["steps"], steps, strict=True)}
    children = []
    for step, row in zip(doc["steps"], steps, strict=True):
        if step["parent"] is not None:
            row.parent_id = new_ids[step["parent"]]
            children.append(row)
    if children:
        Step.objects.bulk_update(children, ["parent"])
    # Inserted in chain order, so equal seqs keep their original tie-break (the id).
    by_seq = {step["seq"]: new_ids[step["id"]] for step in doc["steps"]}
    Exchange.objects.bulk_create(
        _exchange_row(exchange, turn=turn, step_id=by_seq[step_seq] if step_seq is not None else None)
        for step_seq, exchange in _chain_order(doc)
    )


# What ``imported_meta["verification"]["status"]`` says about the file's own chain.
VERIFIED_HERE = "this-installation"
VERIFIED_LEGACY = "legacy-unkeyed"
NOT_VERIFIABLE = "other-installation"
VERIFIED_SIGNATURE = "signed-elsewhere"


def _file_verdict(conversation: Conversation, document: TranscriptDoc) -> JSONDict:
    """Check the file's own chain, as the file states it, on the rows just made from it.

    A signed file (``integrity.signature``) is checked against its signature first: any record
    changed since it was signed is refused, naming it. A file sealed with this installation's key
    (its ``integrity.key_id`` is ours) is also verified record by record, anchors included. A
    signed file of another installation is accepted as signed by the key it names (its
    fingerprint is shown, for the reader to compare with the exporter's).
    A file of records made before keyed sealing has only the unkeyed chain, which is checked
    (it shows the file is consistent; anyone can recompute it). A file that names another key
    cannot be checked here: it is imported, and says so.

    Raises:
        TranscriptError: the file's chain does not verify.
    """
    block = document["conversation"]
    exchanges = [exchange for turn in document["turns"] for _, exchange in _chain_order(turn)]
    keyed = any(turn.get("seal") for turn in document["turns"]) or any(
        exchange.get("chain_version", LEGACY) != LEGACY for exchange in exchanges
    )
    integrity = block.get("integrity")
    claimed = integrity["key_id"] if integrity else ""
    signed = integrity.get("signature") if integrity else None
    ours = keyed and claimed == key_id()
    if not ours and keyed and not signed:
        return {
            "status": NOT_VERIFIABLE,
            "key_id": claimed,
            "detail": "sealed with another installation's key"
            + (f" (key id {claimed})" if claimed else " (no key id)")
            + " and not signed: it verifies internally only",
        }
    report = ChainReport(True, 0)
    if ours or not keyed:
        anchor = (integrity["turns"], integrity["head"], integrity["anchor"]) if keyed and integrity else None
        report = conversation_verify(conversation=conversation, identity=block["id"], anchor=anchor)
        if not report.intact:
            raise TranscriptError(
                f"the hash chain does not verify at {report.where}: {report.reason}. "
                "The transcript was changed after it was exported; it is not imported."
            )
    if signed:
        signature = manifest_verify(conversation=conversation, identity=block["id"], signed=signed)
        if not signature.intact:
            raise TranscriptError(
                f"the signature does not verify at {signature.where}: {signature.reason}. "
                "The transcript was changed after it was exported; it is not imported."
            )
        if not ours:
            signer = public_key_fingerprint(str(signed.get("public_key")))
            return {
                "status": VERIFIED_SIGNATURE,
                "key_id": claimed,
                "signer": signer,
                "detail": f"signed by the key with fingerprint {signer}, not this installation's: every record "
                "is as the holder of that key exported it (compare the fingerprint with the one the "
                "exporter's `manage.py verify --public-key` prints)",
            }
    if keyed:
        return {
            "status": VERIFIED_HERE,
            "key_id": claimed,
            "detail": f"verified with this installation's key: all {report.checked} exchanges and "
            f"{report.sealed_turns} sealed turns are as they were exported",
        }
    return {
        "status": VERIFIED_LEGACY,
        "key_id": "",
        "detail": f"its unkeyed hash chain over {report.checked} exchanges is consistent (made before "
        "keyed sealing: anyone can recompute such a chain, so it does not prove where the file came from)",
    }


def transcript_import(*, data: str | bytes, owner: AbstractBaseUser) -> Conversation:
    """Bring an exported ``json`` transcript back as a read-only conversation owned by ``owner``.

    Evidence, not authority: the conversation belongs to the importer, whatever the file says
    its owner was; ``imported_meta`` keeps what the file *claims* (original id, owner, model
    profile, servers, title, paradigm, tool choice, creation time), who imported it and when,
    and what checking the file's own chain found (``_file_verdict``). No object anyone else
    sees is created (``_imported_profile``). Everything is created in one transaction with new
    ids and every recorded value as it was (not redacted again), then re-chained and re-sealed
    under this installation's key: from then on a change is detected like on any record. A
    re-export is byte-identical apart from ``ID_KEYS``. ``Conversation.created_at`` is the
    import time: retention counts from when this installation received the record. Server
    names go to ``server_name``; no local server row is linked.

    A transcript whose chain does not verify is refused: it was changed after export.

    Raises:
        TranscriptError: not JSON, not a version-1 transcript, a missing or mistyped key, an
            inconsistent structure, or a broken hash chain — nothing is stored then.
    """
    document = _parse(data)
    block = document["conversation"]
    meta = cast(JSONDict, {key: value for key, value in block.items() if key != "id"})
    meta.pop("integrity", None)
    meta.update(
        original_id=block["id"],
        imported_at=timezone.now().isoformat(),
        imported_by=owner.get_username(),
        format_version=VERSION,
    )
    with transaction.atomic():
        conversation = Conversation.objects.create(
            owner_id=owner.pk,
            title=block["title"] or "untitled",
            model_profile=_imported_profile(block["model_profile"], owner),
            paradigm=block["paradigm"],
            tool_choice=block["tool_choice"],
            tool_choice_name=block["tool_choice_name"],
            imported_meta=meta,
        )
        for turn in document["turns"]:
            _import_turn(conversation, turn)
        meta["verification"] = _file_verdict(conversation, document)
        Conversation.objects.filter(pk=conversation.pk).update(imported_meta=meta)
        conversation.imported_meta = meta
        conversation_rechain(conversation=conversation, actor_name=owner.get_username())
    return conversation
