"""OpenAI Chat Completions (``POST {base}/chat/completions``) over plain HTTP.

The request is our own wire JSON, posted as the other providers post theirs
(``http.post_json``: one shared client per endpoint, no retries, the bearer key only when the
profile has one), so what is recorded is what crossed the wire. The official SDK is not used
here: it added nothing a request needs (the body is ours, errors are mapped from the status), a
worker process that loads it carries its models (13 MB more) and every call paid its request
building; the tests still use it as a client of the demo model. The reply is parsed from the
recorded body itself, so the quirks of compatible servers survive (docs/wire-formats.md §6):

* ``arguments`` sent as a JSON object instead of a string (Ollama) is serialised compactly;
* an empty or missing call ``id`` (Gemini's compatible endpoint) is synthesized;
* ``reasoning_content`` (DeepSeek thinking mode) and a call's ``extra_content`` (Gemini's
  thought signature) are kept in ``ModelReply.echo`` and sent back on the assistant tool-call
  message when it is replayed (docs/wire-formats.md §13);
* ``finish_reason: "tool"`` (old llama.cpp) counts as ``tool_calls``.

Streaming (``Endpoint.stream``) sends ``stream: true`` with ``stream_options.include_usage``;
the whole SSE text is read and recorded verbatim as the response body, then the ``delta``
fragments (``tool_calls[index]`` argument pieces) are joined into the same reply the
non-streamed path gives.
"""

from __future__ import annotations

import functools
import heapq
from dataclasses import dataclass, field
from typing import Any, ClassVar

from conversations.loop.llm import Message, ToolCall, ToolChoice, ToolDef
from conversations.loop.providers.base import Endpoint, ModelReply, ModelRequest
from conversations.loop.providers.excerpts import WireExcerpts, dicts, first
from conversations.loop.providers.http import (
    SynthesizedCallIds,
    bearer_auth,
    compact_json,
    endpoint_transport,
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

__all__ = ["OpenAIChatProvider", "endpoint_transport", "request_body", "wire_message", "wire_tool"]


def wire_tool(tool: ToolDef) -> JSONDict:
    function: JSONDict = {"name": tool.provider_name, "parameters": tool.input_schema}
    if tool.description:
        function["description"] = tool.description
    if tool.strict is not None:  # a host preset's flag (docs/hosts.md)
        function["strict"] = tool.strict
    return {"type": "function", "function": function}


def wire_tool_choice(choice: ToolChoice) -> str | JSONDict:
    if choice.mode == "named":
        return {"type": "function", "function": {"name": choice.name or ""}}
    return choice.mode


def wire_message(message: Message) -> JSONDict:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id or "", "content": message.content or ""}
    if message.role == "assistant" and message.tool_calls:
        echo = object_or_empty((message.echo or {}).get(OpenAIChatProvider.key))
        extra = object_or_empty(echo.get("extra_content"))
        calls: list[JSONValue] = []
        for call in message.tool_calls:
            item: JSONDict = {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments_text},
            }
            if call.id in extra:
                item["extra_content"] = extra[call.id]
            calls.append(item)
        wire: JSONDict = {"role": "assistant", "content": message.content, "tool_calls": calls}
        reasoning = string_or_none(echo.get("reasoning_content"))
        if reasoning is not None:
            wire["reasoning_content"] = reasoning
        return wire
    return {"role": message.role, "content": message.content or ""}


def request_body(model: str, request: ModelRequest, *, stream: bool = False) -> dict[str, Any]:
    """The JSON body of this request (as ``chat.completions.create`` of the official SDK takes it)."""
    body: dict[str, Any] = {"model": model, "messages": [wire_message(m) for m in request.messages]}
    if request.tools:
        body["tools"] = [wire_tool(t) for t in request.tools]
        body["tool_choice"] = wire_tool_choice(request.tool_choice)
        if request.parallel_tool_calls is not None:
            body["parallel_tool_calls"] = request.parallel_tool_calls
    if request.response_format is not None:
        body["response_format"] = request.response_format
    if request.max_tokens is not None:
        body["max_tokens"] = request.max_tokens
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.stop:
        body["stop"] = list(request.stop)
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


