"""Google Gemini ``generateContent`` (docs/wire-formats.md §5), over plain httpx2.

Base URL convention: the host without a version (``https://generativelanguage.googleapis.com``);
requests go to ``{base}/v1beta/models/{model}:generateContent`` (a base URL already ending in
``/v1beta`` or ``/v1`` is used as is; a ``models/`` prefix on the model name is dropped). The key
travels in the ``x-goog-api-key`` header (masked in the record), never in the URL. The
in-process demo model's base URL is ``http://127.0.0.1/demo-model``.

Request shape:

* system messages become ``systemInstruction``; user text ``{role: "user", parts: [{text}]}``;
* tools are ``tools: [{functionDeclarations: [{name, description, parameters}]}]``. ``parameters``
  is Gemini's OpenAPI-3.0 subset, so each MCP input schema goes through :func:`gemini_schema`:
  ``$ref`` is inlined, a type list becomes one type plus ``nullable``, ``oneOf`` becomes
  ``anyOf``, a string ``const`` a one-value ``enum``, and keywords the subset lacks
  (``additionalProperties``, ``$schema``, ``exclusiveMinimum``, ...) are dropped — the request body
  shows what was sent, the returned notes say what changed, and the agent loop still validates the
  arguments against the original schema. Tool names are already Gemini-safe (``ToolDef.provider_name``
  starts with a letter and uses ``[A-Za-z0-9_-]``, docs/wire-formats.md §10);
* tool_choice auto / required / named / none become ``toolConfig.functionCallingConfig.mode``
  ``AUTO`` / ``ANY`` / ``ANY`` + ``allowedFunctionNames: [name]`` / ``NONE``; Gemini has no
  parallel-calls switch, so ``parallel_tool_calls`` is not sent;
* a model turn is ``{role: "model", parts}`` with text and ``functionCall: {name, args, id?}``
  parts. When the message carries the parts exactly as the model sent them
  (``Message.echo["gemini"]["parts"]``, kept for replies with ``thoughtSignature``s) and they
  call the same functions, those parts are sent instead, unchanged — Gemini 3 refuses a
  ``functionCall`` whose signature is missing (docs/wire-formats.md §5.4, §13);
* consecutive results become one user turn of ``functionResponse: {name, response, id?}`` parts,
  ``response: {output: text}`` or ``{error: text}`` for an error result (docs/wire-formats.md §11);
* structured output: ``generationConfig.responseMimeType: "application/json"`` with the
  ``json_schema`` as ``responseJsonSchema`` (keywords outside the documented list dropped,
  docs/wire-formats.md §5.5).

Reply: calls are found by their ``functionCall`` parts whatever the ``finishReason`` says (it is
``STOP`` for calls too); a call without an ``id`` gets a synthesized one, which is never sent back
(results pair by name and position). Thought parts (``thought: true``) are not answer text.

Streaming (``Endpoint.stream``) posts to ``:streamGenerateContent?alt=sse``; each event is a
whole response chunk. The raw stream is recorded verbatim, then the chunks' parts are
concatenated (adjacent plain text merged) and the last ``finishReason`` and ``usageMetadata``
kept; a ``functionCall`` arrives whole in one chunk on the Gemini API.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import ClassVar

from conversations.loop.llm import Message, ToolCall, ToolChoice, ToolDef
from conversations.loop.providers.base import Endpoint, ModelReply, ModelRequest
from conversations.loop.providers.excerpts import WireExcerpts, dicts, first
from conversations.loop.providers.http import (
    SYNTHESIZED_ID_PREFIX,
    SynthesizedCallIds,
    compact_json,
    error_detail,
    json_object,
    list_or_empty,
    object_or_empty,
    parse_sse,
    post_json,
    reply_read,
    stream_error,
    string_or_none,
)
from conversations.loop.providers.streaming import (
    SNAPSHOT_CALLS,
    DeltaCallback,
    LivePass,
    PartialCall,
    PartialEmitter,
    PartialReply,
    SseEvent,
    StreamErrorEvent,
    tail,
)
from conversations.loop.wire import WireExchange
from conversations.typealias import JSONDict, JSONValue

KEY = "gemini"

# The OpenAPI-3.0 ``Schema`` fields a function declaration's ``parameters`` accepts.
PARAMETER_KEYWORDS = frozenset(
    {
        "type",
        "format",
        "title",
        "description",
        "nullable",
        "enum",
        "maxItems",
        "minItems",
        "properties",
        "required",
        "minProperties",
        "maxProperties",
        "minLength",
        "maxLength",
        "pattern",
        "example",
        "anyOf",
        "propertyOrdering",
        "default",
        "items",
        "minimum",
        "maximum",
    }
)
# The JSON Schema keywords ``responseJsonSchema`` supports (docs/wire-formats.md §5.5).
RESPONSE_SCHEMA_KEYWORDS = frozenset(
    {
        "$id",
        "$defs",
        "$ref",
        "$anchor",
        "type",
        "format",
        "title",
        "description",
        "enum",
        "items",
        "prefixItems",
        "minItems",
        "maxItems",
        "minimum",
        "maximum",
        "anyOf",
        "oneOf",
        "properties",
        "additionalProperties",
        "required",
        "propertyOrdering",
    }
)
_FILTERED = {
    "SAFETY": "content_filter",
    "RECITATION": "content_filter",
    "BLOCKLIST": "content_filter",
    "PROHIBITED_CONTENT": "content_filter",
    "SPII": "content_filter",
    "IMAGE_SAFETY": "content_filter",
}


def model_url(base_url: str, model: str, *, stream: bool) -> str:
    base = base_url.rstrip("/")
    if not base.endswith(("/v1beta", "/v1")):
        base += "/v1beta"
    name = model.removeprefix("models/")
    return (
        f"{base}/models/{name}:streamGenerateContent?alt=sse"
        if stream
        else f"{base}/models/{name}:generateContent"
    )


# --- Schemas ---------------------------------------------------------------------------------


@dataclass
class _SchemaConverter:
    """Rewrites a JSON Schema into the ``parameters`` subset, noting every change."""

    definitions: JSONDict
    notes: list[str] = field(default_factory=list)

    def convert(self, node: JSONValue, path: str, refs: tuple[str, ...] = ()) -> JSONDict:
        if not isinstance(node, dict):
            self.notes.append(f"{path or '/'}: a non-object schema became an empty schema")
            return {}
        ref = string_or_none(node.get("$ref"))
        if ref is not None:
            node = self._resolve(node, ref, path, refs)
            refs = (*refs, ref)
        out: JSONDict = {}
        for keyword, value in node.items():
            where = f"{path}/{keyword}"
            if keyword == "type" and isinstance(value, list):
                self._type_list(value, out, where)
            elif keyword == "properties" and isinstance(value, dict):
                out["properties"] = {
                    name: self.convert(child, f"{where}/{name}", refs) for name, child in value.items()
                }
            elif keyword == "items" and isinstance(value, dict):
                out["items"] = self.convert(value, where, refs)
            elif keyword in ("anyOf", "oneOf") and isinstance(value, list):
                if keyword == "oneOf":
                    self.notes.append(f"{where}: oneOf sent as anyOf")
                out["anyOf"] = [self.convert(child, f"{where}/{i}", refs) for i, child in enumerate(value)]
            elif keyword == "allOf" and isinstance(value, list) and len(value) == 1:
                self.notes.append(f"{where}: the single allOf member was merged in")
                out.update(self.convert(value[0], f"{where}/0", refs))
            elif keyword == "const" and isinstance(value, str):
                self.notes.append(f"{where}: const sent as a one-value enum")
                out["enum"] = [value]
            elif keyword == "enum" and not (
                isinstance(value, list) and all(isinstance(v, str) for v in value)
            ):
                self.notes.append(f"{where}: dropped (Gemini enums hold strings only)")
            elif keyword in PARAMETER_KEYWORDS:
                out[keyword] = value
            elif keyword not in ("$ref", "$defs", "definitions"):
                self.notes.append(f"{where}: dropped (not in Gemini's Schema subset)")
        return out

    def _resolve(self, node: JSONDict, ref: str, path: str, refs: tuple[str, ...]) -> JSONDict:
        name = ref.rsplit("/", 1)[-1]
        target = self.definitions.get(name)
        if ref in refs or not isinstance(target, dict) or not ref.startswith(("#/$defs/", "#/definitions/")):
            why = "recursive" if ref in refs else "unresolvable"
            self.notes.append(f"{path or '/'}: {why} $ref {ref} replaced by an open object")
            return {"type": "object"}
        self.notes.append(f"{path or '/'}: $ref {ref} inlined")
        return {**target, **{key: value for key, value in node.items() if key != "$ref"}}

    def _type_list(self, types: list[JSONValue], out: JSONDict, where: str) -> None:
        named = [kind for kind in types if isinstance(kind, str) and kind != "null"]
        if "null" in types:
            out["nullable"] = True
        if len(named) == 1:
            out["type"] = named[0]
        elif named:
            out["anyOf"] = [{"type": kind} for kind in named]
        self.notes.append(
            f"{where}: type list {types} sent as " + ("one type + nullable" if "null" in types else "anyOf")
        )


def gemini_schema(schema: JSONDict) -> tuple[JSONDict, list[str]]:
    """``schema`` (an MCP inputSchema) in the OpenAPI subset of Gemini's ``parameters``, and the
    changes made, one note each. Never raises."""
    definitions = {
        **object_or_empty(schema.get("definitions")),
        **object_or_empty(schema.get("$defs")),
    }
    converter = _SchemaConverter(definitions)
    return converter.convert(schema, ""), converter.notes


def response_schema(schema: JSONValue, notes: list[str], path: str = "") -> JSONValue:
    """``schema`` limited to the keywords ``responseJsonSchema`` supports; drops are noted."""
    if not isinstance(schema, dict):
        return schema
    out: JSONDict = {}
    for keyword, value in schema.items():
        where = f"{path}/{keyword}"
        if keyword not in RESPONSE_SCHEMA_KEYWORDS:
            notes.append(f"{where}: dropped (not supported by responseJsonSchema)")
        elif keyword in ("properties", "$defs") and isinstance(value, dict):
            out[keyword] = {
                name: response_schema(child, notes, f"{where}/{name}") for name, child in value.items()
            }
        elif keyword in ("anyOf", "oneOf", "prefixItems") and isinstance(value, list):
            out[keyword] = [response_schema(child, notes, f"{where}/{i}") for i, child in enumerate(value)]
        elif keyword in ("items", "additionalProperties") and isinstance(value, dict):
            out[keyword] = response_schema(value, notes, where)
        else:
            out[keyword] = value
    return out


# --- Requests --------------------------------------------------------------------------------


def wire_tools(tools: list[ToolDef]) -> list[JSONValue]:
    declarations: list[JSONValue] = []
    for tool in tools:
        declaration: JSONDict = {"name": tool.provider_name}
        if tool.description:
            declaration["description"] = tool.description
        if tool.schema_field == "parametersJsonSchema":
            # A host preset that sends JSON Schema as it is (docs/hosts.md).
            declaration["parametersJsonSchema"] = tool.input_schema
            declarations.append(declaration)
            continue
        parameters, _notes = gemini_schema(tool.input_schema)
        if parameters.get("properties"):
            declaration["parameters"] = parameters
        declarations.append(declaration)
    return [{"functionDeclarations": declarations}]


def wire_tool_config(choice: ToolChoice) -> JSONDict:
    config: JSONDict
    if choice.mode == "named":
        config = {"mode": "ANY", "allowedFunctionNames": [choice.name or ""]}
    else:
        config = {"mode": {"auto": "AUTO", "required": "ANY", "none": "NONE"}[choice.mode]}
    return {"functionCallingConfig": config}


def _args(call: ToolCall) -> JSONDict:
    if call.arguments is not None:
        return call.arguments
    try:
        value = json.loads(call.arguments_text) if call.arguments_text.strip() else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _sent_id(call_id: str | None) -> str | None:
    """The id to send back: the model's own, never one this provider made up."""
    return call_id if call_id and not call_id.startswith(SYNTHESIZED_ID_PREFIX) else None


