"""OpenAI Responses API (``POST {base}/responses``, docs/wire-formats.md §3), over plain httpx2.

Tools are flat (``{type: "function", name, parameters, strict}``) and sent with
``strict: false``: when ``strict`` is left out the Responses API makes the tool strict (docs/wire-formats.md
§2), which most MCP input schemas are not written for. The conversation travels as ``input``
items: messages as ``{role, content}``, each call as a ``function_call`` item and each result as a
``function_call_output`` item paired by ``call_id`` (not the ``fc_…`` item ``id``, which is
never sent back). Results carry no error flag: the error text is the output (docs/wire-formats.md §11).
Structured output moves from the chat-shaped ``response_format`` to ``text.format``, flattened.

Streaming (``Endpoint.stream``) sends ``stream: true``; the whole event stream is recorded
verbatim, then the items are rebuilt from ``response.output_item.added`` plus their
``response.output_text.delta`` / ``response.function_call_arguments.delta`` fragments
(``…output_item.done`` gives an item's final form) and the status and usage are taken from
``response.completed`` (or ``response.incomplete``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import ClassVar

from conversations.loop.llm import Message, ToolCall, ToolChoice, ToolDef
from conversations.loop.providers.base import Endpoint, ModelReply, ModelRequest
from conversations.loop.providers.excerpts import (
    RESPONSES_CALL_ROLES,
    RESPONSES_RESULT_ROLES,
    WireExcerpts,
    dicts,
    first,
)
from conversations.loop.providers.http import (
    SynthesizedCallIds,
    bearer_auth,
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


def wire_tool(tool: ToolDef) -> JSONDict:
    wire: JSONDict = {"type": "function", "name": tool.provider_name}
    if tool.description:
        wire["description"] = tool.description
    wire["parameters"] = tool.input_schema
    # False unless a host preset asks for strict (docs/hosts.md).
    wire["strict"] = tool.strict if tool.strict is not None else False
    return wire


def wire_tool_choice(choice: ToolChoice) -> str | JSONDict:
    if choice.mode == "named":
        return {"type": "function", "name": choice.name or ""}
    return choice.mode


def wire_input(messages: list[Message]) -> list[JSONValue]:
    """The neutral conversation as Responses ``input`` items, in order."""
    items: list[JSONValue] = []
    for message in messages:
        if message.role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message.tool_call_id or "",
                    "output": message.content or "",
                }
            )
            continue
        if message.role != "assistant" or message.content:
            items.append({"role": message.role, "content": message.content or ""})
        if message.role == "assistant":
            items.extend(
                {
                    "type": "function_call",
                    "call_id": call.id,
                    "name": call.name,
                    "arguments": call.arguments_text,
                }
                for call in message.tool_calls
            )
    return items


def text_format(response_format: JSONDict) -> JSONDict:
    """Chat's ``response_format`` as ``text.format``: the ``json_schema`` fields come up a level."""
    if response_format.get("type") == "json_schema":
        return {"type": "json_schema", **object_or_empty(response_format.get("json_schema"))}
    return dict(response_format)


def request_body(model: str, request: ModelRequest, *, stream: bool = False) -> JSONDict:
    body: JSONDict = {"model": model, "input": wire_input(request.messages)}
    if request.tools:
        body["tools"] = [wire_tool(tool) for tool in request.tools]
        body["tool_choice"] = wire_tool_choice(request.tool_choice)
        if request.parallel_tool_calls is not None:
            body["parallel_tool_calls"] = request.parallel_tool_calls
    if request.response_format is not None:
        body["text"] = {"format": text_format(request.response_format)}
    if request.max_tokens is not None:
        body["max_output_tokens"] = request.max_tokens
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if stream:
        body["stream"] = True
    return body


_INCOMPLETE_REASONS = {"max_output_tokens": "length", "content_filter": "content_filter"}


def _arguments_text(value: JSONValue) -> str:
    if isinstance(value, str):
        return value
    return "" if value is None else compact_json(value)


