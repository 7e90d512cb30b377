"""OpenAI Chat Completions: compatible engines' quirks and streaming (docs/wire-formats.md §1.3, §6, §13).

The plain request/response behaviour is in ``test_openai_chat.py``.
"""

from __future__ import annotations

import uuid

import pytest

from conversations.loop.llm import Message, ToolCall
from conversations.loop.providers.base import ModelReply, ModelRequest, ProviderError
from conversations.loop.providers.openai_chat import OpenAIChatProvider
from conversations.typealias import JSONDict, JSONValue
from tests.conversations.provider_fakes import QUESTION, WEATHER, answering, serve, sse, streaming

ARGUMENTS_TEXT = '{"city":"Beijing","day":"tomorrow"}'


def completion(message: JSONDict, finish_reason: str = "tool_calls") -> JSONDict:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "test-model",
        "choices": [
            {"index": 0, "finish_reason": finish_reason, "message": {"role": "assistant", **message}}
        ],
        "usage": {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16},
    }


def call(call_id: str, arguments: JSONValue = ARGUMENTS_TEXT, **extra: JSONValue) -> JSONDict:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": "demo__get_weather_forecast", "arguments": arguments},
        **extra,
    }


def ask(
    body: JSONDict, request: ModelRequest | None = None, *, stream: bool = False
) -> tuple[ModelReply, JSONDict]:
    respond = streaming(body["raw"]) if stream else answering(body)  # type: ignore[arg-type]
    provider, server = serve(
        OpenAIChatProvider, respond, base_url=f"http://compat-{uuid.uuid4().hex}.test/v1", stream=stream
    )
    reply = provider.complete(request or ModelRequest(messages=QUESTION, tools=[WEATHER]))
    return reply, server.body()


# --- compatible engines --------------------------------------------------------------------


def test_arguments_sent_as_an_object_are_serialised_compactly() -> None:
    # Ollama's shape: arguments already parsed, and no call id.
    reply, _ = ask(
        completion({"content": "", "tool_calls": [call("", {"city": "Beijing", "day": "tomorrow"})]})
    )

    assert reply.tool_calls[0].arguments_text == ARGUMENTS_TEXT


def test_empty_call_ids_are_synthesized_distinct_and_stable() -> None:
    body = completion({"content": None, "tool_calls": [call(""), call("", '{"city":"Shanghai"}')]})

    first, _ = ask(body)
    again, _ = ask(body)

    ids = [c.id for c in first.tool_calls]
    assert all(call_id.startswith("synth_") for call_id in ids) and len(set(ids)) == 2
    assert ids == [c.id for c in again.tool_calls]


def test_finish_reason_tool_from_old_llama_cpp_counts_as_tool_calls() -> None:
    reply, _ = ask(completion({"content": None, "tool_calls": [call("call_1")]}, "tool"))

    assert reply.finish_reason == "tool_calls"


def test_reasoning_content_is_kept_and_sent_back_on_the_assistant_tool_call_message() -> None:
    thinking = "The user wants the forecast; call the weather tool."
    reply, _ = ask(
        completion({"content": None, "reasoning_content": thinking, "tool_calls": [call("call_1")]})
    )

    assert reply.echo == {"openai_chat": {"reasoning_content": thinking}}
    history = [
        *QUESTION,
        Message(role="assistant", tool_calls=reply.tool_calls, echo=reply.echo),
        Message(role="tool", content="Sunny", tool_call_id="call_1"),
    ]
    _, body = ask(completion({"content": "Sunny."}, "stop"), ModelRequest(messages=history, tools=[WEATHER]))
    assert body["messages"][1] == {
        "role": "assistant",
        "content": None,
        "reasoning_content": thinking,
        "tool_calls": [call("call_1")],
    }


def test_a_thought_signature_in_extra_content_is_echoed_on_its_call() -> None:
    extra: JSONDict = {"google": {"thought_signature": "CiQBcsjafE2bwnR7"}}
    reply, _ = ask(completion({"content": None, "tool_calls": [call("call_1", extra_content=extra)]}))

    history = [
        *QUESTION,
        Message(role="assistant", tool_calls=reply.tool_calls, echo=reply.echo),
        Message(role="tool", content="Sunny", tool_call_id="call_1"),
    ]
    _, body = ask(completion({"content": "Sunny."}, "stop"), ModelRequest(messages=history, tools=[WEATHER]))
    assert body["messages"][1]["tool_calls"] == [call("call_1", extra_content=extra)]


