"""The Anthropic Messages provider against recorded-shape replies (docs/wire-formats.md §4, §11, §13)."""

from __future__ import annotations

import json

import httpx2
import pytest

from conversations.loop.llm import Message, ToolCall, ToolChoice
from conversations.loop.paradigms.auto import refused_capability
from conversations.loop.providers.anthropic import AnthropicProvider
from conversations.loop.providers.base import ModelReply, ModelRequest, ProviderError
from conversations.loop.wire import MASK
from conversations.typealias import JSONDict, JSONValue
from tests.conversations.provider_fakes import (
    API_KEY,
    CLOCK,
    QUESTION,
    WEATHER,
    answering,
    assert_key_is_nowhere,
    serve,
    sse,
    streaming,
)

ARGUMENTS = {"city": "Beijing", "day": "tomorrow"}


def message(content: list[JSONValue], stop_reason: str = "tool_use") -> JSONDict:
    return {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 412, "output_tokens": 71},
    }


def tool_use(call_id: str = "toolu_01A09q90qw90lq917835lq9", arguments: JSONDict | None = None) -> JSONDict:
    return {
        "type": "tool_use",
        "id": call_id,
        "name": "demo__get_weather_forecast",
        "input": ARGUMENTS if arguments is None else arguments,
    }


THINKING: JSONDict = {
    "type": "thinking",
    "thinking": "The user wants tomorrow's forecast for Beijing; the forecast tool fits.",
    "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds",
}
TEXT_AND_CALL = message([{"type": "text", "text": "I'll look that up."}, tool_use()])


def ask(
    body: JSONDict | None = None, request: ModelRequest | None = None, **serve_options: object
) -> tuple[ModelReply, JSONDict]:
    provider, server = serve(AnthropicProvider, answering(body or TEXT_AND_CALL), **serve_options)  # type: ignore[arg-type]
    reply = provider.complete(request or ModelRequest(messages=QUESTION, tools=[WEATHER]))
    return reply, server.body()


# --- requests ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base_url", "path"),
    [
        ("http://anthropic.test", "/v1/messages"),
        ("http://anthropic.test/v1/", "/v1/messages"),
        ("http://127.0.0.1/demo-model", "/demo-model/v1/messages"),
    ],
)
def test_the_request_goes_to_v1_messages_under_the_base_url(base_url: str, path: str) -> None:
    provider, server = serve(AnthropicProvider, answering(TEXT_AND_CALL), base_url=base_url)

    reply = provider.complete(ModelRequest(messages=QUESTION, tools=[WEATHER]))

    assert server.received[0].url.path == path
    assert reply.exchange.label == f"POST {path}"
    assert reply.exchange.request_body.encode() == server.received[0].content


def test_the_key_goes_in_x_api_key_with_the_version_header_and_is_never_recorded() -> None:
    provider, server = serve(AnthropicProvider, answering(TEXT_AND_CALL))

    reply = provider.complete(ModelRequest(messages=QUESTION, tools=[WEATHER]))

    sent = server.received[0].headers
    assert sent["x-api-key"] == API_KEY
    assert sent["anthropic-version"] == "2023-06-01"
    assert "authorization" not in sent
    assert reply.exchange.request_headers["x-api-key"] == MASK
    assert_key_is_nowhere(reply.exchange)


def test_tools_system_and_max_tokens_are_sent_in_anthropic_shape() -> None:
    request = ModelRequest(messages=[Message(role="system", content="Be brief."), *QUESTION], tools=[WEATHER])

    _, body = ask(request=request)

    assert body == {
        "model": "test-model",
        "max_tokens": 4096,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": "What will the weather be like in Beijing tomorrow?"}],
        "tools": [
            {
                "name": "demo__get_weather_forecast",
                "description": "Get the weather forecast for a city.",
                "input_schema": WEATHER.input_schema,
            }
        ],
        "tool_choice": {"type": "auto"},
    }


@pytest.mark.parametrize(
    ("choice", "wire"),
    [
        (ToolChoice("auto"), {"type": "auto"}),
        (ToolChoice("required"), {"type": "any"}),
        (
            ToolChoice("named", "demo__get_weather_forecast"),
            {"type": "tool", "name": "demo__get_weather_forecast"},
        ),
        (ToolChoice("none"), {"type": "none"}),
    ],
    ids=["auto", "required", "named", "none"],
)
def test_tool_choice_is_sent_in_each_mode(choice: ToolChoice, wire: JSONDict) -> None:
    _, body = ask(request=ModelRequest(messages=QUESTION, tools=[WEATHER], tool_choice=choice))

    assert body["tool_choice"] == wire


