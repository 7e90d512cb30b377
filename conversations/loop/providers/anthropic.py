"""Anthropic Messages (``POST {base}/v1/messages``, docs/wire-formats.md §4), over plain httpx2.

Base URL convention: as in Anthropic's own SDK, the base URL is the host without a version
(``https://api.anthropic.com``) and requests go to ``{base}/v1/messages``; a base URL that already
ends in ``/v1`` gets ``/messages`` only. The in-process demo model's is ``http://127.0.0.1/demo-model``.
Headers: ``x-api-key`` (masked in the record) and ``anthropic-version: 2023-06-01``.

Request shape:

* system messages become the top-level ``system`` (joined by blank lines: Messages has no system
  role); ``max_tokens`` is required and defaults to :data:`DEFAULT_MAX_TOKENS`;
* tools are ``{name, description, input_schema}``; tool_choice auto / required / named / none
  become ``{type: auto | any | tool (+ name) | none}``, with ``disable_parallel_tool_use`` when
  the request says ``parallel_tool_calls: false``;
* an assistant message is text + ``tool_use`` blocks (``input`` is an object: arguments that
  are not a JSON object are sent as ``{}``). When the message carries the blocks exactly as the
  model sent them (``Message.echo["anthropic"]["content"]``, kept for replies with thinking
  blocks) and they hold the same ``tool_use`` ids, those blocks are sent instead, unchanged —
  Anthropic needs thinking blocks back before ``tool_use`` (docs/wire-formats.md §13);
* consecutive tool results become ONE user message of ``tool_result`` blocks (``is_error:
  true`` for an error result, docs/wire-formats.md §11); a user message right after them joins that
  message as a text block after the results;
* structured output: Messages has no ``response_format``; a ``json_schema`` one is sent as
  ``output_config.format = {type: "json_schema", schema}`` (docs/wire-formats.md §4.5). A ``json_object``
  request (no schema) has no Anthropic form and is refused before sending, worded so that
  ``auto`` downgrades.

Reply: text blocks joined; each ``tool_use`` block a call whose ``arguments_text`` is the compact
JSON of its ``input``; ``stop_reason`` mapped to the neutral finish reasons (``tool_use`` →
``tool_calls``, ``max_tokens`` → ``length``, ``end_turn``/``stop_sequence`` → ``stop``; others as
sent, ``refusal`` also sets ``ModelReply.refusal``).

Streaming (``Endpoint.stream``) sends ``stream: true``; the whole named-event stream is recorded
verbatim, then blocks are rebuilt from ``content_block_start`` + ``content_block_delta`` (text,
``input_json_delta`` fragments joined and parsed at ``content_block_stop``, thinking and its
signature) and the stop reason and usage from ``message_delta``. A tool with no arguments streams
``partial_json: ""``, read as ``{}``; joined fragments that are not JSON are kept as the call's raw
``arguments_text`` so the parser and the repair loop see them.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import ClassVar

from conversations.loop.llm import Message, ToolCall, ToolChoice, ToolDef
from conversations.loop.providers.base import Endpoint, ModelReply, ModelRequest, ProviderError
from conversations.loop.providers.excerpts import WireExcerpts, dicts, first
from conversations.loop.providers.http import (
    compact_json,
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

API_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096
KEY = "anthropic"

_STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
}
# Blocks the neutral message can rebuild; any other kind (thinking, redacted_thinking, server
# tool blocks) makes the reply keep its raw blocks for the echo.
_REBUILDABLE = frozenset({"text", "tool_use"})


def messages_url(base_url: str) -> str:
    base = base_url.rstrip("/")
    return f"{base}/messages" if base.endswith("/v1") else f"{base}/v1/messages"


def wire_tool(tool: ToolDef) -> JSONDict:
    wire: JSONDict = {"name": tool.provider_name}
    if tool.description:
        wire["description"] = tool.description
    wire["input_schema"] = tool.input_schema
    return wire


def wire_tool_choice(choice: ToolChoice, parallel: bool | None) -> JSONDict:
    wire: JSONDict
    if choice.mode == "named":
        wire = {"type": "tool", "name": choice.name or ""}
    elif choice.mode == "required":
        wire = {"type": "any"}
    else:
        wire = {"type": choice.mode}
    if parallel is False and choice.mode != "none":
        wire["disable_parallel_tool_use"] = True
    return wire


def _input(call: ToolCall) -> JSONDict:
    if call.arguments is not None:
        return call.arguments
    try:
        value = json.loads(call.arguments_text) if call.arguments_text.strip() else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _echoed_blocks(message: Message) -> list[JSONValue] | None:
    """The assistant's raw blocks, when kept and still matching its calls."""
    blocks = list_or_empty(object_or_empty((message.echo or {}).get(KEY)).get("content"))
    ids = [block.get("id") for block in blocks if isinstance(block, dict) and block.get("type") == "tool_use"]
    if blocks and ids == [call.id for call in message.tool_calls]:
        return blocks
    return None