def test_a_plain_reply_keeps_no_echo() -> None:
    reply, _ = ask(completion({"content": "Sunny."}, "stop"))

    assert reply.echo is None and reply.text == "Sunny."


# --- streaming -----------------------------------------------------------------------------


def chunk(delta: JSONDict, finish_reason: str | None = None, **extra: JSONValue) -> JSONDict:
    return {
        "id": "chatcmpl-2",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "test-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}],
        "usage": None,
        **extra,
    }


def fragment(index: int, arguments: str) -> JSONDict:
    return chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments}}]})


def start(index: int, call_id: str) -> JSONDict:
    first = {
        "index": index,
        "id": call_id,
        "type": "function",
        "function": {"name": "demo__get_weather_forecast", "arguments": ""},
    }
    return chunk({"tool_calls": [first]})


USAGE = {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16}
PARALLEL_STREAM = sse(
    [
        chunk({"role": "assistant", "content": None}),
        start(0, "call_a"),
        fragment(0, '{"ci'),
        fragment(0, 'ty":"Bei'),
        start(1, "call_b"),
        fragment(1, '{"city":'),
        fragment(0, 'jing","day":"tomorrow"}'),
        fragment(1, '"Shanghai"}'),
        chunk({}, "tool_calls"),
        {**chunk({}), "choices": [], "usage": USAGE},
    ],
    done=True,
)


def test_a_stream_is_asked_for_with_usage_and_recorded_verbatim() -> None:
    reply, body = ask({"raw": PARALLEL_STREAM}, stream=True)

    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert reply.exchange.response_body == PARALLEL_STREAM


def test_argument_fragments_are_joined_per_call_index() -> None:
    reply, _ = ask({"raw": PARALLEL_STREAM}, stream=True)

    assert reply.tool_calls == [
        ToolCall("call_a", "demo__get_weather_forecast", ARGUMENTS_TEXT),
        ToolCall("call_b", "demo__get_weather_forecast", '{"city":"Shanghai"}'),
    ]
    assert reply.finish_reason == "tool_calls"
    assert reply.usage == USAGE
    assert reply.text is None


def test_a_streamed_reply_equals_the_whole_one() -> None:
    streamed, _ = ask(
        {
            "raw": sse(
                [
                    start(0, "call_a"),
                    fragment(0, ARGUMENTS_TEXT[:7]),
                    fragment(0, ARGUMENTS_TEXT[7:]),
                    chunk({}, "tool_calls"),
                ],
                done=True,
            )
        },
        stream=True,
    )
    whole, _ = ask(completion({"content": None, "tool_calls": [call("call_a")]}))

    assert (streamed.text, streamed.tool_calls, streamed.finish_reason) == (
        whole.text,
        whole.tool_calls,
        whole.finish_reason,
    )


def test_streamed_text_and_reasoning_content_are_joined() -> None:
    raw = sse(
        [
            chunk({"role": "assistant", "reasoning_content": "Think"}),
            chunk({"reasoning_content": "ing."}),
            chunk({"content": "Sunny "}),
            chunk({"content": "tomorrow."}),
            chunk({}, "stop"),
        ],
        done=True,
    )

    reply, _ = ask({"raw": raw}, stream=True)

    assert reply.text == "Sunny tomorrow."
    assert reply.echo == {"openai_chat": {"reasoning_content": "Thinking."}}


def test_an_error_object_in_the_stream_raises_with_its_message() -> None:
    raw = sse(
        [chunk({"content": "Sun"}), {"error": {"message": "upstream model crashed", "type": "server_error"}}]
    )

    with pytest.raises(ProviderError) as caught:
        ask({"raw": raw}, stream=True)

    assert (
        caught.value.message == "the model endpoint sent an error in the event stream: upstream model crashed"
    )
    assert caught.value.exchange is not None and caught.value.exchange.response_body == raw


def test_a_stream_cut_before_finish_reason_and_done_is_unreadable() -> None:
    with pytest.raises(ProviderError) as caught:
        ask({"raw": sse([start(0, "call_a"), fragment(0, '{"ci')])}, stream=True)

    assert caught.value.message.endswith("the event stream ended before a finish_reason or [DONE]")