def _echoed_parts(message: Message) -> list[JSONValue] | None:
    """The model's raw parts, when kept and still calling the message's functions."""
    parts = list_or_empty(object_or_empty((message.echo or {}).get(KEY)).get("parts"))
    names = [
        object_or_empty(part.get("functionCall")).get("name")
        for part in parts
        if isinstance(part, dict) and "functionCall" in part
    ]
    if parts and names == [call.name for call in message.tool_calls]:
        return parts
    return None


def _model_parts(message: Message) -> list[JSONValue]:
    echoed = _echoed_parts(message)
    if echoed is not None:
        return echoed
    parts: list[JSONValue] = []
    if message.content:
        parts.append({"text": message.content})
    for call in message.tool_calls:
        function_call: JSONDict = {"name": call.name, "args": _args(call)}
        sent_id = _sent_id(call.id)
        if sent_id is not None:
            function_call["id"] = sent_id
        parts.append({"functionCall": function_call})
    return parts


def _function_response(message: Message, names: dict[str, str]) -> JSONDict:
    text = message.content or ""
    response: JSONDict = {
        "name": message.name or names.get(message.tool_call_id or "", ""),
        "response": {"error": text} if message.is_error else {"output": text},
    }
    sent_id = _sent_id(message.tool_call_id)
    if sent_id is not None:
        response["id"] = sent_id
    return {"functionResponse": response}