def _arguments_text(value: JSONValue) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    # Ollama sends the arguments already parsed.
    return compact_json(value)


def _text(content: JSONValue) -> str | None:
    """``content`` as text: a string, or the ``text`` parts of a content array joined."""
    if isinstance(content, list):
        return "".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        )
    return string_or_none(content)


def _reply(
    message: JSONDict, finish_reason: str, usage: JSONDict, exchange: WireExchange, seed: str
) -> ModelReply:
    """The neutral reply for an assistant ``message`` (as sent whole, or as assembled from a stream)."""
    calls: list[ToolCall] = []
    extra: JSONDict = {}
    ids = SynthesizedCallIds(seed)
    for index, raw in enumerate(list_or_empty(message.get("tool_calls"))):
        if not isinstance(raw, dict) or raw.get("type", "function") != "function":
            continue
        function = object_or_empty(raw.get("function"))
        call_id = string_or_none(raw.get("id")) or ids(index)
        calls.append(
            ToolCall(
                id=call_id,
                name=string_or_none(function.get("name")) or "",
                arguments_text=_arguments_text(function.get("arguments")),
            )
        )
        if raw.get("extra_content") is not None:
            extra[call_id] = raw["extra_content"]
    echo: JSONDict = {}
    reasoning = string_or_none(message.get("reasoning_content"))
    if reasoning:
        echo["reasoning_content"] = reasoning
    if extra:
        echo["extra_content"] = extra
    return ModelReply(
        text=_text(message.get("content")),
        tool_calls=calls,
        # Old llama.cpp builds say "tool" (docs/wire-formats.md §6).
        finish_reason="tool_calls" if finish_reason == "tool" else finish_reason,
        exchange=exchange,
        usage=usage,
        refusal=string_or_none(message.get("refusal")),
        echo={OpenAIChatProvider.key: echo} if echo else None,
    )


def _parse_completion(body: str, exchange: WireExchange) -> ModelReply:
    """The reply in a ``chat.completion`` body.

    Raises:
        ValueError: the body is not a completion with at least one choice.
    """
    completion = json_object(body)
    choices = list_or_empty(completion.get("choices"))
    if not choices or not isinstance(choices[0], dict):
        raise ValueError("no choices in the response")
    choice = choices[0]
    return _reply(
        object_or_empty(choice.get("message")),
        string_or_none(choice.get("finish_reason")) or "",
        object_or_empty(completion.get("usage")),
        exchange,
        body,
    )


@dataclass
class _PendingCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    extra_content: JSONValue = None


def _first(item: tuple[int, _PendingCall]) -> int:
    return item[0]


