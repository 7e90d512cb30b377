"""The OpenAI Responses provider against recorded-shape replies (docs/wire-formats.md §3, §11, §13)."""

from __future__ import annotations

import json
import uuid

import httpx2
import pytest

from conversations.loop.llm import Message, ToolCall, ToolChoice
from conversations.loop.providers.base import ModelReply, ModelRequest, ProviderError
from conversations.loop.providers.openai_responses import OpenAIResponsesProvider
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

ARGUMENTS_TEXT = '{"city":"Beijing","day":"tomorrow"}'


def function_call(
    call_id: str = "call_Kp3oZQ5cWxJbXbVbKb1yV1nQ", arguments: str = ARGUMENTS_TEXT
) -> JSONDict:
    return {
        "type": "function_call",
        "id": f"fc_{call_id[5:]}",
        "call_id": call_id,
        "name": "demo__get_weather_forecast",
        "arguments": arguments,
        "status": "completed",
    }


def text_message(text: str) -> JSONDict:
    return {
        "type": "message",
        "id": "msg_67ccd3acc8d48190a77525dc6de64b4104becb25c45c1d41",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def response(output: list[JSONValue], status: str = "completed", **extra: JSONValue) -> JSONDict:
    return {
        "id": "resp_67ccd3a9da748190baa7f1570fe91ac604becb25c45c1d41",
        "object": "response",
        "created_at": 1741476777,
        "status": status,
        "model": "gpt-4.1-2025-04-14",
        "output": output,
        "usage": {"input_tokens": 291, "output_tokens": 23, "total_tokens": 314},
        "error": None,
        "incomplete_details": None,
        **extra,
    }


ONE_CALL = response([function_call()])


def ask(body: JSONValue = None, request: ModelRequest | None = None) -> tuple[ModelReply, JSONDict]:
    provider, server = serve(
        OpenAIResponsesProvider,
        answering(ONE_CALL if body is None else body),
        base_url=f"http://openai-{uuid.uuid4().hex}.test/v1",
    )
    reply = provider.complete(request or ModelRequest(messages=QUESTION, tools=[WEATHER]))
    assert server.received[0].url.path == "/v1/responses"
    return reply, server.body()


# --- requests ------------------------------------------------------------------------------


def test_flat_function_tools_are_sent_with_strict_false() -> None:
    reply, body = ask()

    assert body == {
        "model": "test-model",
        "input": [{"role": "user", "content": "What will the weather be like in Beijing tomorrow?"}],
        "tools": [
            {
                "type": "function",
                "name": "demo__get_weather_forecast",
                "description": "Get the weather forecast for a city.",
                "parameters": WEATHER.input_schema,
                "strict": False,
            }
        ],
        "tool_choice": "auto",
    }
    assert reply.exchange.label == "POST /v1/responses"


def test_the_key_is_a_bearer_token_and_is_never_recorded() -> None:
    provider, server = serve(OpenAIResponsesProvider, answering(ONE_CALL))

    reply = provider.complete(ModelRequest(messages=QUESTION))

    assert server.received[0].headers["authorization"] == f"Bearer {API_KEY}"
    assert reply.exchange.request_headers["authorization"] == MASK
    assert_key_is_nowhere(reply.exchange)


@pytest.mark.parametrize(
    ("choice", "wire"),
    [
        (ToolChoice("auto"), "auto"),
        (ToolChoice("required"), "required"),
        (ToolChoice("none"), "none"),
        (
            ToolChoice("named", "demo__get_weather_forecast"),
            {"type": "function", "name": "demo__get_weather_forecast"},
        ),
    ],
    ids=["auto", "required", "none", "named"],
)
def test_tool_choice_is_sent_in_each_form(choice: ToolChoice, wire: str | JSONDict) -> None:
    _, body = ask(
        request=ModelRequest(
            messages=QUESTION, tools=[WEATHER], tool_choice=choice, parallel_tool_calls=False
        )
    )

    assert body["tool_choice"] == wire
    assert body["parallel_tool_calls"] is False


def test_calls_and_results_are_input_items_paired_by_call_id_and_errors_are_plain_output() -> None:
    history = [
        Message(role="system", content="Be brief."),
        *QUESTION,
        Message(
            role="assistant",
            content="Checking.",
            tool_calls=[
                ToolCall("call_1", "demo__get_weather_forecast", ARGUMENTS_TEXT),
                ToolCall("call_2", "demo__current_time", "{}"),
            ],
        ),
        Message(role="tool", content="Sunny", tool_call_id="call_1", name="demo__get_weather_forecast"),
        Message(
            role="tool",
            content="Error: clock down",
            tool_call_id="call_2",
            name="demo__current_time",
            is_error=True,
        ),
    ]

    _, body = ask(request=ModelRequest(messages=history, tools=[WEATHER, CLOCK]))

    assert body["input"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What will the weather be like in Beijing tomorrow?"},
        {"role": "assistant", "content": "Checking."},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "demo__get_weather_forecast",
            "arguments": ARGUMENTS_TEXT,
        },
        {"type": "function_call", "call_id": "call_2", "name": "demo__current_time", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "Sunny"},
        {"type": "function_call_output", "call_id": "call_2", "output": "Error: clock down"},
    ]