def wire_contents(messages: list[Message]) -> tuple[str, list[JSONValue]]:
    """The neutral conversation as (system instruction text, ``contents``)."""
    system: list[str] = []
    contents: list[JSONValue] = []
    names: dict[str, str] = {}
    results: list[JSONValue] | None = None  # the parts of the open function-response turn
    for message in messages:
        if message.role == "system":
            system.append(message.content or "")
        elif message.role == "tool":
            if results is None:
                results = []
                contents.append({"role": "user", "parts": results})
            results.append(_function_response(message, names))
        elif message.role == "user":
            results = None
            contents.append({"role": "user", "parts": [{"text": message.content or ""}]})
        else:
            results = None
            names.update({call.id: call.name for call in message.tool_calls})
            parts = _model_parts(message)
            if parts:
                contents.append({"role": "model", "parts": parts})
    return "\n\n".join(system), contents


def request_body(request: ModelRequest) -> JSONDict:
    system, contents = wire_contents(request.messages)
    body: JSONDict = {"contents": contents}
    if system:
        body["systemInstruction"] = {"parts": [{"text": system}]}
    if request.tools:
        body["tools"] = wire_tools(request.tools)
        body["toolConfig"] = wire_tool_config(request.tool_choice)
    response_format = request.response_format or {}
    generation: JSONDict = {}
    if response_format.get("type") in ("json_object", "json_schema"):
        generation["responseMimeType"] = "application/json"
        schema = object_or_empty(response_format.get("json_schema")).get("schema")
        if isinstance(schema, dict):
            generation["responseJsonSchema"] = response_schema(schema, [])
    if request.max_tokens is not None:
        generation["maxOutputTokens"] = request.max_tokens
    if request.temperature is not None:
        generation["temperature"] = request.temperature
    if request.stop:
        generation["stopSequences"] = list(request.stop)
    if generation:
        body["generationConfig"] = generation
    return body