@dataclass
class _ChunkAssembler:
    """Joins ``chat.completion.chunk`` deltas back into one assistant message (docs/wire-formats.md §1.3).

    ``emitter`` is told each new ``PartialReply`` (text so far, each call's argument text so far).
    """

    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    refusal: list[str] = field(default_factory=list)
    calls: dict[int, _PendingCall] = field(default_factory=dict)
    finish_reason: str = ""
    usage: JSONDict = field(default_factory=dict)
    done: bool = False
    emitter: PartialEmitter = field(default_factory=lambda: PartialEmitter(None))

    def partial(self) -> PartialReply:
        return PartialReply(
            text=tail(self.content),
            calls=tuple(
                PartialCall(index=index, id=pending.id, name=pending.name, arguments=tail(pending.arguments))
                # The first calls only: a snapshot is built many times while a long reply streams.
                for index, pending in heapq.nsmallest(SNAPSHOT_CALLS, self.calls.items(), key=_first)
            ),
        )

    def take(self, event: SseEvent) -> None:
        """Read one event: ``[DONE]`` ends the stream (later events are ignored).

        Raises:
            StreamErrorEvent: the event carries an error object.
            ValueError: the event is not a JSON object.
        """
        if self.done:
            return
        data = event.data
        # A chunk's JSON ends with its closing brace: only other data may be "[DONE]".
        if not data.endswith("}") and data.strip() == "[DONE]":
            self.done = True
            return
        chunk = json_object(data)
        if chunk.get("error") is not None:
            raise StreamErrorEvent(event.data)
        self.add(chunk)

    def add(self, chunk: JSONDict) -> None:
        # Nearly every chunk of a long reply is one choice whose delta holds one piece of text or
        # of one call's arguments: those are read without the general path's checks (each key
        # looked up, each shape tested, for one piece of a few characters); anything else, or
        # anything more, goes the general way.
        choices = chunk.get("choices")
        if type(choices) is list and len(choices) == 1 and not chunk.get("usage"):
            choice = choices[0]
            if type(choice) is dict and choice.get("index", 0) == 0 and choice.get("finish_reason") is None:
                delta = choice.get("delta")
                if type(delta) is dict and len(delta) == 1 and self._add_piece(delta):
                    self.emitter.offer(self.partial)
                    return
        self._add_any(chunk)

    def _add_piece(self, delta: JSONDict) -> bool:
        """Add a one-key delta that is a piece of text, or a piece of the arguments of a call
        already begun (``{"index": n, "function": {"arguments": "…"}}``); False for any other."""
        content = delta.get("content")
        if type(content) is str:
            self.content.append(content)
            return True
        fragments = delta.get("tool_calls")
        if type(fragments) is not list or len(fragments) != 1:
            return False
        fragment = fragments[0]
        if (
            type(fragment) is not dict
            or len(fragment) != 2
            or type(index := fragment.get("index")) is not int
        ):
            return False
        pending, function = self.calls.get(index), fragment.get("function")
        if pending is None or type(function) is not dict or len(function) != 1:
            return False
        arguments = function.get("arguments")
        if type(arguments) is not str:
            return False
        pending.arguments.append(arguments)
        return True

    def _add_any(self, chunk: JSONDict) -> None:
        if chunk.get("usage"):
            self.usage = object_or_empty(chunk["usage"])
        for choice in list_or_empty(chunk.get("choices")):
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = object_or_empty(choice.get("delta"))
            content = delta.get("content")
            if isinstance(content, str):
                self.content.append(content)
            # Most deltas carry one piece of text and nothing else: the rest is looked for only
            # when there is more (a long reply has one delta per few characters).
            if len(delta) > 1 or content is None:
                self._add_rest(delta)
            finish = choice.get("finish_reason")
            if isinstance(finish, str):
                self.finish_reason = finish
        self.emitter.offer(self.partial)

    def _add_rest(self, delta: JSONDict) -> None:
        for key, parts in (("reasoning_content", self.reasoning), ("refusal", self.refusal)):
            value = delta.get(key)
            if isinstance(value, str):
                parts.append(value)
        for position, fragment in enumerate(list_or_empty(delta.get("tool_calls"))):
            if isinstance(fragment, dict):
                self._add_call_fragment(position, fragment)

    def _add_call_fragment(self, position: int, fragment: JSONDict) -> None:
        index = fragment.get("index")
        pending = self.calls.setdefault(index if isinstance(index, int) else position, _PendingCall())
        if isinstance(fragment.get("id"), str) and fragment["id"]:
            pending.id = str(fragment["id"])
        function = object_or_empty(fragment.get("function"))
        # The name comes whole in a call's first fragment; later fragments carry arguments only.
        if isinstance(function.get("name"), str) and not pending.name:
            pending.name = str(function["name"])
        if function.get("arguments") is not None:
            pending.arguments.append(_arguments_text(function["arguments"]))
        if fragment.get("extra_content") is not None:
            pending.extra_content = fragment["extra_content"]

    def message(self) -> JSONDict:
        tool_calls: list[JSONValue] = []
        for _, pending in sorted(self.calls.items()):
            call: JSONDict = {
                "id": pending.id,
                "type": "function",
                "function": {"name": pending.name, "arguments": "".join(pending.arguments)},
            }
            if pending.extra_content is not None:
                call["extra_content"] = pending.extra_content
            tool_calls.append(call)
        return {
            "content": "".join(self.content) if self.content else None,
            "reasoning_content": "".join(self.reasoning) if self.reasoning else None,
            "refusal": "".join(self.refusal) if self.refusal else None,
            "tool_calls": tool_calls,
        }


