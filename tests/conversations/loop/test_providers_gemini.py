"""The Gemini provider against recorded-shape replies (docs/wire-formats.md §5, §10, §11, §13)."""

from __future__ import annotations

import json

import httpx2
import pytest

from conversations.loop.llm import Message, ToolCall, ToolChoice, ToolDef
from conversations.loop.providers.base import ModelReply, ModelRequest, ProviderError
from conversations.loop.providers.gemini import GeminiProvider, gemini_schema
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

SIGNATURE = "CiQBcsjafE2bwnR7nFq0gqNXmrYl9ZOhN0i4yFJb0tZgxX7c2CQKZAFyyNp8"
CALL_PART: JSONDict = {
    "functionCall": {"name": "demo__get_weather_forecast", "args": {"city": "Beijing", "day": "tomorrow"}}
}


def response(parts: list[JSONValue], finish_reason: str = "STOP") -> JSONDict:
    return {
        "candidates": [
            {"content": {"role": "model", "parts": parts}, "finishReason": finish_reason, "index": 0}
        ],
        "usageMetadata": {"promptTokenCount": 97, "candidatesTokenCount": 23, "totalTokenCount": 120},
        "modelVersion": "gemini-2.5-flash",
        "responseId": "o3hMaJ6rAqXu7M8Pk5WwiQ0",
    }


ONE_CALL = response([CALL_PART])


def ask(body: JSONValue = None, request: ModelRequest | None = None) -> tuple[ModelReply, JSONDict]:
    provider, server = serve(GeminiProvider, answering(ONE_CALL if body is None else body))
    reply = provider.complete(request or ModelRequest(messages=QUESTION, tools=[WEATHER]))
    return reply, server.body()


# --- requests ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base_url", "model", "path"),
    [
        ("http://gemini.test", "gemini-2.5-flash", "/v1beta/models/gemini-2.5-flash:generateContent"),
        (
            "http://gemini.test/v1beta/",
            "models/gemini-2.5-flash",
            "/v1beta/models/gemini-2.5-flash:generateContent",
        ),
        ("http://127.0.0.1/demo-model", "demo", "/demo-model/v1beta/models/demo:generateContent"),
    ],
)
def test_the_request_goes_to_generate_content_of_the_model(base_url: str, model: str, path: str) -> None:
    provider, server = serve(GeminiProvider, answering(ONE_CALL), base_url=base_url, model=model)

    reply = provider.complete(ModelRequest(messages=QUESTION))

    assert server.received[0].url.path == path
    assert reply.exchange.label == f"POST {path}"
    assert reply.exchange.request_body.encode() == server.received[0].content


def test_the_key_goes_in_x_goog_api_key_never_in_the_url_and_is_never_recorded() -> None:
    provider, server = serve(GeminiProvider, answering(ONE_CALL))

    reply = provider.complete(ModelRequest(messages=QUESTION))

    assert server.received[0].headers["x-goog-api-key"] == API_KEY
    assert API_KEY not in str(server.received[0].url)
    assert reply.exchange.request_headers["x-goog-api-key"] == MASK
    assert_key_is_nowhere(reply.exchange)


def test_contents_system_instruction_and_function_declarations_are_sent_in_gemini_shape() -> None:
    request = ModelRequest(
        messages=[Message(role="system", content="Be brief."), *QUESTION], tools=[WEATHER, CLOCK]
    )

    _, body = ask(request=request)

    assert body == {
        "contents": [
            {"role": "user", "parts": [{"text": "What will the weather be like in Beijing tomorrow?"}]}
        ],
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "tools": [
            {
                "functionDeclarations": [
                    {
                        "name": "demo__get_weather_forecast",
                        "description": "Get the weather forecast for a city.",
                        "parameters": WEATHER.input_schema,
                    },
                    # Gemini refuses an OBJECT with no properties: a tool without arguments has none.
                    {"name": "demo__current_time", "description": "The current time."},
                ]
            }
        ],
        "toolConfig": {"functionCallingConfig": {"mode": "AUTO"}},
    }


@pytest.mark.parametrize(
    ("choice", "config"),
    [
        (ToolChoice("auto"), {"mode": "AUTO"}),
        (ToolChoice("required"), {"mode": "ANY"}),
        (
            ToolChoice("named", "demo__get_weather_forecast"),
            {"mode": "ANY", "allowedFunctionNames": ["demo__get_weather_forecast"]},
        ),
        (ToolChoice("none"), {"mode": "NONE"}),
    ],
    ids=["auto", "required", "named", "none"],
)
def test_tool_choice_is_sent_as_function_calling_config(choice: ToolChoice, config: JSONDict) -> None:
    request = ModelRequest(messages=QUESTION, tools=[WEATHER], tool_choice=choice, parallel_tool_calls=False)

    _, body = ask(request=request)

    assert body["toolConfig"] == {"functionCallingConfig": config}
    assert "parallel_tool_calls" not in json.dumps(body)