# --- Replies ---------------------------------------------------------------------------------


def _reply(response: JSONDict, exchange: WireExchange, seed: str) -> ModelReply:
    """The neutral reply for a ``GenerateContentResponse`` (whole, or assembled from a stream).

    Raises:
        ValueError: no candidate and no block reason: nothing to read.
    """
    usage = object_or_empty(response.get("usageMetadata"))
    candidates = list_or_empty(response.get("candidates"))
    if not candidates:
        blocked = string_or_none(object_or_empty(response.get("promptFeedback")).get("blockReason"))
        if blocked is None:
            raise ValueError("no candidates in the response")
        return ModelReply(
            text=None,
            tool_calls=[],
            finish_reason="content_filter",
            exchange=exchange,
            usage=usage,
            refusal=f"the prompt was blocked (blockReason {blocked})",
        )
    candidate = object_or_empty(candidates[0])
    parts = list_or_empty(object_or_empty(candidate.get("content")).get("parts"))
    texts: list[str] = []
    calls: list[ToolCall] = []
    ids = SynthesizedCallIds(seed)
    for part in parts:
        part = object_or_empty(part)
        if "functionCall" in part:
            function_call = object_or_empty(part.get("functionCall"))
            calls.append(
                ToolCall(
                    id=string_or_none(function_call.get("id")) or ids(len(calls)),
                    name=string_or_none(function_call.get("name")) or "",
                    arguments_text=compact_json(function_call.get("args") or {}),
                )
            )
        elif isinstance(part.get("text"), str) and not part.get("thought"):
            texts.append(str(part["text"]))
    reason = string_or_none(candidate.get("finishReason")) or "STOP"
    if reason == "STOP":
        finish_reason = "tool_calls" if calls else "stop"
    elif reason == "MAX_TOKENS":
        finish_reason = "length"
    else:
        finish_reason = _FILTERED.get(reason, reason)
    keep = any(
        isinstance(part, dict) and ("thoughtSignature" in part or part.get("thought")) for part in parts
    )
    return ModelReply(
        text="".join(texts) if texts else None,
        tool_calls=calls,
        finish_reason=finish_reason,
        exchange=exchange,
        usage=usage,
        echo={KEY: {"parts": parts}} if keep else None,
    )


