"""OTLP traces in: spans that follow the GenAI and MCP conventions as a read-only conversation.

``trace_imports`` takes OTLP/JSON or OTLP/protobuf (an ``ExportTraceServiceRequest``, as this
app's ``otel``/``otlp`` exports or any OpenTelemetry SDK writes them) and makes the transcript
document of ``conversations.record.transcripts.document`` out of it — one conversation per
``gen_ai.conversation.id`` or, without one, per trace; one turn per trace, one step per
model call (``chat``, ``text_completion``, ``generate_content``) and per tool call
(``execute_tool``) — then imports that through ``importing.transcript_import``, so the result
renders in the same rows as any conversation. A trace holds no raw bodies, so such a
conversation has steps and no exchanges. What could not be mapped (other spans, attributes
nothing reads) is listed in ``imported_meta["unmapped"]`` and in the import's verdict.
See docs/traces.md §6.

``conversation_file_import`` is the one entry point for a file of unknown kind: a ``json``
transcript, OTLP, or a ``jsonl`` export (refused with a message naming the formats to use).
"""

from __future__ import annotations

import base64
import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from conversations.loop.providers import OTEL_PROVIDER_NAMES
from conversations.models import Conversation, Step, Turn
from conversations.record.transcripts.fields import FORMAT, VERSION
from conversations.record.transcripts.importing import TranscriptError, imported_meta_store, transcript_import
from conversations.record.transcripts.otel_foreign import genai_attributes
from conversations.secret_sources import active_redactor
from conversations.typealias import JSONDict, JSONList, JSONValue

MODEL_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})
# The ModelProfile.provider an imported trace's gen_ai.provider.name (or the older
# gen_ai.system) stands for: the first wire format of that name.
PROVIDER_KEYS = {name: key for key, name in reversed(list(OTEL_PROVIDER_NAMES.items()))}
# Attributes the mapping reads; any other attribute of a mapped span is listed as unmapped.
READ_ATTRIBUTES = frozenset(
    {
        "gen_ai.operation.name",
        "gen_ai.provider.name",
        "gen_ai.system",
        "gen_ai.request.model",
        "gen_ai.response.model",
        "gen_ai.response.id",
        "gen_ai.response.finish_reasons",
        "gen_ai.conversation.id",
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.system_instructions",
        "gen_ai.tool.definitions",
        "gen_ai.usage.input_tokens",
        "gen_ai.usage.output_tokens",
        "gen_ai.tool.name",
        "gen_ai.tool.call.id",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
        "gen_ai.tool.description",
        "gen_ai.tool.type",
        "error.type",
        "inspector.step.seq",
        "inspector.step.kind",
        "inspector.step.title",
        "inspector.mcp.server",
        "inspector.turn.seq",
        "inspector.turn.status",
        "inspector.paradigm",
        "inspector.tool_choice",
    }
)
STEP_KINDS = frozenset(Step.Kind.values)


def _hex(value: str) -> str:
    return base64.b64decode(value).hex() if value else ""


def _any(value: dict[str, Any]) -> JSONValue:
    """An OTLP ``AnyValue`` (JSON mapping) as a plain value."""
    if "arrayValue" in value:
        return [_any(v) for v in value["arrayValue"].get("values", []) if isinstance(v, dict)]
    if "kvlistValue" in value:
        pairs = value["kvlistValue"].get("values", [])
        return {str(p.get("key")): _any(p.get("value") or {}) for p in pairs if isinstance(p, dict)}
    if "intValue" in value:
        return int(str(value["intValue"]))
    return next(iter(value.values()), None)


@dataclass
class _Span:
    trace_id: str
    span_id: str
    parent_id: str
    name: str
    start: int
    end: int
    failed: bool
    message: str
    attributes: dict[str, JSONValue]
    service: str
    # Attributes of another instrumentation read into the GenAI ones (otel_foreign).
    read: frozenset[str] = frozenset()

    @property
    def operation(self) -> str:
        return str(self.attributes.get("gen_ai.operation.name") or "")