def test_no_parallel_calls_sets_disable_parallel_tool_use() -> None:
    request = ModelRequest(messages=QUESTION, tools=[WEATHER], parallel_tool_calls=False)

    _, body = ask(request=request)

    assert body["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}


def test_without_tools_neither_tools_nor_tool_choice_is_sent() -> None:
    _, body = ask(message([{"type": "text", "text": "Hi."}], "end_turn"), ModelRequest(messages=QUESTION))

    assert "tools" not in body and "tool_choice" not in body


def _history(*, is_error: bool = False) -> list[Message]:
    return [
        *QUESTION,
        Message(
            role="assistant",
            content="Checking both days.",
            tool_calls=[
                ToolCall("toolu_1", "demo__get_weather_forecast", '{"city":"Beijing","day":"tomorrow"}'),
                ToolCall("toolu_2", "demo__current_time", ""),
            ],
        ),
        Message(
            role="tool", content="Sunny, 24°C", tool_call_id="toolu_1", name="demo__get_weather_forecast"
        ),
        Message(
            role="tool",
            content="Error: the clock is down",
            tool_call_id="toolu_2",
            name="demo__current_time",
            is_error=is_error,
        ),
    ]


def test_calls_are_replayed_as_tool_use_and_results_merge_into_one_user_message_with_is_error() -> None:
    _, body = ask(request=ModelRequest(messages=_history(is_error=True), tools=[WEATHER, CLOCK]))

    assert body["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking both days."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "demo__get_weather_forecast",
                    "input": ARGUMENTS,
                },
                {"type": "tool_use", "id": "toolu_2", "name": "demo__current_time", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny, 24°C"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": "Error: the clock is down",
                    "is_error": True,
                },
            ],
        },
    ]


def test_a_result_that_is_no_error_carries_no_is_error_flag() -> None:
    _, body = ask(request=ModelRequest(messages=_history(is_error=False), tools=[WEATHER, CLOCK]))

    assert all("is_error" not in block for block in body["messages"][-1]["content"])


def test_a_user_message_after_results_joins_them_as_a_text_block() -> None:
    history = [*_history(), Message(role="user", content="And in Shanghai?")]

    _, body = ask(request=ModelRequest(messages=history, tools=[WEATHER, CLOCK]))

    assert [block["type"] for block in body["messages"][-1]["content"]] == [
        "tool_result",
        "tool_result",
        "text",
    ]
    assert body["messages"][-1]["content"][-1] == {"type": "text", "text": "And in Shanghai?"}


def test_thinking_blocks_kept_on_the_message_are_echoed_back_unchanged() -> None:
    blocks: list[JSONValue] = [THINKING, tool_use("toolu_1")]
    history = [
        *QUESTION,
        Message(
            role="assistant",
            tool_calls=[ToolCall("toolu_1", "demo__get_weather_forecast", json.dumps(ARGUMENTS))],
            echo={"anthropic": {"content": blocks}},
        ),
        Message(role="tool", content="Sunny", tool_call_id="toolu_1"),
    ]

    _, body = ask(request=ModelRequest(messages=history, tools=[WEATHER]))

    assert body["messages"][1] == {"role": "assistant", "content": blocks}


def test_kept_blocks_that_no_longer_match_the_calls_are_not_echoed() -> None:
    history = [
        *QUESTION,
        Message(
            role="assistant",
            tool_calls=[ToolCall("toolu_9", "demo__get_weather_forecast", "{}")],
            echo={"anthropic": {"content": [THINKING, tool_use("toolu_1")]}},
        ),
        Message(role="tool", content="Sunny", tool_call_id="toolu_9"),
    ]

    _, body = ask(request=ModelRequest(messages=history, tools=[WEATHER]))

    assert body["messages"][1]["content"] == [
        {"type": "tool_use", "id": "toolu_9", "name": "demo__get_weather_forecast", "input": {}}
    ]


def test_a_json_schema_response_format_is_sent_as_output_config() -> None:
    schema: JSONDict = {"type": "object", "properties": {"answer": {"type": "string"}}}
    request = ModelRequest(
        messages=QUESTION,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "reply", "schema": schema, "strict": True},
        },
    )

    _, body = ask(message([{"type": "text", "text": '{"answer": "sunny"}'}], "end_turn"), request)

    assert body["output_config"] == {"format": {"type": "json_schema", "schema": schema}}
    assert "response_format" not in body