def _plain_text(part: JSONValue) -> bool:
    return isinstance(part, dict) and set(part) == {"text"} and isinstance(part["text"], str)


@dataclass
class _ChunkMerger:
    """Joins the chunks of a ``streamGenerateContent`` stream into one response: the first
    candidate's parts concatenated (adjacent plain text merged), the last ``finishReason`` and
    ``usageMetadata`` kept.

    ``emitter`` is told each new ``PartialReply``: the text so far and each ``functionCall`` (which
    arrives whole on the Gemini API, so its arguments appear at once).
    """

    parts: list[JSONValue] = field(default_factory=list)
    merged: JSONDict = field(default_factory=dict)
    candidate: JSONDict = field(default_factory=dict)
    emitter: PartialEmitter = field(default_factory=lambda: PartialEmitter(None))
    # The pieces of each merged plain-text part, by its place in ``parts`` (joined once, at the
    # end: adding each chunk's text to a string would copy it all every time), and each
    # ``functionCall`` part's arguments as JSON text (worked out once, when it arrives).
    runs: dict[int, list[str]] = field(default_factory=dict)
    arguments: dict[int, str] = field(default_factory=dict)

    def add(self, chunk: JSONDict) -> None:
        self.merged.update({key: value for key, value in chunk.items() if key != "candidates"})
        for item in list_or_empty(chunk.get("candidates"))[:1]:
            item = object_or_empty(item)
            self.candidate.update({key: value for key, value in item.items() if key != "content"})
            for part in list_or_empty(object_or_empty(item.get("content")).get("parts")):
                last = len(self.parts) - 1
                if _plain_text(part) and last in self.runs:
                    self.runs[last].append(str(object_or_empty(part)["text"]))
                    continue
                self.parts.append(part)
                if _plain_text(part):
                    self.runs[last + 1] = [str(object_or_empty(part)["text"])]
                elif isinstance(part, dict) and "functionCall" in part:
                    self.arguments[last + 1] = compact_json(
                        object_or_empty(part.get("functionCall")).get("args") or {}
                    )
        self.emitter.offer(self.partial)

    def partial(self) -> PartialReply:
        texts: list[str] = []
        calls: list[PartialCall] = []
        for position, part in enumerate(self.parts):
            part = object_or_empty(part)
            if position in self.runs:
                texts.extend(self.runs[position])
            elif "functionCall" in part and len(calls) < SNAPSHOT_CALLS:
                function_call = object_or_empty(part.get("functionCall"))
                calls.append(
                    PartialCall(
                        index=len(calls),
                        id=string_or_none(function_call.get("id")) or "",
                        name=string_or_none(function_call.get("name")) or "",
                        arguments=tail([self.arguments.get(position, "")]),
                    )
                )
            elif isinstance(part.get("text"), str) and not part.get("thought"):
                texts.append(str(part["text"]))
        return PartialReply(text=tail(texts), calls=tuple(calls))

    def response(self) -> JSONDict:
        """The merged response.

        Raises:
            ValueError: the stream ended before a finish or block reason.
        """
        blocked = object_or_empty(self.merged.get("promptFeedback")).get("blockReason")
        if "finishReason" not in self.candidate and blocked is None:
            raise ValueError("the event stream ended before a finishReason")
        response = dict(self.merged)
        parts: list[JSONValue] = [
            {"text": "".join(self.runs[position])} if position in self.runs else part
            for position, part in enumerate(self.parts)
        ]
        if self.candidate or parts:
            response["candidates"] = [{**self.candidate, "content": {"role": "model", "parts": parts}}]
        return response