def _requests(data: str | bytes) -> list[dict[str, Any]]:
    """The OTLP request(s) of a file: OTLP/JSON (one object, or one a line), or OTLP/protobuf.

    Raises:
        TranscriptError: neither.
    """
    raw = data if isinstance(data, bytes) else data.encode()
    if raw.lstrip()[:1] in (b"{", b"["):
        text = raw.decode(errors="replace")
        try:
            value = json.loads(text)
            values = value if isinstance(value, list) else [value]
        except (ValueError, RecursionError):  # RecursionError: JSON nested thousands deep
            try:
                values = [json.loads(line) for line in text.splitlines() if line.strip()]
            except (ValueError, RecursionError) as exc:
                raise TranscriptError(f"not OTLP/JSON: {exc}") from exc
        return [v for v in values if isinstance(v, dict) and "resourceSpans" in v]
    try:
        message = ExportTraceServiceRequest.FromString(raw)
    except DecodeError as exc:
        raise TranscriptError(
            "not OTLP: neither OTLP/JSON nor an OTLP/protobuf ExportTraceServiceRequest"
        ) from exc
    request = MessageToDict(message, use_integers_for_enums=True)
    for resource in request.get("resourceSpans", []):
        for scope in resource.get("scopeSpans", []):
            for span in scope.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    span[key] = _hex(span.get(key, ""))
    return [request]


def _attributes(values: Any) -> dict[str, JSONValue]:
    """OTLP ``KeyValue``s as a mapping; an entry without a key or value is left out."""
    return {
        str(a["key"]): _any(a["value"] if isinstance(a.get("value"), dict) else {})
        for a in (values if isinstance(values, list) else [])
        if isinstance(a, dict) and "key" in a
    }


def _spans(requests: list[dict[str, Any]]) -> list[_Span]:
    spans: list[_Span] = []
    for request in requests:
        for resource in request.get("resourceSpans", []):
            resource_attrs = _attributes((resource.get("resource") or {}).get("attributes"))
            service = str(resource_attrs.get("service.name") or "an instrumented application")
            for scope in resource.get("scopeSpans", []):
                for span in scope.get("spans", []):
                    status = span.get("status") or {}
                    attributes = _attributes(span.get("attributes"))
                    mapped, read = genai_attributes(attributes)
                    attributes.update(mapped)
                    spans.append(
                        _Span(
                            trace_id=str(span.get("traceId", "")),
                            span_id=str(span.get("spanId", "")),
                            parent_id=str(span.get("parentSpanId", "") or ""),
                            name=str(span.get("name", "")),
                            start=int(span.get("startTimeUnixNano", 0)),
                            end=int(span.get("endTimeUnixNano", 0)),
                            failed=status.get("code") in (2, "STATUS_CODE_ERROR"),
                            message=str(status.get("message", "")),
                            attributes=attributes,
                            service=service,
                            read=frozenset(read),
                        )
                    )
    return spans


def _iso(nanos: int) -> str:
    return datetime.fromtimestamp(nanos / 1e9, tz=UTC).isoformat()


def _json_attr(value: JSONValue) -> JSONValue:
    if isinstance(value, str):
        try:
            return json.loads(value)  # type: ignore[no-any-return]
        except (ValueError, RecursionError):
            return value
    return value


def _parts(messages: JSONValue, role: str | None = None) -> list[JSONDict]:
    return [
        part
        for message in (messages if isinstance(messages, list) else [])
        if isinstance(message, dict) and (role is None or message.get("role") == role)
        for part in (message.get("parts") if isinstance(message.get("parts"), list) else [])  # type: ignore[union-attr]
        if isinstance(part, dict)
    ]


def _texts(parts: list[JSONDict]) -> str:
    return "\n".join(str(p.get("content", "")) for p in parts if p.get("type") == "text")


def _readable(system: JSONValue, messages: JSONValue) -> str:
    """The input of a model call as readable text (not the prompt the model read: a trace has none)."""
    lines = [f"[system]\n{_texts(_parts([{'role': 'system', 'parts': system}]))}"] if system else []
    for message in messages if isinstance(messages, list) else []:
        if isinstance(message, dict):
            body = json.dumps(message.get("parts", []), ensure_ascii=False, indent=2)
            lines.append(f"[{message.get('role', '?')}]\n{body}")
    return "\n\n".join(lines)


@dataclass
class _Mapping:
    """The document being made, and what had no place in it."""

    unmapped: list[str] = field(default_factory=list)
    attributes: set[str] = field(default_factory=set)
    # The trace's own ids, by turn seq, so a re-export names the same spans (otel.trace_span_ids).
    span_ids: JSONDict = field(default_factory=dict)
    next_id: int = 1

    def new_id(self) -> int:
        self.next_id += 1
        return self.next_id