def test_a_json_object_response_format_is_refused_so_auto_downgrades() -> None:
    provider, server = serve(AnthropicProvider, answering(TEXT_AND_CALL))

    with pytest.raises(ProviderError) as caught:
        provider.complete(ModelRequest(messages=QUESTION, response_format={"type": "json_object"}))

    assert "is not supported" in caught.value.message
    assert refused_capability(caught.value) == "structured_output"
    assert server.received == []


# --- replies -------------------------------------------------------------------------------


def test_text_then_a_tool_use_block_parse_into_text_and_a_call_with_compact_arguments() -> None:
    reply, _ = ask(TEXT_AND_CALL)

    assert reply.text == "I'll look that up."
    assert reply.tool_calls == [
        ToolCall(
            "toolu_01A09q90qw90lq917835lq9",
            "demo__get_weather_forecast",
            '{"city":"Beijing","day":"tomorrow"}',
        )
    ]
    assert reply.finish_reason == "tool_calls"
    assert reply.usage == {"input_tokens": 412, "output_tokens": 71}
    assert reply.echo is None


def test_parallel_tool_use_blocks_are_several_calls() -> None:
    body = message([tool_use("toolu_a"), tool_use("toolu_b", {"city": "Shanghai"})])

    reply, _ = ask(body)

    assert [(c.id, c.arguments_text) for c in reply.tool_calls] == [
        ("toolu_a", '{"city":"Beijing","day":"tomorrow"}'),
        ("toolu_b", '{"city":"Shanghai"}'),
    ]
    assert reply.text is None


def test_a_call_with_no_arguments_has_an_empty_object() -> None:
    reply, _ = ask(
        message([{"type": "tool_use", "id": "toolu_c", "name": "demo__current_time", "input": {}}])
    )

    assert reply.tool_calls[0].arguments_text == "{}"


def test_a_reply_with_thinking_keeps_its_raw_blocks_for_the_echo() -> None:
    body = message([THINKING, tool_use()])

    reply, _ = ask(body)

    assert reply.echo == {"anthropic": {"content": [THINKING, tool_use()]}}
    assert reply.text is None


@pytest.mark.parametrize(
    ("stop_reason", "finish_reason"),
    [("end_turn", "stop"), ("max_tokens", "length"), ("stop_sequence", "stop"), ("pause_turn", "pause_turn")],
)
def test_stop_reasons_map_to_neutral_finish_reasons(stop_reason: str, finish_reason: str) -> None:
    reply, _ = ask(message([{"type": "text", "text": "Sunny."}], stop_reason))

    assert reply.finish_reason == finish_reason


def test_a_refusal_stop_reason_is_a_refusal() -> None:
    reply, _ = ask(message([], "refusal"))

    assert reply.refusal is not None and "refusal" in reply.refusal


# --- streaming -----------------------------------------------------------------------------


def stream_of(*blocks: list[tuple[str, JSONValue]], stop_reason: str = "tool_use") -> str:
    events: list[tuple[str, JSONValue]] = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    **message([], stop_reason),
                    "stop_reason": None,
                    "usage": {"input_tokens": 412, "output_tokens": 1},
                },
            },
        ),
        ("ping", {"type": "ping"}),
    ]
    for block in blocks:
        events += block
    events += [
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": 71},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return sse(events)


def text_block(index: int, *pieces: str) -> list[tuple[str, JSONValue]]:
    return [
        (
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}},
        ),
        *[
            (
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": p}},
            )
            for p in pieces
        ],
        ("content_block_stop", {"type": "content_block_stop", "index": index}),
    ]


def tool_block(index: int, call_id: str, name: str, *fragments: str) -> list[tuple[str, JSONValue]]:
    start = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
    return [
        ("content_block_start", {"type": "content_block_start", "index": index, "content_block": start}),
        *[
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": f},
                },
            )
            for f in fragments
        ],
        ("content_block_stop", {"type": "content_block_stop", "index": index}),
    ]


def ask_streamed(text: str) -> ModelReply:
    provider, server = serve(AnthropicProvider, streaming(text), stream=True)
    reply = provider.complete(ModelRequest(messages=QUESTION, tools=[WEATHER]))
    assert server.body()["stream"] is True
    return reply


def test_a_streamed_call_split_over_many_deltas_gives_the_same_reply_as_the_whole_message() -> None:
    raw = stream_of(
        text_block(0, "I'll look ", "that up."),
        tool_block(
            1,
            "toolu_01A09q90qw90lq917835lq9",
            "demo__get_weather_forecast",
            '{"city',
            '": "Bei',
            'jing", "d',
            'ay": "tomo',
            'rrow"}',
        ),
    )

    streamed = ask_streamed(raw)
    whole, _ = ask(TEXT_AND_CALL)

    assert (streamed.text, streamed.tool_calls, streamed.finish_reason) == (
        whole.text,
        whole.tool_calls,
        whole.finish_reason,
    )
    assert streamed.usage == {"input_tokens": 412, "output_tokens": 71}
    assert streamed.exchange.response_body == raw