def test_a_json_schema_response_format_moves_flat_into_text_format() -> None:
    schema: JSONDict = {"type": "object", "properties": {"answer": {"type": "string"}}}
    request = ModelRequest(
        messages=QUESTION,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "reply", "schema": schema, "strict": True},
        },
    )

    _, body = ask(response([text_message('{"answer":"sunny"}')]), request)

    assert body["text"] == {
        "format": {"type": "json_schema", "name": "reply", "schema": schema, "strict": True}
    }
    assert "response_format" not in body


# --- replies -------------------------------------------------------------------------------


def test_a_function_call_item_is_a_call_identified_by_its_call_id() -> None:
    reply, _ = ask()

    assert reply.tool_calls == [
        ToolCall("call_Kp3oZQ5cWxJbXbVbKb1yV1nQ", "demo__get_weather_forecast", ARGUMENTS_TEXT)
    ]
    assert reply.finish_reason == "tool_calls"
    assert reply.text is None
    assert reply.usage == {"input_tokens": 291, "output_tokens": 23, "total_tokens": 314}


def test_parallel_calls_and_text_are_all_read() -> None:
    reply, _ = ask(
        response(
            [
                text_message("Two lookups."),
                function_call("call_a"),
                function_call("call_b", '{"city":"Shanghai"}'),
            ]
        )
    )

    assert reply.text == "Two lookups."
    assert [(c.id, c.arguments_text) for c in reply.tool_calls] == [
        ("call_a", ARGUMENTS_TEXT),
        ("call_b", '{"city":"Shanghai"}'),
    ]


def test_a_refusal_part_is_kept() -> None:
    refusal = {
        "type": "message",
        "id": "msg_1",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "refusal", "refusal": "I can't help with that."}],
    }

    reply, _ = ask(response([refusal]))

    assert reply.refusal == "I can't help with that."


def test_an_incomplete_response_cut_at_the_token_limit_finishes_with_length() -> None:
    reply, _ = ask(
        response(
            [text_message("Sunny and")], "incomplete", incomplete_details={"reason": "max_output_tokens"}
        )
    )

    assert reply.finish_reason == "length"


def test_a_failed_response_raises_with_its_error() -> None:
    provider, _ = serve(
        OpenAIResponsesProvider,
        answering(response([], "failed", error={"code": "server_error", "message": "The model failed."})),
    )

    with pytest.raises(ProviderError) as caught:
        provider.complete(ModelRequest(messages=QUESTION))

    assert caught.value.message.endswith("The model failed.")


# --- streaming -----------------------------------------------------------------------------


def event(kind: str, number: int, **fields: JSONValue) -> tuple[str, JSONValue]:
    return kind, {"type": kind, "sequence_number": number, **fields}