def _model_step(span: _Span, seq: int, sid: int) -> JSONDict:
    attrs = span.attributes
    outputs = _json_attr(attrs.get("gen_ai.output.messages"))
    output_parts = _parts(outputs)
    calls: JSONList = [
        {
            "id": p.get("id"),
            "name": p.get("name"),
            "tool": p.get("name"),
            "arguments": p.get("arguments") if isinstance(p.get("arguments"), dict) else None,
            "arguments_text": json.dumps(p.get("arguments"), ensure_ascii=False),
            "valid": True,
            "error": "",
            "server": None,
        }
        for p in output_parts
        if p.get("type") == "tool_call"
    ]
    usage = {
        key: attrs[name]
        for key, name in (
            ("input_tokens", "gen_ai.usage.input_tokens"),
            ("output_tokens", "gen_ai.usage.output_tokens"),
        )
        if isinstance(attrs.get(name), int)
    }
    content = "gen_ai.input.messages" in attrs
    return _step(
        span,
        seq,
        sid,
        kind=str(attrs.get("inspector.step.kind") or (Step.Kind.DECIDE if calls else Step.Kind.ANSWER)),
        title=span.name,
        prompt=_readable(
            _json_attr(attrs.get("gen_ai.system_instructions")),
            _json_attr(attrs.get("gen_ai.input.messages")),
        ),
        prompt_source="the span's gen_ai.input.messages (a trace holds no prompt text)" if content else "",
        usage=usage,
        text=_texts(output_parts),
        calls=calls,
    )


def _tool_step(span: _Span, seq: int, sid: int, parent: int | None) -> JSONDict:
    attrs = span.attributes
    return _step(
        span,
        seq,
        sid,
        kind=Step.Kind.TOOL,
        title=span.name,
        parent=parent,
        server=str(attrs.get("inspector.mcp.server") or "")[:40] or None,
        tool_name=str(attrs.get("gen_ai.tool.name") or span.name.removeprefix("execute_tool "))[:200],
        arguments=_json_attr(attrs.get("gen_ai.tool.call.arguments")),
        result=_json_attr(attrs.get("gen_ai.tool.call.result")),
        is_error=attrs.get("error.type") == "tool_error",
    )


def _step(
    span: _Span, seq: int, sid: int, *, kind: str, title: str, parent: int | None = None, **fields: Any
) -> JSONDict:
    step: JSONDict = {
        "id": sid,
        "parent": parent,
        "seq": seq,
        "kind": kind if kind in STEP_KINDS else Step.Kind.ERROR,
        "status": Step.Status.ERROR if span.failed else Step.Status.OK,
        "title": title[:300],
        "prompt": "",
        "prompt_exact": False,
        "prompt_source": "",
        "tokens": {},
        "usage": {},
        "text": "",
        "calls": [],
        "diagnostics": [],
        "server": None,
        "tool_name": "",
        "arguments": None,
        "result": None,
        "is_error": False,
        "error": (span.message or "the span's status is an error") if span.failed else "",
        "started_at": _iso(span.start),
        "finished_at": _iso(max(span.end, span.start)),
        "exchanges": [],
    }
    step.update(fields)
    return step


def _own_step_kind(span: _Span) -> str | None:
    """The kind of a step span of this app's export (connect, fallback, error); its exchanges'
    spans name their step's kind too, and are not steps."""
    kind = span.attributes.get("inspector.step.kind")
    if "inspector.exchange.id" in span.attributes or kind not in STEP_KINDS - {"decide", "answer", "tool"}:
        return None
    return str(kind)


def _recorded_seq(span: _Span) -> int | None:
    """The step number this app's export wrote on the span, if it is one."""
    value = span.attributes.get("inspector.step.seq")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _context(span: _Span) -> str:
    """What an unmapped span was, in a few words: its MCP method, or its HTTP request."""
    attrs = span.attributes
    if "mcp.method.name" in attrs:
        return f" ({attrs['mcp.method.name']}, no body in a trace)"
    method = attrs.get("http.request.method") or attrs.get("http.method")
    target = (
        attrs.get("url.full") or attrs.get("http.url") or attrs.get("url.path") or attrs.get("http.target")
    )
    if method or target:
        return f" (HTTP {' '.join(str(v) for v in (method, target) if v)})"
    return ""