def test_schema_keywords_gemini_rejects_are_rewritten_or_dropped_with_notes() -> None:
    schema: JSONDict = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "city": {"type": "string", "minLength": 1},
            "days": {"type": ["integer", "null"], "exclusiveMinimum": 0},
            "unit": {"$ref": "#/$defs/unit"},
            "mode": {"oneOf": [{"const": "fast"}, {"const": "exact"}]},
        },
        "required": ["city"],
        "$defs": {"unit": {"type": "string", "enum": ["c", "f"]}},
    }

    converted, notes = gemini_schema(schema)

    assert converted == {
        "type": "object",
        "properties": {
            "city": {"type": "string", "minLength": 1},
            "days": {"type": "integer", "nullable": True},
            "unit": {"type": "string", "enum": ["c", "f"]},
            "mode": {"anyOf": [{"enum": ["fast"]}, {"enum": ["exact"]}]},
        },
        "required": ["city"],
    }
    assert "/$schema: dropped (not in Gemini's Schema subset)" in notes
    assert "/additionalProperties: dropped (not in Gemini's Schema subset)" in notes
    assert "/properties/days/exclusiveMinimum: dropped (not in Gemini's Schema subset)" in notes
    assert "/properties/unit: $ref #/$defs/unit inlined" in notes
    assert any("oneOf sent as anyOf" in note for note in notes)


def test_a_recursive_ref_becomes_an_open_object() -> None:
    schema: JSONDict = {
        "type": "object",
        "properties": {"tree": {"$ref": "#/$defs/node"}},
        "$defs": {"node": {"type": "object", "properties": {"child": {"$ref": "#/$defs/node"}}}},
    }

    converted, notes = gemini_schema(schema)

    assert converted["properties"] == {
        "tree": {"type": "object", "properties": {"child": {"type": "object"}}}
    }
    assert any("recursive $ref" in note for note in notes)


def test_the_sanitised_schema_is_what_is_sent() -> None:
    tool = ToolDef(
        1,
        "demo",
        "t",
        "demo__t",
        "",
        {"type": "object", "additionalProperties": False, "properties": {"q": {"type": "string"}}},
    )

    _, body = ask(request=ModelRequest(messages=QUESTION, tools=[tool]))

    assert body["tools"][0]["functionDeclarations"][0]["parameters"] == {
        "type": "object",
        "properties": {"q": {"type": "string"}},
    }


def _history(*, call_ids: tuple[str, str], is_error: bool = True) -> list[Message]:
    return [
        *QUESTION,
        Message(
            role="assistant",
            tool_calls=[
                ToolCall(call_ids[0], "demo__get_weather_forecast", '{"city":"Beijing","day":"tomorrow"}'),
                ToolCall(call_ids[1], "demo__current_time", "{}"),
            ],
        ),
        Message(
            role="tool", content="Sunny, 24°C", tool_call_id=call_ids[0], name="demo__get_weather_forecast"
        ),
        Message(
            role="tool",
            content="the clock is down",
            tool_call_id=call_ids[1],
            name="demo__current_time",
            is_error=is_error,
        ),
    ]


def test_results_are_one_user_turn_of_function_responses_with_output_or_error() -> None:
    history = _history(call_ids=("synth_0a1b2c3d4e5f6a7b_0", "synth_0a1b2c3d4e5f6a7b_1"))

    _, body = ask(request=ModelRequest(messages=history, tools=[WEATHER, CLOCK]))

    assert body["contents"][1:] == [
        {
            "role": "model",
            "parts": [
                {
                    "functionCall": {
                        "name": "demo__get_weather_forecast",
                        "args": {"city": "Beijing", "day": "tomorrow"},
                    }
                },
                {"functionCall": {"name": "demo__current_time", "args": {}}},
            ],
        },
        {
            "role": "user",
            "parts": [
                {
                    "functionResponse": {
                        "name": "demo__get_weather_forecast",
                        "response": {"output": "Sunny, 24°C"},
                    }
                },
                {
                    "functionResponse": {
                        "name": "demo__current_time",
                        "response": {"error": "the clock is down"},
                    }
                },
            ],
        },
    ]