def streamed_call(*fragments: str, done: bool = True) -> str:
    item = function_call()
    events = [
        event("response.created", 0, response=response([], "in_progress")),
        event(
            "response.output_item.added",
            1,
            output_index=0,
            item={**item, "arguments": "", "status": "in_progress"},
        ),
        *[
            event(
                "response.function_call_arguments.delta", 2 + n, item_id=item["id"], output_index=0, delta=f
            )
            for n, f in enumerate(fragments)
        ],
    ]
    n = len(events)
    events += [
        event(
            "response.function_call_arguments.done",
            n,
            item_id=item["id"],
            output_index=0,
            arguments="".join(fragments),
        ),
        event(
            "response.output_item.done", n + 1, output_index=0, item={**item, "arguments": "".join(fragments)}
        ),
    ]
    if done:
        events.append(
            event("response.completed", n + 2, response=response([{**item, "arguments": "".join(fragments)}]))
        )
    return sse(events)


def test_a_streamed_call_split_over_many_deltas_gives_the_same_reply_as_the_whole_response() -> None:
    raw = streamed_call('{"ci', 'ty":"Bei', 'jing","d', 'ay":"tom', 'orrow"}')
    provider, server = serve(OpenAIResponsesProvider, streaming(raw), stream=True)

    streamed = provider.complete(ModelRequest(messages=QUESTION, tools=[WEATHER]))
    whole, _ = ask()

    assert server.body()["stream"] is True
    assert (streamed.tool_calls, streamed.finish_reason, streamed.usage) == (
        whole.tool_calls,
        whole.finish_reason,
        whole.usage,
    )
    assert streamed.exchange.response_body == raw


def test_a_streamed_text_reply_is_joined_from_its_deltas() -> None:
    message = text_message("")
    raw = sse(
        [
            event("response.created", 0, response=response([], "in_progress")),
            event("response.output_item.added", 1, output_index=0, item={**message, "content": []}),
            event(
                "response.output_text.delta",
                2,
                item_id=message["id"],
                output_index=0,
                content_index=0,
                delta="Sunny ",
            ),
            event(
                "response.output_text.delta",
                3,
                item_id=message["id"],
                output_index=0,
                content_index=0,
                delta="tomorrow.",
            ),
            event("response.completed", 4, response=response([])),
        ]
    )
    provider, _ = serve(OpenAIResponsesProvider, streaming(raw), stream=True)

    reply = provider.complete(ModelRequest(messages=QUESTION))

    assert reply.text == "Sunny tomorrow."
    assert reply.finish_reason == "stop"


def test_a_stream_that_ends_before_response_completed_is_unreadable() -> None:
    provider, _ = serve(OpenAIResponsesProvider, streaming(streamed_call("{}", done=False)), stream=True)

    with pytest.raises(ProviderError) as caught:
        provider.complete(ModelRequest(messages=QUESTION))

    assert caught.value.message.endswith("the event stream ended before response.completed")


def test_an_error_event_raises_with_its_message() -> None:
    raw = sse([event("error", 0, code="server_error", message="The server had an error.", param=None)])
    provider, _ = serve(OpenAIResponsesProvider, streaming(raw), stream=True)

    with pytest.raises(ProviderError) as caught:
        provider.complete(ModelRequest(messages=QUESTION))

    assert (
        caught.value.message
        == "the model endpoint sent an error in the event stream: The server had an error."
    )


# --- failures ------------------------------------------------------------------------------


def test_a_400_carries_openais_message_verbatim() -> None:
    detail = "Invalid 'tools[0].name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'."
    provider, _ = serve(
        OpenAIResponsesProvider,
        answering(
            {
                "error": {
                    "message": detail,
                    "type": "invalid_request_error",
                    "param": "tools[0].name",
                    "code": "invalid_value",
                }
            },
            400,
        ),
    )

    with pytest.raises(ProviderError) as caught:
        provider.complete(ModelRequest(messages=QUESTION, tools=[WEATHER]))

    assert caught.value.message == f"the model endpoint answered 400: {detail}"
    assert caught.value.status == 400
    assert (
        caught.value.exchange is not None
        and json.loads(caught.value.exchange.response_body)["error"]["code"] == "invalid_value"
    )


def test_a_200_that_is_not_json_is_unreadable() -> None:
    provider, _ = serve(OpenAIResponsesProvider, lambda request: httpx2.Response(200, text="<html>"))

    with pytest.raises(ProviderError) as caught:
        provider.complete(ModelRequest(messages=QUESTION))

    assert caught.value.message.startswith("the model endpoint sent an unreadable response: ")