def _maps_to_a_step(span: _Span) -> bool:
    return (
        span.operation in MODEL_OPERATIONS
        or span.operation == "execute_tool"
        or _own_step_kind(span) is not None
    )


def _turn(spans: list[_Span], turn_seq: int, mapping: _Mapping) -> JSONDict:
    """One trace as a turn."""
    ids = {span.span_id for span in spans}
    roots = [span for span in spans if span.parent_id not in ids]
    root = next((s for s in roots if s.operation == "invoke_agent"), None)
    # Another tool's trace may have a root of its own that maps to no step (an agent's "turn", an
    # HTTP request): its id is kept as the turn's, so a re-export adds no span a backend lacks.
    own_root = root or (roots[0] if len(roots) == 1 and not _maps_to_a_step(roots[0]) else None)
    ordered = sorted(spans, key=lambda s: (_recorded_seq(s) or 1 << 30, s.start))
    steps: list[JSONDict] = []
    kept_steps: dict[str, JSONValue] = {}
    mapping.span_ids[str(turn_seq)] = {
        "trace": spans[0].trace_id,
        "root": own_root.span_id if own_root else None,
        "steps": cast(JSONValue, kept_steps),
    }
    by_call: dict[str, int] = {}
    last_model: int | None = None
    recorded = [_recorded_seq(s) for s in ordered if s is not root and _maps_to_a_step(s)]
    # This app's own export numbers its steps; a trace of any other tool may number none (all([])
    # would be true then) or only some: then the steps are numbered in order of time.
    own_seqs = bool(recorded) and None not in recorded and len(set(recorded)) == len(recorded)
    for span in ordered:
        sid = mapping.new_id()
        seq = (own_seqs and _recorded_seq(span)) or len(steps) + 1
        if span.operation in MODEL_OPERATIONS:
            step = _model_step(span, seq, sid)
            last_model = sid
            for call in step["calls"]:  # type: ignore[union-attr]
                if isinstance(call, dict) and isinstance(call.get("id"), str):
                    by_call[str(call["id"])] = sid
        elif span.operation == "execute_tool":
            call_id = span.attributes.get("gen_ai.tool.call.id")
            step = _tool_step(
                span, seq, sid, by_call.get(call_id, last_model) if isinstance(call_id, str) else last_model
            )
        elif span is root:
            continue
        elif (kind := _own_step_kind(span)) is not None:
            step = _step(
                span, seq, sid, kind=kind, title=str(span.attributes.get("inspector.step.title") or span.name)
            )
        else:
            mapping.unmapped.append(f"span {span.name!r}{_context(span)}")
            continue
        kept_steps[str(seq)] = span.span_id
        mapping.attributes.update(
            k
            for k in span.attributes
            if k not in READ_ATTRIBUTES and k not in span.read and not k.startswith("inspector.")
        )
        steps.append(step)
    models = [s for s in ordered if s.operation in MODEL_OPERATIONS]
    first = models[0].attributes if models else {}
    question = _texts(_parts(_json_attr(first.get("gen_ai.input.messages")), "user")[:1])
    answer = steps[-1]["text"] if steps and steps[-1]["kind"] in ("answer", "decide") else ""
    failed = root.failed if root else any(s.failed for s in spans)
    start = min(s.start for s in spans)
    end = max(s.end for s in spans)
    model = str(
        first.get("gen_ai.request.model")
        or (root.attributes.get("gen_ai.request.model") if root else "")
        or ""
    )
    status = str(
        (root.attributes.get("inspector.turn.status") if root else None)
        or (Turn.Status.FAILED if failed else Turn.Status.DONE)
    )
    return {
        "id": mapping.new_id(),
        "seq": turn_seq,
        "question": question or "(the trace holds no input messages)",
        "status": status if status in Turn.Status.values else Turn.Status.DONE,
        "answer": str(answer) if status == Turn.Status.DONE else "",
        "error": (root.message if root else "") or ("a span of the trace failed" if failed else ""),
        "paradigm": str((root.attributes.get("inspector.paradigm") if root else None) or "native")[:16],
        "tool_choice": str((root.attributes.get("inspector.tool_choice") if root else None) or "auto")[:10],
        "tool_choice_name": "",
        "model": model[:120],
        "tools": offered_tools(models),
        "transcript": [],
        "created_at": _iso(start),
        "started_at": _iso(start),
        "finished_at": _iso(end),
        "steps": cast(JSONValue, steps),
        "exchanges": [],
    }