def test_a_streamed_tool_with_no_arguments_gets_an_empty_object() -> None:
    reply = ask_streamed(stream_of(tool_block(0, "toolu_c", "demo__current_time", "")))

    assert reply.tool_calls == [ToolCall("toolu_c", "demo__current_time", "{}")]


def test_streamed_fragments_that_are_not_json_are_kept_raw_for_the_parser() -> None:
    reply = ask_streamed(
        stream_of(tool_block(0, "toolu_d", "demo__get_weather_forecast", '{"city": "Bei', "jing"))
    )

    assert reply.tool_calls[0].arguments_text == '{"city": "Beijing'


def test_streamed_thinking_and_its_signature_are_kept_for_the_echo() -> None:
    thinking = [
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "thinking", "thinking": ""},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "thinking_delta", "thinking": THINKING["thinking"]},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "signature_delta", "signature": THINKING["signature"]},
            },
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
    ]

    reply = ask_streamed(
        stream_of(thinking, tool_block(1, "toolu_e", "demo__get_weather_forecast", json.dumps(ARGUMENTS)))
    )

    assert reply.echo == {"anthropic": {"content": [THINKING, tool_use("toolu_e")]}}


def test_an_error_event_in_the_stream_raises_with_its_message() -> None:
    raw = sse(
        [
            ("message_start", {"type": "message_start", "message": message([])}),
            ("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ]
    )
    provider, _ = serve(AnthropicProvider, streaming(raw), stream=True)

    with pytest.raises(ProviderError) as caught:
        provider.complete(ModelRequest(messages=QUESTION))

    assert caught.value.message == "the model endpoint sent an error in the event stream: Overloaded"
    assert caught.value.exchange is not None and caught.value.exchange.response_body == raw


def test_a_stream_cut_before_message_stop_is_unreadable() -> None:
    raw = stream_of(tool_block(0, "toolu_f", "demo__current_time", "")).rsplit("event: message_delta", 1)[0]
    provider, _ = serve(AnthropicProvider, streaming(raw), stream=True)

    with pytest.raises(ProviderError) as caught:
        provider.complete(ModelRequest(messages=QUESTION))

    assert caught.value.message == (
        "the model endpoint sent an unreadable response: the event stream ended before message_stop"
    )


# --- failures ------------------------------------------------------------------------------


def test_a_400_carries_anthropics_message_verbatim() -> None:
    detail = "Thinking may not be enabled when tool_choice forces tool use."
    error_body = {"type": "error", "error": {"type": "invalid_request_error", "message": detail}}
    provider, _ = serve(AnthropicProvider, answering(error_body, status=400))

    with pytest.raises(ProviderError) as caught:
        provider.complete(
            ModelRequest(messages=QUESTION, tools=[WEATHER], tool_choice=ToolChoice("required"))
        )

    assert caught.value.message == f"the model endpoint answered 400: {detail}"
    assert caught.value.status == 400
    assert caught.value.exchange is not None
    assert caught.value.exchange.error == detail
    assert json.loads(caught.value.exchange.response_body) == error_body
    assert_key_is_nowhere(caught.value.exchange)


def test_a_200_that_is_not_a_message_is_unreadable() -> None:
    provider, _ = serve(AnthropicProvider, lambda request: httpx2.Response(200, text="<html>oops</html>"))

    with pytest.raises(ProviderError) as caught:
        provider.complete(ModelRequest(messages=QUESTION))

    assert caught.value.message.startswith("the model endpoint sent an unreadable response: ")
    assert caught.value.exchange is not None and caught.value.exchange.response_body == "<html>oops</html>"


def test_a_connection_error_raises_with_the_attempted_exchange() -> None:
    def refuse(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("connection refused", request=request)

    provider, _ = serve(AnthropicProvider, refuse)

    with pytest.raises(ProviderError) as caught:
        provider.complete(ModelRequest(messages=QUESTION))

    assert caught.value.message.startswith("the model endpoint could not be reached: ")
    assert caught.value.exchange is not None and caught.value.exchange.status == "error"
    assert caught.value.exchange.request_headers["x-api-key"] == MASK
    assert_key_is_nowhere(caught.value.exchange)