def _assistant_content(message: Message) -> list[JSONValue]:
    echoed = _echoed_blocks(message)
    if echoed is not None:
        return echoed
    blocks: list[JSONValue] = []
    if message.content:
        blocks.append({"type": "text", "text": message.content})
    blocks.extend(
        {"type": "tool_use", "id": call.id, "name": call.name, "input": _input(call)}
        for call in message.tool_calls
    )
    return blocks


def _tool_result(message: Message) -> JSONDict:
    block: JSONDict = {
        "type": "tool_result",
        "tool_use_id": message.tool_call_id or "",
        "content": message.content or "",
    }
    if message.is_error:
        block["is_error"] = True
    return block


def wire_messages(messages: list[Message]) -> tuple[str, list[JSONValue]]:
    """The neutral conversation as (``system``, ``messages``) in Anthropic's shape."""
    system: list[str] = []
    wire: list[JSONValue] = []
    results: list[JSONValue] | None = None  # the content of the open tool-result user message
    for message in messages:
        if message.role == "system":
            system.append(message.content or "")
        elif message.role == "tool":
            if results is None:
                results = []
                wire.append({"role": "user", "content": results})
            results.append(_tool_result(message))
        elif message.role == "user" and results is not None:
            results.append({"type": "text", "text": message.content or ""})
            results = None
        elif message.role == "user":
            wire.append({"role": "user", "content": message.content or ""})
        else:
            results = None
            content = _assistant_content(message)
            if content:  # an empty assistant message is not accepted; nothing was said
                wire.append({"role": "assistant", "content": content})
    return "\n\n".join(system), wire


def _output_format(response_format: JSONDict) -> JSONDict:
    """``output_config.format`` for a chat-shaped ``response_format``.

    Raises:
        ProviderError: the format has no Anthropic equivalent (anything but ``json_schema``).
    """
    if response_format.get("type") != "json_schema":
        raise ProviderError(
            f"response_format type {response_format.get('type')!r} is not supported by Anthropic "
            "Messages (only a json_schema, sent as output_config.format)"
        )
    schema = object_or_empty(object_or_empty(response_format.get("json_schema")).get("schema"))
    return {"type": "json_schema", "schema": schema}


def request_body(model: str, request: ModelRequest, *, stream: bool = False) -> JSONDict:
    """The Messages request body.

    Raises:
        ProviderError: the request asks for a structured output Anthropic cannot express.
    """
    system, messages = wire_messages(request.messages)
    body: JSONDict = {"model": model, "max_tokens": request.max_tokens or DEFAULT_MAX_TOKENS}
    if system:
        body["system"] = system
    body["messages"] = messages
    if request.tools:
        body["tools"] = [wire_tool(tool) for tool in request.tools]
        body["tool_choice"] = wire_tool_choice(request.tool_choice, request.parallel_tool_calls)
    if request.response_format is not None and request.response_format.get("type") != "text":
        body["output_config"] = {"format": _output_format(request.response_format)}
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.stop:
        body["stop_sequences"] = list(request.stop)
    if stream:
        body["stream"] = True
    return body


def _reply(message: JSONDict, exchange: WireExchange, raw_inputs: dict[str, str] | None = None) -> ModelReply:
    """The neutral reply for a Messages ``message`` (as sent whole, or as rebuilt from a stream).

    ``raw_inputs`` holds, by ``tool_use`` id, streamed input text that did not parse as JSON.
    """
    texts: list[str] = []
    calls: list[ToolCall] = []
    content = list_or_empty(message.get("content"))
    for block in content:
        block = object_or_empty(block)
        if block.get("type") == "text":
            texts.append(string_or_none(block.get("text")) or "")
        elif block.get("type") == "tool_use":
            call_id = string_or_none(block.get("id")) or ""
            raw = (raw_inputs or {}).get(call_id)
            calls.append(
                ToolCall(
                    id=call_id,
                    name=string_or_none(block.get("name")) or "",
                    arguments_text=raw if raw is not None else compact_json(block.get("input", {})),
                )
            )
    stop_reason = string_or_none(message.get("stop_reason")) or ""
    text = "".join(texts) if texts else None
    keep = any(object_or_empty(block).get("type") not in _REBUILDABLE for block in content)
    return ModelReply(
        text=text,
        tool_calls=calls,
        finish_reason=_STOP_REASONS.get(stop_reason, stop_reason),
        exchange=exchange,
        usage=object_or_empty(message.get("usage")),
        refusal=(text or "the model declined to answer (stop_reason: refusal)")
        if stop_reason == "refusal"
        else None,
        echo={KEY: {"content": content}} if keep else None,
    )