def _parse_stream(body: str, exchange: WireExchange, read: _ChunkAssembler | None = None) -> ModelReply:
    """The reply assembled from a recorded Chat Completions event stream (or from ``read``, the
    live pass that read every event of it as it arrived: ``LivePass``).

    Raises:
        ProviderError: the stream carries an error object.
        ValueError: a chunk is not JSON, or the stream ended before the reply was complete.
    """
    assembler = read
    if assembler is None:
        assembler = _ChunkAssembler()
        for event in parse_sse(body):
            try:
                assembler.take(event)
            except StreamErrorEvent as exc:
                raise stream_error(exchange, error_detail(exc.data, exc.data)) from None
            if assembler.done:
                break
    if not assembler.done and not assembler.finish_reason:
        raise ValueError("the event stream ended before a finish_reason or [DONE]")
    return _reply(assembler.message(), assembler.finish_reason, assembler.usage, exchange, body)


class OpenAIChatProvider:
    key: ClassVar[str] = "openai_chat"
    label: ClassVar[str] = "OpenAI Chat Completions"
    default_base_url: ClassVar[str] = "https://api.openai.com/v1"
    demo_base_url: ClassVar[str] = "http://127.0.0.1/demo-model/v1"
    # gen_ai.provider.name in the OpenTelemetry GenAI conventions, and the usage object's keys
    # for the input and output token counts.
    otel_name: ClassVar[str] = "openai"
    usage_input_key: ClassVar[str] = "prompt_tokens"
    usage_output_key: ClassVar[str] = "completion_tokens"

    @staticmethod
    def excerpts(request: JSONDict, response: JSONDict | None) -> WireExcerpts | None:
        """The first tool call and its result in recorded bodies (see ``excerpts.py``):
        OpenAI ``tool_calls`` in the assistant message, and the ``role: tool`` message."""
        messages = list(dicts(request.get("messages")))
        assistant = first(m for m in messages if m.get("role") == "assistant" and m.get("tool_calls"))
        result = first(m for m in messages if m.get("role") == "tool")
        if assistant is None or result is None:
            return None
        sent = None
        if response is not None:
            choice = first(dicts(response.get("choices")))
            sent = object_or_empty((choice or {}).get("message")) or None
        return WireExcerpts(sent=sent, replayed=assistant, result=result)

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
        return _parse_completion(body, exchange)

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint

    def complete(self, request: ModelRequest, *, on_delta: DeltaCallback | None = None) -> ModelReply:
        headers = bearer_auth(self.endpoint.api_key)
        stream = self.endpoint.stream
        # Shown while it arrives, a stream is read as it arrives (once, unless that reading fails).
        live = _ChunkAssembler(emitter=PartialEmitter(on_delta)) if stream and on_delta is not None else None
        listener = LivePass(live.take) if live is not None else None
        exchange, body = post_json(
            self.endpoint,
            self.endpoint.base_url.rstrip("/") + "/chat/completions",
            request_body(self.endpoint.model, request, stream=stream),
            headers,
            listener,
        )
        if stream:
            read = live if listener is not None and listener.whole else None
            return reply_read(exchange, functools.partial(_parse_stream, body, exchange, read))
        return reply_read(exchange, functools.partial(_parse_completion, body, exchange))