def offered_tools(models: list[_Span]) -> JSONList:
    """The tools the trace's model calls were offered (``gen_ai.tool.definitions``, in the
    conventions' shape or the OpenAI request's ``{"type": "function", "function": {...}}``), as
    the turn's tool list (``name``, ``description``, ``inputSchema``), each name once."""
    tools: dict[str, JSONDict] = {}
    for span in models:
        definitions = _json_attr(span.attributes.get("gen_ai.tool.definitions"))
        for definition in definitions if isinstance(definitions, list) else []:
            if not isinstance(definition, dict):
                continue
            inner = definition.get("function")
            fields = inner if isinstance(inner, dict) else definition
            name = fields.get("name")
            if not isinstance(name, str) or not name or name in tools:
                continue
            schema = fields.get("parameters")
            description = fields.get("description")
            tools[name] = {
                "name": name[:200],
                "description": description if isinstance(description, str) else "",
                "inputSchema": schema if isinstance(schema, dict) else {"type": "object", "properties": {}},
            }
    return list(tools.values())


def trace_document(spans: list[_Span]) -> tuple[JSONDict, list[str], str]:
    """The transcript document of the spans, what was not mapped, and the conversation's trace origin."""
    document, mapping, origin = _trace_document(spans)
    return document, mapping.unmapped, origin


def _trace_document(spans: list[_Span]) -> tuple[JSONDict, _Mapping, str]:
    if not spans:
        raise TranscriptError("the OTLP file holds no spans")
    mapping = _Mapping()
    traces: dict[str, list[_Span]] = {}
    for span in spans:
        traces.setdefault(span.trace_id, []).append(span)
    ordered = sorted(traces.values(), key=lambda group: min(s.start for s in group))
    turns = [_turn(group, n, mapping) for n, group in enumerate(ordered, start=1)]
    conversation_ids = [
        s.attributes["gen_ai.conversation.id"] for s in spans if s.attributes.get("gen_ai.conversation.id")
    ]
    origin = (
        str(conversation_ids[0])
        if conversation_ids
        else str(uuid.uuid5(uuid.NAMESPACE_URL, f"otlp:{ordered[0][0].trace_id}"))
    )
    provider_name = next(
        (
            str(s.attributes.get("gen_ai.provider.name") or s.attributes.get("gen_ai.system"))
            for s in spans
            if s.attributes.get("gen_ai.provider.name") or s.attributes.get("gen_ai.system")
        ),
        "openai",
    )
    model = next((str(t["model"]) for t in turns if t["model"]), "unknown")
    service = spans[0].service
    document: JSONDict = {
        "format": FORMAT,
        "version": VERSION,
        "conversation": {
            "id": origin,
            "title": f"Trace from {service}"[:200],
            "owner": service,
            "model_profile": {
                "name": f"otlp: {service}"[:80],
                "provider": PROVIDER_KEYS.get(provider_name, "openai_chat"),
                "model": model[:120],
                "base_url": "",
                "demo": False,
            },
            "paradigm": "native",
            "tool_choice": "auto",
            "tool_choice_name": "",
            "servers": [],
            "created_at": turns[0]["created_at"],
        },
        "turns": cast(JSONValue, turns),
    }
    if mapping.attributes:
        mapping.unmapped.append(f"attributes {', '.join(sorted(mapping.attributes))}")
    if provider_name not in PROVIDER_KEYS:
        mapping.unmapped.append(f"gen_ai.provider.name {provider_name!r} (shown as an OpenAI Chat profile)")
    return document, mapping, origin