def test_ids_the_model_gave_are_sent_back_on_calls_and_responses() -> None:
    _, body = ask(request=ModelRequest(messages=_history(call_ids=("fc-1", "fc-2")), tools=[WEATHER, CLOCK]))

    assert [part["functionCall"]["id"] for part in body["contents"][1]["parts"]] == ["fc-1", "fc-2"]
    assert [part["functionResponse"]["id"] for part in body["contents"][2]["parts"]] == ["fc-1", "fc-2"]


def test_parts_with_thought_signatures_are_echoed_back_unchanged() -> None:
    parts: list[JSONValue] = [{**CALL_PART, "thoughtSignature": SIGNATURE}]
    history = [
        *QUESTION,
        Message(
            role="assistant",
            tool_calls=[ToolCall("synth_x_0", "demo__get_weather_forecast", '{"city":"Beijing"}')],
            echo={"gemini": {"parts": parts}},
        ),
        Message(role="tool", content="Sunny", tool_call_id="synth_x_0", name="demo__get_weather_forecast"),
    ]

    _, body = ask(request=ModelRequest(messages=history, tools=[WEATHER]))

    assert body["contents"][1] == {"role": "model", "parts": parts}


def test_a_structured_output_request_sets_the_response_json_schema() -> None:
    schema: JSONDict = {
        "type": "object",
        "properties": {"answer": {"type": "string"}},
        "required": ["answer"],
        "additionalProperties": False,
    }
    request = ModelRequest(
        messages=QUESTION,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "reply", "schema": schema, "strict": True},
        },
    )

    _, body = ask(response([{"text": '{"answer": "sunny"}'}]), request)

    assert body["generationConfig"] == {"responseMimeType": "application/json", "responseJsonSchema": schema}


# --- replies -------------------------------------------------------------------------------


def test_a_function_call_is_found_although_the_finish_reason_is_stop() -> None:
    reply, _ = ask(ONE_CALL)

    [call] = reply.tool_calls
    assert (call.name, call.arguments_text) == (
        "demo__get_weather_forecast",
        '{"city":"Beijing","day":"tomorrow"}',
    )
    assert reply.finish_reason == "tool_calls"
    assert reply.text is None
    assert reply.usage == {"promptTokenCount": 97, "candidatesTokenCount": 23, "totalTokenCount": 120}


def test_calls_without_ids_get_distinct_synthesized_ids_and_given_ids_are_kept() -> None:
    body = response(
        [CALL_PART, CALL_PART, {"functionCall": {"name": "demo__current_time", "id": "fc-7", "args": {}}}]
    )

    reply, _ = ask(body)

    first, second, third = (call.id for call in reply.tool_calls)
    assert first.startswith("synth_") and second.startswith("synth_") and first != second
    assert third == "fc-7"
    assert reply.tool_calls[2].arguments_text == "{}"


def test_a_call_with_no_args_field_has_an_empty_object() -> None:
    reply, _ = ask(response([{"functionCall": {"name": "demo__current_time"}}]))

    assert reply.tool_calls[0].arguments_text == "{}"


def test_thought_signatures_keep_the_raw_parts_and_thoughts_are_not_answer_text() -> None:
    parts: list[JSONValue] = [
        {"text": "Weighing the tools.", "thought": True},
        {"text": "Let me check."},
        {**CALL_PART, "thoughtSignature": SIGNATURE},
    ]

    reply, _ = ask(response(parts))

    assert reply.text == "Let me check."
    assert reply.echo == {"gemini": {"parts": parts}}


def test_a_plain_reply_keeps_no_echo() -> None:
    reply, _ = ask(response([{"text": "Sunny tomorrow."}]))

    assert reply.text == "Sunny tomorrow."
    assert reply.finish_reason == "stop"
    assert reply.echo is None


@pytest.mark.parametrize(
    ("reason", "finish_reason"),
    [
        ("MAX_TOKENS", "length"),
        ("SAFETY", "content_filter"),
        ("MALFORMED_FUNCTION_CALL", "MALFORMED_FUNCTION_CALL"),
    ],
)
def test_finish_reasons_map_to_neutral_ones_or_stay_as_sent(reason: str, finish_reason: str) -> None:
    reply, _ = ask(response([{"text": ""}], reason))

    assert reply.finish_reason == finish_reason


