"""Streamed replies seen as they arrive: each provider tells ``on_delta`` the growing text and tool
calls (docs/wire-formats.md §1.3, §3, §4.4, §5.1), while the recorded body and the reply stay exactly
what they are without it."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator

import httpx2
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from conversations.loop.providers import streaming
from conversations.loop.providers.anthropic import AnthropicProvider
from conversations.loop.providers.base import Endpoint, ModelReply, ModelRequest, Provider
from conversations.loop.providers.gemini import GeminiProvider
from conversations.loop.providers.openai_chat import OpenAIChatProvider, _ChunkAssembler
from conversations.loop.providers.openai_responses import OpenAIResponsesProvider
from conversations.loop.providers.streaming import (
    PartialEmitter,
    PartialReply,
    SseEvent,
    SseReader,
    chunks_of,
    parse_sse,
    read_events,
    throttled,
)
from conversations.typealias import JSONDict, JSONValue
from tests.conversations.provider_fakes import QUESTION, WEATHER, serve, sse

ARGUMENTS = '{"city": "Beijing", "day": "tomorrow"}'
FRAGMENTS = ['{"ci', 'ty": "Bei', 'jing", "d', 'ay": "tom', 'orrow"}']
SECOND_ARGUMENTS = '{"city": "Paris"}'
NAME = "demo__get_weather_forecast"


def _chat_chunk(delta: JSONDict, finish_reason: str | None = None) -> JSONDict:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "test-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }


def _chat_call(index: int, fields: JSONDict) -> JSONDict:
    return _chat_chunk({"tool_calls": [{"index": index, **fields}]})


OPENAI_CHAT_STREAM = sse(
    [
        _chat_chunk({"role": "assistant", "content": None}),
        _chat_chunk({"content": "Let me "}),
        _chat_chunk({"content": "check."}),
        _chat_call(0, {"id": "call_a", "type": "function", "function": {"name": NAME, "arguments": ""}}),
        *[_chat_call(0, {"function": {"arguments": piece}}) for piece in FRAGMENTS],
        _chat_call(1, {"id": "call_b", "type": "function", "function": {"name": NAME, "arguments": ""}}),
        _chat_call(1, {"function": {"arguments": SECOND_ARGUMENTS[:9]}}),
        _chat_call(1, {"function": {"arguments": SECOND_ARGUMENTS[9:]}}),
        _chat_chunk({}, "tool_calls"),
    ],
    done=True,
)


def _anthropic_delta(index: int, delta: JSONDict) -> tuple[str, JSONValue]:
    return ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})


def _anthropic_block(index: int, block: JSONDict, deltas: list[JSONDict]) -> list[tuple[str, JSONValue]]:
    return [
        ("content_block_start", {"type": "content_block_start", "index": index, "content_block": block}),
        *[_anthropic_delta(index, delta) for delta in deltas],
        ("content_block_stop", {"type": "content_block_stop", "index": index}),
    ]


ANTHROPIC_STREAM = sse(
    [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "model": "claude",
                    "content": [],
                    "stop_reason": None,
                    "usage": {"input_tokens": 10, "output_tokens": 1},
                },
            },
        ),
        ("ping", {"type": "ping"}),
        *_anthropic_block(
            0,
            {"type": "text", "text": ""},
            [{"type": "text_delta", "text": "Let me "}, {"type": "text_delta", "text": "check."}],
        ),
        *_anthropic_block(
            1,
            {"type": "tool_use", "id": "toolu_a", "name": NAME, "input": {}},
            [{"type": "input_json_delta", "partial_json": piece} for piece in FRAGMENTS],
        ),
        *_anthropic_block(
            2,
            {"type": "tool_use", "id": "toolu_b", "name": NAME, "input": {}},
            [
                {"type": "input_json_delta", "partial_json": SECOND_ARGUMENTS[:9]},
                {"type": "input_json_delta", "partial_json": SECOND_ARGUMENTS[9:]},
            ],
        ),
        (
            "message_delta",
            {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 30}},
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
)


def _gemini_chunk(parts: list[JSONValue], finish: bool = False) -> JSONDict:
    candidate: JSONDict = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        candidate["finishReason"] = "STOP"
    return {"candidates": [candidate], "modelVersion": "gemini-2.5-flash"}


# On the Gemini API a functionCall arrives whole, in one chunk (docs/wire-formats.md §5.1).
GEMINI_STREAM = sse(
    [
        _gemini_chunk([{"text": "Let me "}]),
        _gemini_chunk([{"text": "check."}]),
        _gemini_chunk([{"functionCall": {"name": NAME, "args": json.loads(ARGUMENTS)}}]),
        _gemini_chunk([{"functionCall": {"name": NAME, "args": json.loads(SECOND_ARGUMENTS)}}], finish=True),
    ]
)


def _responses_event(kind: str, sequence: int, **fields: JSONValue) -> JSONDict:
    return {"type": kind, "sequence_number": sequence, **fields}


def _responses_call(output_index: int, call_id: str, fragments: list[str], first: int) -> list[JSONDict]:
    item: JSONDict = {"type": "function_call", "id": f"fc_{call_id}", "call_id": call_id, "name": NAME}
    return [
        _responses_event(
            "response.output_item.added",
            first,
            output_index=output_index,
            item={**item, "arguments": "", "status": "in_progress"},
        ),
        *[
            _responses_event(
                "response.function_call_arguments.delta",
                first + 1 + n,
                item_id=f"fc_{call_id}",
                output_index=output_index,
                delta=piece,
            )
            for n, piece in enumerate(fragments)
        ],
        _responses_event(
            "response.output_item.done",
            first + 1 + len(fragments),
            output_index=output_index,
            item={**item, "arguments": "".join(fragments), "status": "completed"},
        ),
    ]


_RESPONSE_MESSAGE: JSONDict = {"type": "message", "id": "msg_1", "role": "assistant", "status": "in_progress"}
RESPONSES_STREAM = sse(
    [
        _responses_event(
            "response.created", 0, response={"id": "resp_1", "status": "in_progress", "output": []}
        ),
        _responses_event(
            "response.output_item.added", 1, output_index=0, item={**_RESPONSE_MESSAGE, "content": []}
        ),
        _responses_event("response.output_text.delta", 2, output_index=0, content_index=0, delta="Let me "),
        _responses_event("response.output_text.delta", 3, output_index=0, content_index=0, delta="check."),
        _responses_event(
            "response.output_item.done",
            4,
            output_index=0,
            item={
                **_RESPONSE_MESSAGE,
                "status": "completed",
                "content": [{"type": "output_text", "text": "Let me check."}],
            },
        ),
        *_responses_call(1, "call_a", FRAGMENTS, 5),
        *_responses_call(2, "call_b", [SECOND_ARGUMENTS[:9], SECOND_ARGUMENTS[9:]], 20),
        _responses_event(
            "response.completed",
            30,
            response={"id": "resp_1", "status": "completed", "output": [], "usage": {"input_tokens": 5}},
        ),
    ]
)

STREAMS: dict[str, tuple[Callable[[Endpoint], Provider], str]] = {
    "openai_chat": (OpenAIChatProvider, OPENAI_CHAT_STREAM),
    "anthropic": (AnthropicProvider, ANTHROPIC_STREAM),
    "gemini": (GeminiProvider, GEMINI_STREAM),
    "openai_responses": (OpenAIResponsesProvider, RESPONSES_STREAM),
}


def _dribbling(text: str, size: int = 7) -> Callable[[httpx2.Request], httpx2.Response]:
    """An endpoint that sends ``text`` in ``size``-byte pieces, as a real stream arrives."""

    def respond(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(
            200, content=chunks_of(text, size), headers={"content-type": "text/event-stream"}
        )

    return respond


def _ask(provider_key: str, *, watch: bool) -> tuple[ModelReply, list[PartialReply]]:
    provider_class, text = STREAMS[provider_key]
    provider, _ = serve(provider_class, _dribbling(text), stream=True)
    seen: list[PartialReply] = []
    request = ModelRequest(messages=QUESTION, tools=[WEATHER])
    reply = provider.complete(request, on_delta=seen.append) if watch else provider.complete(request)
    return reply, seen


def _grows(values: list[str]) -> bool:
    """Each value extends the one before it (never shrinks, never changes what was shown)."""
    return all(later.startswith(earlier) for earlier, later in zip(values, values[1:], strict=False))


@pytest.mark.parametrize("provider_key", list(STREAMS))
def test_the_callback_sees_the_text_and_each_calls_arguments_grow_then_complete(provider_key: str) -> None:
    reply, seen = _ask(provider_key, watch=True)

    assert seen, "no partial reply was reported"
    texts = [partial.text for partial in seen]
    assert _grows(texts) and texts[-1] == "Let me check."
    first_call = [partial.calls[0] for partial in seen if partial.calls]
    assert {call.name for call in first_call} == {NAME}
    first_arguments = [call.arguments for call in first_call]
    assert _grows(first_arguments)
    assert json.loads(first_arguments[-1]) == json.loads(ARGUMENTS)
    second = [partial.calls[1].arguments for partial in seen if len(partial.calls) > 1]
    assert _grows(second) and json.loads(second[-1]) == json.loads(SECOND_ARGUMENTS)
    # What the display ended on is what the reply says.
    assert [(c.name, json.loads(c.arguments_text)) for c in reply.tool_calls] == [
        (call.name, json.loads(call.arguments)) for call in seen[-1].calls
    ]


@pytest.mark.parametrize("provider_key", ["openai_chat", "anthropic", "openai_responses"])
def test_argument_fragments_are_shown_before_the_call_is_complete(provider_key: str) -> None:
    _, seen = _ask(provider_key, watch=True)

    first_arguments = [partial.calls[0].arguments for partial in seen if partial.calls]
    unfinished = [text for text in first_arguments if text and text != ARGUMENTS]
    assert unfinished, "the arguments only ever appeared whole"
    for text in unfinished:
        with pytest.raises(ValueError):
            json.loads(text)
    # The call's id and name come first, with its first fragment.
    assert {(partial.calls[0].id, partial.calls[0].name) for partial in seen if partial.calls} == {
        ("toolu_a" if provider_key == "anthropic" else "call_a", NAME)
    }


@pytest.mark.parametrize("provider_key", list(STREAMS))
def test_watching_changes_neither_the_reply_nor_the_recorded_body(provider_key: str) -> None:
    watched, _ = _ask(provider_key, watch=True)
    unwatched, _ = _ask(provider_key, watch=False)

    assert watched.exchange.response_body == unwatched.exchange.response_body == STREAMS[provider_key][1]
    assert (watched.text, watched.tool_calls, watched.finish_reason, watched.usage) == (
        unwatched.text,
        unwatched.tool_calls,
        unwatched.finish_reason,
        unwatched.usage,
    )


@pytest.mark.parametrize("provider_key", list(STREAMS))
def test_a_streamed_reply_is_searched_by_the_text_and_calls_it_assembled_to(provider_key: str) -> None:
    reply, _ = _ask(provider_key, watch=False)

    search_text = reply.exchange.search_text
    assert search_text is not None
    text, *calls = search_text.split("\n")
    assert text == "Let me check."
    # Each call whole, where the events cut its arguments into pieces.
    named = [line.split(" ", 1) for line in calls]
    assert [(name, json.loads(arguments)) for name, arguments in named] == [
        (NAME, json.loads(ARGUMENTS)),
        (NAME, json.loads(SECOND_ARGUMENTS)),
    ]
    assert reply.exchange.response_body == STREAMS[provider_key][1]


WHOLE_COMPLETION = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Sunny."}, "finish_reason": "stop"}],
}


def test_a_reply_sent_whole_is_searched_by_its_body() -> None:
    provider, _ = serve(OpenAIChatProvider, lambda request: httpx2.Response(200, json=WHOLE_COMPLETION))

    reply = provider.complete(ModelRequest(messages=QUESTION))

    assert reply.text == "Sunny." and reply.exchange.search_text is None


@pytest.mark.parametrize("provider_key", list(STREAMS))
def test_a_callback_that_fails_stops_the_display_not_the_call(
    provider_key: str, caplog: pytest.LogCaptureFixture
) -> None:
    provider_class, text = STREAMS[provider_key]
    provider, _ = serve(provider_class, _dribbling(text), stream=True)
    calls = 0

    def broken(partial: PartialReply) -> None:
        nonlocal calls
        calls += 1
        raise RuntimeError("the display went away")

    with caplog.at_level(logging.ERROR, logger="conversations.loop.providers.streaming"):
        reply = provider.complete(ModelRequest(messages=QUESTION, tools=[WEATHER]), on_delta=broken)

    assert calls == 1
    assert [call.name for call in reply.tool_calls] == [NAME, NAME]
    assert "live display of a streamed reply stopped" in caplog.text


def test_a_reply_sent_whole_never_calls_the_callback() -> None:
    provider, _ = serve(OpenAIChatProvider, lambda request: httpx2.Response(200, json=WHOLE_COMPLETION))
    seen: list[PartialReply] = []

    reply = provider.complete(ModelRequest(messages=QUESTION), on_delta=seen.append)

    assert reply.text == "Sunny."
    assert seen == []


# --- reading an event stream as it arrives ---------------------------------------------------------

MIXED = 'event: a\r\ndata: {"t": "Grüße ☀"}\r\n\r\ndata: one\ndata: two\n\n: comment\n\nevent: b\rdata: x\r\r'


@pytest.mark.parametrize("size", [1, 2, 3, 5, 64])
def test_an_event_stream_cut_anywhere_gives_the_same_events_as_read_whole(size: int) -> None:
    reader = SseReader()
    events: list[SseEvent] = []
    for piece in chunks_of(MIXED, size):
        events += reader.feed(piece)
    events += reader.close()

    assert events == parse_sse(MIXED)
    assert events[0] == SseEvent("a", '{"t": "Grüße ☀"}')


def _last_boundary_by_matching(text: str, start: int) -> int:
    end = 0
    for match in streaming._BOUNDARY.finditer(text, start):
        end = match.end()
    return end


@settings(max_examples=1000, deadline=None)
@given(text=st.text(alphabet="d:\n\r", max_size=30), data=st.data())
def test_the_last_event_boundary_is_found_from_the_end_where_every_match_would_find_it(
    text: str, data: st.DataObject
) -> None:
    """Runs of line ends pair from the left: three LFs end an event after the second, four
    after the fourth; found from the end, the same boundary must be found."""
    start = data.draw(st.integers(0, len(text)))

    assert streaming._last_boundary_end(text, start) == _last_boundary_by_matching(text, start)


@settings(max_examples=300, deadline=None)
@given(
    text=st.lists(st.sampled_from(["data: x", "data: é", "\n", "event: e", ": c"]), max_size=40).map("".join),
    cuts=st.lists(st.integers(1, 9), min_size=1, max_size=8),
)
def test_a_stream_of_runs_of_line_ends_cut_anywhere_gives_the_events_read_whole(
    text: str, cuts: list[int]
) -> None:
    reader, events, data, at = SseReader(), [], text.encode(), 0
    for size in cuts * (len(data) // sum(cuts) + 1):
        events += reader.feed(data[at : at + size])
        at += size
    events += reader.close()

    assert events == parse_sse(text)


@pytest.mark.parametrize(
    "pieces",
    [[b"data: a\xff", b"b\n\n"], [b"data: a\xe2\x82", b"b\n\n"], [b"data: a\xe2", b"\x82", b"b\n\n"]],
    ids=["whole-byte", "cut-sequence", "cut-twice"],
)
def test_a_byte_that_is_not_utf8_is_shown_replaced_and_said_whichever_piece_completes_it(
    pieces: list[bytes],
) -> None:
    """Most pieces of a stream are ASCII and are not scanned for bytes that are not UTF-8; a
    piece that is ASCII itself may still complete such a byte left over from the one before."""
    reader = SseReader()
    events = [event for piece in pieces for event in reader.feed(piece)] + reader.close()

    assert reader.replaced
    assert [event.data for event in events] == ["a" + "\ufffd" * (len(b"".join(pieces)) - 10) + "b"]


def test_events_are_told_as_soon_as_their_blank_line_arrives() -> None:
    told: list[SseEvent] = []
    pieces = iter([b"data: 1\n", b"\ndata: 2", b"\n\n"])

    def watch(event: SseEvent) -> None:
        told.append(event)

    def chunks() -> Iterator[bytes]:
        for piece in pieces:
            yield piece
            if piece == b"\ndata: 2":
                assert told == [SseEvent("message", "1")]

    body = read_events(chunks(), watch)

    assert body == b"data: 1\n\ndata: 2\n\n"
    assert told == [SseEvent("message", "1"), SseEvent("message", "2")]


def test_throttling_passes_the_first_snapshot_and_drops_those_that_come_too_soon() -> None:
    passed: list[PartialReply] = []
    slow = throttled(passed.append, interval=3600)
    snapshots = [PartialReply(text="a" * n) for n in range(1, 5)]

    for snapshot in snapshots:
        slow(snapshot)

    assert passed == snapshots[:1]


def test_without_an_interval_every_snapshot_passes() -> None:
    passed: list[PartialReply] = []
    eager = throttled(passed.append, interval=0)
    snapshots = [PartialReply(text="a" * n) for n in range(1, 5)]

    for snapshot in snapshots:
        eager(snapshot)

    assert passed == snapshots


_PIECE = st.text(alphabet='ab"{', max_size=3)
_FRAGMENT = st.one_of(
    st.fixed_dictionaries(
        {
            "index": st.sampled_from([0, 1, True, 1.0, "0"]),
            "function": st.fixed_dictionaries({"arguments": _PIECE}),
        }
    ),
    st.fixed_dictionaries(
        {
            "index": st.sampled_from([0, 1]),
            "function": st.fixed_dictionaries({"name": st.just("h"), "arguments": _PIECE}),
        }
    ),
    st.fixed_dictionaries(
        {
            "index": st.sampled_from([0, 1]),
            "id": st.sampled_from(["", "c1"]),
            "type": st.just("function"),
            "function": st.fixed_dictionaries({"name": st.sampled_from(["f", "g"]), "arguments": _PIECE}),
        }
    ),
    st.fixed_dictionaries(
        {
            "index": st.just(0),
            "function": st.fixed_dictionaries({"arguments": st.sampled_from([None, 7, {"a": 1}])}),
        }
    ),
)
_DELTA = st.one_of(
    st.fixed_dictionaries({"content": st.one_of(_PIECE, st.none())}),
    st.fixed_dictionaries({"tool_calls": st.lists(_FRAGMENT, max_size=2)}),
    st.fixed_dictionaries({"content": _PIECE, "reasoning_content": _PIECE}),
    st.fixed_dictionaries({"refusal": _PIECE}),
)
_CHUNK = st.fixed_dictionaries(
    {
        "choices": st.lists(
            st.fixed_dictionaries(
                {
                    "index": st.sampled_from([0, 0, 1]),
                    "delta": _DELTA,
                    "finish_reason": st.sampled_from([None, None, "stop", 3]),
                }
            ),
            max_size=2,
        )
    },
    optional={"usage": st.sampled_from([{"total_tokens": 3}, {}, None])},
)


class _GeneralWayOnly(_ChunkAssembler):
    def _add_piece(self, delta: JSONDict) -> bool:
        return False


def _call_chunk(fragment: JSONDict) -> JSONDict:
    return {"choices": [{"index": 0, "delta": {"tool_calls": [fragment]}, "finish_reason": None}]}


@settings(max_examples=500, deadline=None)
@given(chunks=st.lists(_CHUNK, max_size=12))
@example(  # a call begun without its name, then pieces whose index is not a plain integer
    chunks=[
        _call_chunk({"index": 0, "function": {"arguments": "{"}}),
        _call_chunk({"index": 1, "id": "c2", "type": "function", "function": {"name": "g", "arguments": ""}}),
        _call_chunk({"index": 1.0, "function": {"arguments": "a"}}),
        _call_chunk({"index": True, "function": {"arguments": "b"}}),
        _call_chunk({"index": 0, "function": {"name": "f", "arguments": "}"}}),
    ]
)
def test_the_chat_chunks_short_way_reads_each_chunk_as_the_general_way_does(chunks: list[JSONDict]) -> None:
    """Most chunks of a long reply are one piece of text or of a begun call's arguments, read a
    short way; any chunk, of any shape, must leave the reply and every snapshot shown as the
    general way leaves them."""

    def read(kind: type[_ChunkAssembler]) -> tuple[object, ...]:
        shown: list[PartialReply] = []
        assembler = kind(emitter=PartialEmitter(shown.append))
        for chunk in chunks:
            assembler.add(json.loads(json.dumps(chunk)))
        return assembler.message(), assembler.finish_reason, assembler.usage, shown

    assert read(_ChunkAssembler) == read(_GeneralWayOnly)