def _reply(response: JSONDict, exchange: WireExchange, seed: str) -> ModelReply:
    """The neutral reply for a ``response`` object (as sent whole, or as rebuilt from a stream).

    Raises:
        ProviderError: the response says it failed (``status: "failed"``).
    """
    if response.get("status") == "failed":
        error = object_or_empty(response.get("error"))
        raise stream_error(exchange, string_or_none(error.get("message")) or "the response failed")
    texts: list[str] = []
    refusals: list[str] = []
    calls: list[ToolCall] = []
    ids = SynthesizedCallIds(seed)
    for item in list_or_empty(response.get("output")):
        if not isinstance(item, dict):
            continue
        if item.get("type") == "message":
            for part in list_or_empty(item.get("content")):
                part = object_or_empty(part)
                if part.get("type") == "output_text":
                    texts.append(string_or_none(part.get("text")) or "")
                elif part.get("type") == "refusal":
                    refusals.append(string_or_none(part.get("refusal")) or "")
        elif item.get("type") == "function_call":
            calls.append(
                ToolCall(
                    id=string_or_none(item.get("call_id")) or ids(len(calls)),
                    name=string_or_none(item.get("name")) or "",
                    arguments_text=_arguments_text(item.get("arguments")),
                )
            )
    if response.get("status") == "incomplete":
        reason = string_or_none(object_or_empty(response.get("incomplete_details")).get("reason")) or ""
        finish_reason = _INCOMPLETE_REASONS.get(reason, reason or "incomplete")
    else:
        finish_reason = "tool_calls" if calls else "stop"
    return ModelReply(
        text="".join(texts) if texts else None,
        tool_calls=calls,
        finish_reason=finish_reason,
        exchange=exchange,
        usage=object_or_empty(response.get("usage")),
        refusal="".join(refusals) if refusals else None,
    )


@dataclass
class _ItemAssembler:
    """Rebuilds the ``output`` items of a streamed response from its events (docs/wire-formats.md §3).

    ``emitter`` is told each new ``PartialReply`` (message text so far, each ``function_call``
    item's arguments so far, paired by ``call_id``).
    """

    items: dict[int, JSONDict] = field(default_factory=dict)
    fragments: dict[int, list[str]] = field(default_factory=dict)
    finished: dict[int, JSONDict] = field(default_factory=dict)
    response: JSONDict | None = None
    emitter: PartialEmitter = field(default_factory=lambda: PartialEmitter(None))

    def partial(self) -> PartialReply:
        texts: list[str] = []
        calls: list[PartialCall] = []
        for position in sorted(self.items.keys() | self.finished.keys()):
            item = self.finished.get(position) or self.items[position]
            fragments = self.fragments.get(position, [])
            if item.get("type") == "message":
                texts.extend(fragments)
            elif item.get("type") == "function_call" and len(calls) < SNAPSHOT_CALLS:
                finished = position in self.finished
                arguments = tail([_arguments_text(item.get("arguments"))]) if finished else tail(fragments)
                calls.append(
                    PartialCall(
                        index=len(calls),
                        id=string_or_none(item.get("call_id")) or "",
                        name=string_or_none(item.get("name")) or "",
                        arguments=arguments,
                    )
                )
        return PartialReply(text=tail(texts), calls=tuple(calls))

    def add(self, event: JSONDict) -> None:
        kind = event.get("type")
        index = event.get("output_index")
        position = index if isinstance(index, int) else -1
        if kind == "response.output_item.added":
            self.items[position] = dict(object_or_empty(event.get("item")))
            self.fragments[position] = []
        elif kind in ("response.output_text.delta", "response.function_call_arguments.delta"):
            self.fragments.setdefault(position, []).append(string_or_none(event.get("delta")) or "")
        elif kind == "response.output_item.done":
            self.finished[position] = object_or_empty(event.get("item"))
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            self.response = object_or_empty(event.get("response"))
        self.emitter.offer(self.partial)

    def output(self) -> list[JSONValue]:
        output: list[JSONValue] = []
        for position in sorted(self.items.keys() | self.finished.keys()):
            if position in self.finished:
                output.append(self.finished[position])
                continue
            item = self.items[position]
            joined = "".join(self.fragments.get(position, []))
            if item.get("type") == "function_call":
                item["arguments"] = joined
            elif item.get("type") == "message":
                item["content"] = [{"type": "output_text", "text": joined}]
            output.append(item)
        return output