def test_a_blocked_prompt_is_a_refusal() -> None:
    reply, _ = ask({"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 9}})

    assert reply.refusal == "the prompt was blocked (blockReason SAFETY)"
    assert reply.tool_calls == [] and reply.text is None


def test_a_reply_without_candidates_or_block_reason_is_unreadable() -> None:
    provider, _ = serve(GeminiProvider, answering({"usageMetadata": {}}))

    with pytest.raises(ProviderError) as caught:
        provider.complete(ModelRequest(messages=QUESTION))

    assert (
        caught.value.message
        == "the model endpoint sent an unreadable response: no candidates in the response"
    )


# --- streaming -----------------------------------------------------------------------------


def chunk(parts: list[JSONValue], finish_reason: str | None = None) -> JSONDict:
    candidate: JSONDict = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish_reason:
        candidate["finishReason"] = finish_reason
    data: JSONDict = {"candidates": [candidate], "modelVersion": "gemini-2.5-flash", "responseId": "r1"}
    if finish_reason:
        data["usageMetadata"] = {"promptTokenCount": 97, "candidatesTokenCount": 23, "totalTokenCount": 120}
    return data


def ask_streamed(raw: str) -> tuple[ModelReply, httpx2.Request]:
    provider, server = serve(GeminiProvider, streaming(raw), stream=True)
    reply = provider.complete(ModelRequest(messages=QUESTION, tools=[WEATHER]))
    return reply, server.received[0]


def test_a_streamed_reply_posts_to_stream_generate_content_with_alt_sse_and_assembles_the_chunks() -> None:
    raw = sse(
        [
            chunk([{"text": "Let me "}]),
            chunk([{"text": "check."}]),
            chunk([{**CALL_PART, "thoughtSignature": SIGNATURE}], "STOP"),
        ]
    )

    reply, sent = ask_streamed(raw)

    assert sent.url.path == "/v1beta/models/test-model:streamGenerateContent"
    assert sent.url.params["alt"] == "sse"
    assert reply.text == "Let me check."
    assert [(c.name, c.arguments_text) for c in reply.tool_calls] == [
        ("demo__get_weather_forecast", '{"city":"Beijing","day":"tomorrow"}')
    ]
    assert reply.finish_reason == "tool_calls"
    assert reply.usage["totalTokenCount"] == 120
    assert reply.echo == {
        "gemini": {"parts": [{"text": "Let me check."}, {**CALL_PART, "thoughtSignature": SIGNATURE}]}
    }
    assert reply.exchange.response_body == raw
    assert reply.exchange.label == "POST /v1beta/models/test-model:streamGenerateContent"


def test_streamed_and_whole_replies_agree() -> None:
    streamed, _ = ask_streamed(sse([chunk([CALL_PART]), chunk([], "STOP")]))
    whole, _ = ask(ONE_CALL)

    assert [(c.name, c.arguments_text) for c in streamed.tool_calls] == [
        (c.name, c.arguments_text) for c in whole.tool_calls
    ]
    assert streamed.finish_reason == whole.finish_reason


def test_a_stream_that_ends_without_a_finish_reason_is_unreadable() -> None:
    provider, _ = serve(GeminiProvider, streaming(sse([chunk([{"text": "Let me"}])])), stream=True)

    with pytest.raises(ProviderError) as caught:
        provider.complete(ModelRequest(messages=QUESTION))

    assert caught.value.message.endswith("the event stream ended before a finishReason")


# --- failures ------------------------------------------------------------------------------


def test_a_400_carries_geminis_message_verbatim() -> None:
    detail = (
        "Function call is missing a thought_signature in functionCall parts. This is required for tools "
        "to work correctly, and missing thought_signature may lead to degraded model performance."
    )
    error_body = {"error": {"code": 400, "message": detail, "status": "INVALID_ARGUMENT"}}
    provider, _ = serve(GeminiProvider, answering(error_body, status=400))

    with pytest.raises(ProviderError) as caught:
        provider.complete(ModelRequest(messages=QUESTION))

    assert caught.value.message == f"the model endpoint answered 400: {detail}"
    assert caught.value.status == 400
    assert caught.value.exchange is not None
    assert_key_is_nowhere(caught.value.exchange)


def test_a_timeout_raises_a_timed_out_error() -> None:
    def stall(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ReadTimeout("read timed out", request=request)

    provider, _ = serve(GeminiProvider, stall)

    with pytest.raises(ProviderError) as caught:
        provider.complete(ModelRequest(messages=QUESTION))

    assert caught.value.message.startswith("the model endpoint timed out: ")
    assert caught.value.exchange is not None and caught.value.exchange.status == "timeout"