def _conversations(spans: list[_Span]) -> list[list[_Span]]:
    """The spans of each conversation, in order of time: the traces that name the same
    ``gen_ai.conversation.id`` (this app's export writes one trace a turn) are one conversation,
    and any other trace is a conversation of its own."""
    traces: dict[str, list[_Span]] = {}
    for span in spans:
        traces.setdefault(span.trace_id, []).append(span)
    groups: dict[str, list[_Span]] = {}
    for trace_id, group in traces.items():
        named = next(
            (
                str(s.attributes["gen_ai.conversation.id"])
                for s in group
                if s.attributes.get("gen_ai.conversation.id")
            ),
            None,
        )
        groups.setdefault(f"conversation:{named}" if named else f"trace:{trace_id}", []).extend(group)
    return sorted(groups.values(), key=lambda group: min(s.start for s in group))


def trace_imports(*, data: str | bytes, owner: AbstractBaseUser) -> list[Conversation]:
    """Bring OTLP traces (JSON or protobuf) in as read-only conversations of ``owner``: one for
    each conversation the file holds (``_conversations``), all or none.

    Raises:
        TranscriptError: not OTLP, no spans, or a document the transcript import refuses.
    """
    spans = _spans(_requests(data))
    if not spans:
        raise TranscriptError("the OTLP file holds no spans")
    with transaction.atomic():
        return [_trace_import(spans=group, owner=owner) for group in _conversations(spans)]


def _trace_import(*, spans: list[_Span], owner: AbstractBaseUser) -> Conversation:
    document, mapping, origin = _trace_document(spans)
    # A trace, unlike an export of a record, never went through this installation's redactor
    # (another tool's spans carry prompts, tool results and URLs as they were): it goes through
    # it now, like every other write.
    redact = active_redactor()
    document = cast(JSONDict, redact.json(document))
    unmapped, mapping_ids = [redact.text(item) for item in mapping.unmapped], mapping.span_ids
    # A trace holds only part of a record: it is never compared with a local conversation (and
    # never verifies with this installation's key: it is shown as an unverified import).
    conversation = transcript_import(data=json.dumps(document), owner=owner, compare_local=False)
    meta = dict(conversation.imported_meta or {})
    noted = f"; not mapped: {'; '.join(unmapped)}" if unmapped else "; every span was mapped"
    meta.update(
        source="otlp",
        trace_origin=origin,
        unmapped=list(unmapped),
        span_ids=mapping_ids,
        verification={
            "status": "otlp-trace",
            "key_id": "",
            "detail": f"imported from OpenTelemetry traces ({len(spans)} spans): a trace holds messages and "
            f"attributes, not the raw bodies, so it has no hash chain to check{noted}"[:2000],
        },
    )
    imported_meta_store(conversation=conversation, meta=meta)
    return conversation


def _looks_like_jsonl_export(data: str | bytes) -> bool:
    text = data.decode(errors="replace") if isinstance(data, bytes) else data
    first = text.lstrip().split("\n", 1)[0]
    try:
        line = json.loads(first)
    except (ValueError, RecursionError):
        return False
    return (
        isinstance(line, dict) and "turn_seq" in line and "conversation_id" in line and "\n" in text.strip()
    )


def _is_otlp(data: str | bytes) -> bool:
    """OTLP/JSON (it names ``resourceSpans``) or bytes that parse as an OTLP/protobuf request."""
    raw = data if isinstance(data, bytes) else data.encode()
    if raw.lstrip()[:1] in (b"{", b"["):
        return b'"resourceSpans"' in raw
    try:
        return bool(ExportTraceServiceRequest.FromString(raw).resource_spans)
    except DecodeError:
        return False


def conversation_file_import(*, data: str | bytes, owner: AbstractBaseUser) -> Conversation:
    """``conversation_files_import``'s first conversation (an OTLP file may hold several, and
    all of them are imported)."""
    return conversation_files_import(data=data, owner=owner)[0]


def conversation_files_import(*, data: str | bytes, owner: AbstractBaseUser) -> list[Conversation]:
    """Any importable file: a ``json`` transcript, or OTLP traces (JSON or protobuf), which may
    hold several conversations.

    Raises:
        TranscriptError: a ``jsonl`` export (it holds only exchanges: import the ``json`` export
            or an OTLP file instead), or a file neither import accepts.
    """
    if _looks_like_jsonl_export(data):
        raise TranscriptError(
            "this is a jsonl export (one exchange a line): it cannot rebuild a conversation. Import the "
            "`json` export of the same conversation, or its OpenTelemetry export (otel or otlp)"
        )
    if _is_otlp(data):
        return trace_imports(data=data, owner=owner)
    return [transcript_import(data=data, owner=owner)]