def _take(assembler: _ItemAssembler, event: SseEvent) -> None:
    """Read one event of a Responses stream into ``assembler``.

    Raises:
        StreamErrorEvent: an ``error`` event (its message).
        ValueError: the event is not a JSON object.
    """
    data = json_object(event.data)
    if data.get("type") == "error" or event.event == "error":
        detail = string_or_none(data.get("message")) or string_or_none(
            object_or_empty(data.get("error")).get("message")
        )
        raise StreamErrorEvent(detail or event.data)
    assembler.add(data)


def _parse_stream(body: str, exchange: WireExchange, read: _ItemAssembler | None = None) -> ModelReply:
    """The reply rebuilt from a recorded Responses event stream (or from ``read``, the live pass
    that read every event of it as it arrived: ``LivePass``).

    Raises:
        ProviderError: an ``error`` event, or a failed response.
        ValueError: an event is not JSON, or the stream ended before the response finished.
    """
    assembler = read
    if assembler is None:
        assembler = _ItemAssembler()
        for event in parse_sse(body):
            try:
                _take(assembler, event)
            except StreamErrorEvent as exc:
                raise stream_error(exchange, exc.data) from None
    if assembler.response is None:
        raise ValueError("the event stream ended before response.completed")
    return _reply({**assembler.response, "output": assembler.output()}, exchange, body)


class OpenAIResponsesProvider:
    key: ClassVar[str] = "openai_responses"
    label: ClassVar[str] = "OpenAI Responses"
    default_base_url: ClassVar[str] = "https://api.openai.com/v1"
    demo_base_url: ClassVar[str] = "http://127.0.0.1/demo-model/v1"
    # gen_ai.provider.name in the OpenTelemetry GenAI conventions, and the usage object's keys
    # for the input and output token counts.
    otel_name: ClassVar[str] = "openai"
    usage_input_key: ClassVar[str] = "input_tokens"
    usage_output_key: ClassVar[str] = "output_tokens"

    @staticmethod
    def excerpts(request: JSONDict, response: JSONDict | None) -> WireExcerpts | None:
        """The first tool call and its result in recorded bodies (see ``excerpts.py``):
        the ``function_call`` item, and the ``function_call_output`` item."""
        items = list(dicts(request.get("input")))
        call = first(i for i in items if i.get("type") == "function_call")
        result = first(i for i in items if i.get("type") == "function_call_output")
        if call is None or result is None:
            return None
        sent = None
        if response is not None:
            sent = first(i for i in dicts(response.get("output")) if i.get("type") == "function_call")
        return WireExcerpts(
            sent=sent,
            replayed=call,
            result=result,
            call_roles=RESPONSES_CALL_ROLES,
            result_roles=RESPONSES_RESULT_ROLES,
        )

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
        headers = bearer_auth(self.endpoint.api_key)
        # Shown while it arrives, a stream is read as it arrives (once, unless that reading fails).
        live = _ItemAssembler(emitter=PartialEmitter(on_delta)) if self.endpoint.stream and on_delta else None
        listener = LivePass(functools.partial(_take, live)) if live is not None else None
        exchange, body = post_json(
            self.endpoint,
            self.endpoint.base_url.rstrip("/") + "/responses",
            request_body(self.endpoint.model, request, stream=self.endpoint.stream),
            headers,
            listener,
        )
        if self.endpoint.stream:
            read = live if listener is not None and listener.whole else None
            return reply_read(exchange, lambda: _parse_stream(body, exchange, read))
        return reply_read(exchange, lambda: _reply(json_object(body), exchange, body))