# The deltas that grow a block's text field, and the field they grow.
_GROWING = {"text_delta": "text", "thinking_delta": "thinking", "signature_delta": "signature"}


@dataclass
class _BlockAssembler:
    """Rebuilds a streamed message from its events (docs/wire-formats.md §4.4).

    ``emitter`` is told each new ``PartialReply`` (text blocks so far, each ``tool_use`` block's
    ``input_json_delta`` fragments joined so far).
    """

    message: JSONDict = field(default_factory=dict)
    blocks: dict[int, JSONDict] = field(default_factory=dict)
    partial_json: dict[int, list[str]] = field(default_factory=dict)
    # The pieces of each block's growing ``text``/``thinking``/``signature``, by (block, field):
    # joined once at the end (adding each delta to a string would copy it all every time).
    pieces: dict[tuple[int, str], list[str]] = field(default_factory=dict)
    raw_inputs: dict[str, str] = field(default_factory=dict)
    stopped: bool = False
    emitter: PartialEmitter = field(default_factory=lambda: PartialEmitter(None))

    def partial(self) -> PartialReply:
        texts: list[str] = []
        calls: list[PartialCall] = []
        for position in sorted(self.blocks):
            block = self.blocks[position]
            if block.get("type") == "text":
                texts.append(string_or_none(block.get("text")) or "")
                texts.extend(self.pieces.get((position, "text"), []))
            elif block.get("type") == "tool_use" and len(calls) < SNAPSHOT_CALLS:
                calls.append(
                    PartialCall(
                        index=len(calls),
                        id=string_or_none(block.get("id")) or "",
                        name=string_or_none(block.get("name")) or "",
                        arguments=tail(self.partial_json.get(position, [])),
                    )
                )
        return PartialReply(text=tail(texts), calls=tuple(calls))

    def add(self, event: JSONDict) -> None:
        kind = event.get("type")
        index = event.get("index")
        position = index if isinstance(index, int) else -1
        if kind == "message_start":
            self.message = dict(object_or_empty(event.get("message")))
        elif kind == "content_block_start":
            self.blocks[position] = dict(object_or_empty(event.get("content_block")))
        elif kind == "content_block_delta":
            self._add_delta(position, object_or_empty(event.get("delta")))
        elif kind == "content_block_stop":
            self._finish_block(position)
        elif kind == "message_delta":
            self.message.update(object_or_empty(event.get("delta")))
            usage = {**object_or_empty(self.message.get("usage")), **object_or_empty(event.get("usage"))}
            self.message["usage"] = usage
        elif kind == "message_stop":
            self.stopped = True
        self.emitter.offer(self.partial)

    def _add_delta(self, position: int, delta: JSONDict) -> None:
        self.blocks.setdefault(position, {})
        kind = delta.get("type")
        if kind == "input_json_delta":
            self.partial_json.setdefault(position, []).append(string_or_none(delta.get("partial_json")) or "")
        elif kind in _GROWING:
            name = _GROWING[kind]
            self.pieces.setdefault((position, name), []).append(string_or_none(delta.get(name)) or "")

    def _finish_block(self, position: int) -> None:
        block = self.blocks.get(position)
        if block is None or block.get("type") != "tool_use" or position not in self.partial_json:
            return
        joined = "".join(self.partial_json[position])
        try:
            value = json.loads(joined) if joined.strip() else {}
        except ValueError:
            value = None
        if isinstance(value, dict):
            block["input"] = value
        else:
            self.raw_inputs[string_or_none(block.get("id")) or ""] = joined

    def assembled(self) -> JSONDict:
        return {**self.message, "content": [self._block(position) for position in sorted(self.blocks)]}

    def _block(self, position: int) -> JSONDict:
        """A block with its streamed text, thinking and signature joined onto what it began with."""
        block = dict(self.blocks[position])
        for name in _GROWING.values():
            pieces = self.pieces.get((position, name))
            if pieces is not None:
                block[name] = (string_or_none(block.get(name)) or "") + "".join(pieces)
        return block