def _take(merger: _ChunkMerger, event: SseEvent) -> None:
    """Read one chunk of a ``streamGenerateContent`` stream into ``merger``.

    Raises:
        StreamErrorEvent: the chunk carries an error object (its message).
        ValueError: the chunk is not a JSON object.
    """
    chunk = json_object(event.data)
    if chunk.get("error") is not None:
        raise StreamErrorEvent(error_detail(event.data, event.data))
    merger.add(chunk)


def _parse_stream(body: str, exchange: WireExchange, read: _ChunkMerger | None = None) -> ModelReply:
    """The reply assembled from a recorded ``streamGenerateContent?alt=sse`` stream (or from
    ``read``, the live pass that read every chunk of it as it arrived: ``LivePass``).

    Raises:
        ProviderError: an error object in the stream.
        ValueError: a chunk is not JSON, or the stream ended before a finish or block reason.
    """
    merger = read
    if merger is None:
        merger = _ChunkMerger()
        for event in parse_sse(body):
            try:
                _take(merger, event)
            except StreamErrorEvent as exc:
                raise stream_error(exchange, exc.data) from None
    return _reply(merger.response(), exchange, body)


def _excerpt_parts(contents: JSONValue, role: str, key: str) -> Iterator[JSONDict]:
    """The parts of ``role``'s contents that carry ``key``."""
    for content in dicts(contents):
        if content.get("role") == role:
            yield from (part for part in dicts(content.get("parts")) if key in part)


class GeminiProvider:
    key: ClassVar[str] = KEY
    label: ClassVar[str] = "Google Gemini"
    default_base_url: ClassVar[str] = "https://generativelanguage.googleapis.com"
    demo_base_url: ClassVar[str] = "http://127.0.0.1/demo-model"
    # gen_ai.provider.name in the OpenTelemetry GenAI conventions, and the usage object's keys
    # for the input and output token counts.
    otel_name: ClassVar[str] = "gcp.gemini"
    usage_input_key: ClassVar[str] = "promptTokenCount"
    usage_output_key: ClassVar[str] = "candidatesTokenCount"

    @staticmethod
    def excerpts(request: JSONDict, response: JSONDict | None) -> WireExcerpts | None:
        """The first tool call and its result in recorded bodies (see ``excerpts.py``):
        the ``functionCall`` part, and the ``functionResponse`` part."""
        call = first(_excerpt_parts(request.get("contents"), "model", "functionCall"))
        result = first(_excerpt_parts(request.get("contents"), "user", "functionResponse"))
        if call is None or result is None:
            return None
        sent = None
        if response is not None:
            candidate = first(dicts(response.get("candidates")))
            sent = first(_excerpt_parts([(candidate or {}).get("content")], "model", "functionCall"))
        return WireExcerpts(sent=sent, replayed=call, result=result)

    @staticmethod
    def recorded_reply(body: str, exchange: WireExchange, *, stream: bool) -> ModelReply:
        """The reply in a recorded response body of this format (``stream``: an event stream),
        as ``complete`` reads it (the recording proxy reads a host's replies with it).

        Raises:
            ProviderError: the stream carries an error event.
            ValueError: the body is not a reply of this format.
        """
        if stream:
            return _parse_stream(body, exchange)
        return _reply(json_object(body), exchange, body)

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint

    def complete(self, request: ModelRequest, *, on_delta: DeltaCallback | None = None) -> ModelReply:
        headers = {"x-goog-api-key": self.endpoint.api_key} if self.endpoint.api_key else {}
        stream = self.endpoint.stream
        # Shown while it arrives, a stream is read as it arrives (once, unless that reading fails).
        live = _ChunkMerger(emitter=PartialEmitter(on_delta)) if stream and on_delta else None
        listener = LivePass(functools.partial(_take, live)) if live is not None else None
        exchange, body = post_json(
            self.endpoint,
            model_url(self.endpoint.base_url, self.endpoint.model, stream=stream),
            request_body(request),
            headers,
            listener,
        )
        if stream:
            read = live if listener is not None and listener.whole else None
            return reply_read(exchange, lambda: _parse_stream(body, exchange, read))
        return reply_read(exchange, lambda: _reply(json_object(body), exchange, body))