def _take(assembler: _BlockAssembler, event: SseEvent) -> None:
    """Read one event of a Messages stream into ``assembler``.

    Raises:
        StreamErrorEvent: an ``error`` event (its message).
        ValueError: the event is not a JSON object.
    """
    data = json_object(event.data)
    if data.get("type") == "error":
        detail = string_or_none(object_or_empty(data.get("error")).get("message"))
        raise StreamErrorEvent(detail or event.data)
    assembler.add(data)


def _parse_stream(body: str, exchange: WireExchange, read: _BlockAssembler | None = None) -> ModelReply:
    """The reply rebuilt from a recorded Messages event stream (or from ``read``, the live pass
    that read every event of it as it arrived: ``LivePass``).

    Raises:
        ProviderError: an ``error`` event (e.g. ``overloaded_error``) in the stream.
        ValueError: an event is not JSON, or the stream ended before ``message_stop``.
    """
    assembler = read
    if assembler is None:
        assembler = _BlockAssembler()
        for event in parse_sse(body):
            try:
                _take(assembler, event)
            except StreamErrorEvent as exc:
                raise stream_error(exchange, exc.data) from None
    if not assembler.stopped:
        raise ValueError("the event stream ended before message_stop")
    return _reply(assembler.assembled(), exchange, assembler.raw_inputs)


def _parse_message(body: str, exchange: WireExchange) -> ModelReply:
    """The reply in a whole ``message`` body.

    Raises:
        ValueError: the body is not a message object.
    """
    message = json_object(body)
    if message.get("type") != "message":
        raise ValueError(f"expected a message object, got type {message.get('type')!r}")
    return _reply(message, exchange)


class AnthropicProvider:
    key: ClassVar[str] = KEY
    label: ClassVar[str] = "Anthropic Messages"
    default_base_url: ClassVar[str] = "https://api.anthropic.com"
    demo_base_url: ClassVar[str] = "http://127.0.0.1/demo-model"
    # gen_ai.provider.name in the OpenTelemetry GenAI conventions, and the usage object's keys
    # for the input and output token counts.
    otel_name: ClassVar[str] = "anthropic"
    usage_input_key: ClassVar[str] = "input_tokens"
    usage_output_key: ClassVar[str] = "output_tokens"

    @staticmethod
    def excerpts(request: JSONDict, response: JSONDict | None) -> WireExcerpts | None:
        """The first tool call and its result in recorded bodies (see ``excerpts.py``):
        the ``tool_use`` block, and the ``tool_result`` block."""
        messages = list(dicts(request.get("messages")))
        call = first(
            block
            for m in messages
            if m.get("role") == "assistant"
            for block in dicts(m.get("content"))
            if block.get("type") == "tool_use"
        )
        result = first(
            block
            for m in messages
            if m.get("role") == "user"
            for block in dicts(m.get("content"))
            if block.get("type") == "tool_result"
        )
        if call is None or result is None:
            return None
        sent = None
        if response is not None:
            sent = first(b for b in dicts(response.get("content")) if b.get("type") == "tool_use")
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
        return _parse_message(body, exchange)

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint

    def complete(self, request: ModelRequest, *, on_delta: DeltaCallback | None = None) -> ModelReply:
        headers = {"anthropic-version": API_VERSION}
        if self.endpoint.api_key:
            headers["x-api-key"] = self.endpoint.api_key
        # Shown while it arrives, a stream is read as it arrives (once, unless that reading fails).
        live = (
            _BlockAssembler(emitter=PartialEmitter(on_delta)) if self.endpoint.stream and on_delta else None
        )
        listener = LivePass(functools.partial(_take, live)) if live is not None else None
        exchange, body = post_json(
            self.endpoint,
            messages_url(self.endpoint.base_url),
            request_body(self.endpoint.model, request, stream=self.endpoint.stream),
            headers,
            listener,
        )
        if self.endpoint.stream:
            read = live if listener is not None and listener.whole else None
            return reply_read(exchange, lambda: _parse_stream(body, exchange, read))
        return reply_read(exchange, lambda: _parse_message(body, exchange))
