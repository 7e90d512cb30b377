"""The demo model, called directly: decisions, argument filling, repair, misbehaviour, errors."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from openai.types.chat import ChatCompletion

from conversations.demo.model import DemoReply, complete, simulated_delay, stream_delay
from conversations.demo.scenarios import DRIP_MARKER_CAP_SECONDS, MARKERS
from conversations.loop.llm import ToolChoice, ToolDef
from conversations.loop.paradigms import intent, prompt_json, prompt_xml, structured

WEATHER = {
    "type": "function",
    "function": {
        "name": "demo__get_weather_forecast",
        "description": "Get the weather forecast for a city on a given day.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "day": {"type": "string", "description": "today, tomorrow or a weekday", "default": "today"},
            },
            "required": ["city"],
        },
    },
}
CALCULATOR = {
    "type": "function",
    "function": {
        "name": "demo__calculate",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string", "description": "e.g. 2 * (3 + 4)"}},
            "required": ["expression"],
        },
    },
}
CONVERTER = {
    "type": "function",
    "function": {
        "name": "demo__convert_units",
        "description": "Convert a value from one unit to another.",
        "parameters": {
            "type": "object",
            "properties": {
                "value": {"type": "number"},
                "from_unit": {"type": "string"},
                "to_unit": {"type": "string"},
            },
            "required": ["value", "from_unit", "to_unit"],
        },
    },
}
NOTES = {
    "type": "function",
    "function": {
        "name": "demo__save_note",
        "description": "Save a short note.",
        "parameters": {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
    },
}
ALL_TOOLS = [WEATHER, CALCULATOR, CONVERTER, NOTES]
BEIJING = "What will the weather be like in Beijing tomorrow?"


def ask(question: str, **extra: Any) -> dict[str, Any]:
    request: dict[str, Any] = {"model": "demo", "messages": [{"role": "user", "content": question}]}
    request.setdefault("tools", ALL_TOOLS)
    request.update(extra)
    return request


def reply_of(request: dict[str, Any]) -> dict[str, Any]:
    reply = complete(request)
    assert reply.status == 200, reply.body
    ChatCompletion.model_validate(reply.body)
    return reply.body


def message_of(body: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = body["choices"][0]["message"]
    return message


def calls_of(body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (call["function"]["name"], json.loads(call["function"]["arguments"]))
        for call in message_of(body)["tool_calls"]
    ]


def error_of(request: dict[str, Any], status: int = 400) -> dict[str, Any]:
    reply = complete(request)
    assert reply.status == status, reply.body
    assert set(reply.body["error"]) == {"message", "type", "param", "code"}
    error: dict[str, Any] = reply.body["error"]
    return error


def follow_up(request: dict[str, Any], body: dict[str, Any], *results: str) -> dict[str, Any]:
    """The request a host sends next: the assistant's calls replayed, then one result each."""
    assistant = message_of(body)
    replies = [
        {"role": "tool", "tool_call_id": call["id"], "content": result}
        for call, result in zip(assistant["tool_calls"], results, strict=True)
    ]
    replayed = {"role": "assistant", "content": None, "tool_calls": assistant["tool_calls"]}
    return {**request, "messages": [*request["messages"], replayed, *replies]}


# --- Deciding --------------------------------------------------------------------------------


def test_weather_question_calls_the_forecast_tool_with_city_and_day() -> None:
    body = reply_of(ask(BEIJING, tools=[WEATHER]))

    assert calls_of(body) == [("demo__get_weather_forecast", {"city": "Beijing", "day": "tomorrow"})]
    assert body["choices"][0]["finish_reason"] == "tool_calls"
    assert message_of(body)["content"] is None


def test_call_arguments_are_a_compact_json_string_and_ids_look_like_openai_ids() -> None:
    call = message_of(reply_of(ask(BEIJING)))["tool_calls"][0]

    assert call["type"] == "function"
    assert call["function"]["arguments"] == '{"city":"Beijing","day":"tomorrow"}'
    assert re.fullmatch(r"call_[A-Za-z0-9]{24}", call["id"])


def test_the_best_matching_tool_is_picked_among_several() -> None:
    assert calls_of(reply_of(ask(BEIJING)))[0][0] == "demo__get_weather_forecast"


def test_optional_day_is_left_out_when_the_question_names_none() -> None:
    assert calls_of(reply_of(ask("Weather in Paris?"))) == [("demo__get_weather_forecast", {"city": "Paris"})]


def test_a_required_day_falls_back_to_the_schema_default() -> None:
    tool = json.loads(json.dumps(WEATHER))
    tool["function"]["parameters"]["required"] = ["city", "day"]

    assert calls_of(reply_of(ask("Weather in Paris?", tools=[tool]))) == [
        ("demo__get_weather_forecast", {"city": "Paris", "day": "today"})
    ]


def test_weekdays_and_iso_dates_fill_the_day() -> None:
    assert calls_of(reply_of(ask("Will it rain in Oslo on Friday?")))[0][1] == {
        "city": "Oslo",
        "day": "friday",
    }
    assert calls_of(reply_of(ask("Forecast for Rome on 2026-05-01")))[0][1] == {
        "city": "Rome",
        "day": "2026-05-01",
    }


def test_calculator_gets_the_arithmetic_expression() -> None:
    assert calls_of(reply_of(ask("What is 12 * (3 + 4)?"))) == [
        ("demo__calculate", {"expression": "12 * (3 + 4)"})
    ]


def test_spelled_out_operators_become_an_expression() -> None:
    assert calls_of(reply_of(ask("What is 3 plus 4 times 2?")))[0][1] == {"expression": "3 + 4 * 2"}


def test_unit_conversion_fills_value_and_both_units() -> None:
    assert calls_of(reply_of(ask("Convert 10 km to miles"))) == [
        ("demo__convert_units", {"value": 10, "from_unit": "km", "to_unit": "miles"})
    ]


def test_unit_enums_get_the_matching_spelling() -> None:
    tool = json.loads(json.dumps(CONVERTER))
    properties = tool["function"]["parameters"]["properties"]
    properties["from_unit"]["enum"] = ["mi", "km"]
    properties["to_unit"]["enum"] = ["mi", "km"]

    assert calls_of(reply_of(ask("How far is 5 kilometers in miles?", tools=[tool])))[0][1] == {
        "value": 5,
        "from_unit": "km",
        "to_unit": "mi",
    }


def test_numbers_fill_numeric_properties_in_order_and_enums_follow_operator_words() -> None:
    tool = {
        "type": "function",
        "function": {
            "name": "arith",
            "description": "Do arithmetic on two numbers.",
            "parameters": {
                "type": "object",
                "properties": {
                    "a": {"type": "integer"},
                    "b": {"type": "number"},
                    "op": {"type": "string", "enum": ["add", "subtract", "multiply", "divide"]},
                },
                "required": ["a", "b", "op"],
            },
        },
    }

    assert calls_of(reply_of(ask("What is 6 times 7.5?", tools=[tool])))[0][1] == {
        "a": 6,
        "b": 7.5,
        "op": "multiply",
    }


def test_note_text_is_what_follows_the_keyword_or_a_quoted_phrase() -> None:
    assert calls_of(reply_of(ask("Remember that my locker code is 4512")))[0][1] == {
        "text": "my locker code is 4512"
    }
    assert calls_of(reply_of(ask('Please save a note "buy oat milk" for later')))[0][1] == {
        "text": "buy oat milk"
    }


def test_camel_case_tool_names_are_matched_word_by_word() -> None:
    tool = json.loads(json.dumps(WEATHER))
    tool["function"]["name"] = "getWeatherForecast"
    tool["function"]["description"] = ""

    assert calls_of(reply_of(ask(BEIJING, tools=[tool])))[0][0] == "getWeatherForecast"


def test_two_places_joined_by_and_give_two_parallel_calls() -> None:
    body = reply_of(ask("What's the weather in Beijing and Shanghai tomorrow?"))

    assert calls_of(body) == [
        ("demo__get_weather_forecast", {"city": "Beijing", "day": "tomorrow"}),
        ("demo__get_weather_forecast", {"city": "Shanghai", "day": "tomorrow"}),
    ]
    ids = [call["id"] for call in message_of(body)["tool_calls"]]
    assert len(set(ids)) == 2


def test_parallel_tool_calls_false_gives_one_call() -> None:
    body = reply_of(ask("What's the weather in Beijing and Shanghai tomorrow?", parallel_tool_calls=False))

    assert calls_of(body) == [("demo__get_weather_forecast", {"city": "Beijing", "day": "tomorrow"})]


# --- tool_choice -------------------------------------------------------------------------------


def test_without_tools_the_answer_is_plain_text() -> None:
    request = ask(BEIJING)
    del request["tools"]
    body = reply_of(request)
    message = message_of(body)

    assert message["content"].startswith("[demo model] ")
    assert "no tools were offered" in message["content"]
    assert "tool_calls" not in message
    assert body["choices"][0]["finish_reason"] == "stop"


def test_tool_choice_none_answers_in_text() -> None:
    message = message_of(reply_of(ask(BEIJING, tool_choice="none")))

    assert 'tool_choice is "none"' in message["content"]
    assert "tool_calls" not in message


def test_auto_with_no_matching_tool_says_no_tool_fits() -> None:
    body = reply_of(ask("Tell me a joke about penguins", tool_choice="auto"))

    assert "None of the offered tools" in message_of(body)["content"]
    assert body["choices"][0]["finish_reason"] == "stop"


def test_required_calls_the_best_tool_even_without_a_match() -> None:
    body = reply_of(ask("Tell me a joke about penguins", tool_choice="required"))

    assert [name for name, _ in calls_of(body)] == ["demo__get_weather_forecast"]
    assert body["choices"][0]["finish_reason"] == "tool_calls"


def test_a_named_tool_choice_calls_that_tool() -> None:
    choice = {"type": "function", "function": {"name": "demo__save_note"}}

    assert calls_of(reply_of(ask(BEIJING, tool_choice=choice)))[0][0] == "demo__save_note"


def test_allowed_tools_restricts_the_candidates() -> None:
    choice = {
        "type": "allowed_tools",
        "allowed_tools": {
            "mode": "required",
            "tools": [{"type": "function", "function": {"name": "demo__calculate"}}],
        },
    }

    assert calls_of(reply_of(ask(BEIJING, tool_choice=choice)))[0][0] == "demo__calculate"


# --- Tool results: final answer and repair --------------------------------------------------------


def test_final_answer_uses_the_summary_of_a_json_result() -> None:
    request = ask(BEIJING)
    first = reply_of(request)
    result = json.dumps({"city": "Beijing", "summary": "Sunny, 24 °C, light wind"})
    body = reply_of(follow_up(request, first, result))

    assert (
        message_of(body)["content"]
        == "[demo model] demo__get_weather_forecast reports: Sunny, 24 °C, light wind."
    )
    assert body["choices"][0]["finish_reason"] == "stop"


def test_final_answer_quotes_a_plain_text_result() -> None:
    request = ask("What is 12 * (3 + 4)?")
    body = reply_of(follow_up(request, reply_of(request), "84"))

    assert message_of(body)["content"] == '[demo model] demo__calculate returned: "84".'


def test_final_answer_trims_long_results() -> None:
    request = ask("What is 12 * (3 + 4)?")
    body = reply_of(follow_up(request, reply_of(request), "x" * 2000))

    assert len(message_of(body)["content"]) < 600
    assert message_of(body)["content"].endswith('…".')


def test_final_answer_covers_every_parallel_result() -> None:
    request = ask("What's the weather in Beijing and Shanghai?")
    body = reply_of(follow_up(request, reply_of(request), '{"summary": "Sunny"}', '{"summary": "Rainy"}'))

    assert message_of(body)["content"] == (
        "[demo model] demo__get_weather_forecast reports: Sunny. demo__get_weather_forecast reports: Rainy."
    )


def test_an_error_result_is_repaired_once_then_answered() -> None:
    request = ask(BEIJING)
    first = reply_of(request)
    error = "Error: invalid arguments for tool demo__get_weather_forecast: 'day' is a required property"
    second_request = follow_up(request, first, error)
    second = reply_of(second_request)

    assert calls_of(second) == [("demo__get_weather_forecast", {"city": "Beijing", "day": "tomorrow"})]
    assert message_of(second)["tool_calls"][0]["id"] != message_of(first)["tool_calls"][0]["id"]

    third = reply_of(follow_up(second_request, second, '{"summary": "Cloudy"}'))
    assert message_of(third)["content"] == "[demo model] demo__get_weather_forecast reports: Cloudy."


def test_a_second_error_is_reported_instead_of_retried_again() -> None:
    request = ask(BEIJING)
    second_request = follow_up(request, reply_of(request), "Error: city not found")
    third = reply_of(follow_up(second_request, reply_of(second_request), "Error: city not found"))

    assert message_of(third)["content"] == (
        '[demo model] The tool demo__get_weather_forecast failed: "Error: city not found".'
    )


def test_json_error_results_count_as_errors() -> None:
    request = ask(BEIJING)
    body = reply_of(follow_up(request, reply_of(request), '{"isError": true, "content": []}'))

    assert calls_of(body)[0][0] == "demo__get_weather_forecast"


def test_only_failed_parallel_calls_are_repaired() -> None:
    request = ask("What's the weather in Beijing and Shanghai?")
    body = reply_of(follow_up(request, reply_of(request), '{"summary": "Sunny"}', "Error: upstream timeout"))

    assert calls_of(body) == [("demo__get_weather_forecast", {"city": "Shanghai"})]


def test_results_are_answered_even_when_tools_are_no_longer_offered() -> None:
    request = ask("What is 12 * (3 + 4)?")
    follow = follow_up(request, reply_of(request), "84")
    del follow["tools"]

    assert message_of(reply_of(follow))["content"] == '[demo model] demo__calculate returned: "84".'


def test_content_parts_are_read_as_text() -> None:
    request = ask("")
    request["messages"] = [{"role": "user", "content": [{"type": "text", "text": BEIJING}]}]

    assert calls_of(reply_of(request))[0][1] == {"city": "Beijing", "day": "tomorrow"}


# --- Misbehaving on request ------------------------------------------------------------------


def test_malformed_json_marker_cuts_the_arguments_then_the_repair_is_valid() -> None:
    request = ask(f"[demo:malformed-json] {BEIJING}")
    first = reply_of(request)
    arguments = message_of(first)["tool_calls"][0]["function"]["arguments"]

    with pytest.raises(json.JSONDecodeError):
        json.loads(arguments)
    assert '{"city":"Beijing","day":"tomorrow"}'.startswith(arguments)

    second = reply_of(follow_up(request, first, "Error: could not parse the arguments as JSON"))
    assert calls_of(second) == [("demo__get_weather_forecast", {"city": "Beijing", "day": "tomorrow"})]


def test_unknown_tool_marker_misspells_the_name_then_the_repair_uses_the_real_tool() -> None:
    request = ask(f"{BEIJING} [demo:unknown-tool]")
    first = reply_of(request)
    name = message_of(first)["tool_calls"][0]["function"]["name"]

    assert name == "demo__get_wether_forecast"
    second = reply_of(follow_up(request, first, f"Error: unknown tool {name}"))
    assert calls_of(second) == [("demo__get_weather_forecast", {"city": "Beijing", "day": "tomorrow"})]


def test_missing_argument_marker_drops_a_required_argument_then_the_repair_restores_it() -> None:
    request = ask(f"[demo:missing-argument] {BEIJING}")
    first = reply_of(request)

    assert calls_of(first) == [("demo__get_weather_forecast", {"day": "tomorrow"})]
    second = reply_of(follow_up(request, first, "Error: invalid arguments: 'city' is a required property"))
    assert calls_of(second) == [("demo__get_weather_forecast", {"city": "Beijing", "day": "tomorrow"})]


def test_http_500_marker_fails_every_time_with_a_server_error() -> None:
    request = ask(f"[demo:http-500] {BEIJING}")

    for _ in range(2):
        error = error_of(request, status=500)
        assert error["type"] == "server_error"


def test_no_tool_marker_answers_in_text_although_a_tool_fits() -> None:
    body = reply_of(ask(f"[demo:no-tool] {BEIJING}", tool_choice="required"))

    assert "tool_calls" not in message_of(body)
    assert "demo__get_weather_forecast would fit" in message_of(body)["content"]


def test_markers_do_not_leak_into_arguments() -> None:
    body = reply_of(ask('[demo:slow=2] Remember "call mum"'))

    assert calls_of(body) == [("demo__save_note", {"text": "call mum"})]


def test_slow_marker_is_read_and_capped() -> None:
    assert simulated_delay(ask(f"[demo:slow=2.5] {BEIJING}")) == 2.5
    assert simulated_delay(ask(f"[demo:slow=999] {BEIJING}")) == 30.0
    assert simulated_delay(ask(BEIJING)) == 0.0
    assert simulated_delay({"messages": "nope"}) == 0.0


def test_every_marker_is_documented() -> None:
    assert {re.sub(r"=.*\]", "", marker).strip("[]") for marker in MARKERS} == {
        "demo:malformed-json",
        "demo:unknown-tool",
        "demo:missing-argument",
        "demo:code-fence",
        "demo:no-tool",
        "demo:no-native-tools",
        "demo:no-structured",
        "demo:http-500",
        "demo:slow",
        "demo:drip",
    }


def test_the_drip_marker_asks_for_a_pause_between_streamed_events_capped() -> None:
    def question(text: str) -> dict[str, Any]:
        return {"model": "demo", "messages": [{"role": "user", "content": text}]}

    assert stream_delay(question(f"[demo:drip=0.25] {BEIJING}")) == 0.25
    assert stream_delay(question(f"[demo:drip=99] {BEIJING}")) == DRIP_MARKER_CAP_SECONDS
    assert stream_delay(question(BEIJING)) == 0.0


def test_code_fence_marker_writes_a_native_call_as_fenced_text_instead_of_tool_calls() -> None:
    body = reply_of(ask(f"[demo:code-fence] {BEIJING}"))
    message = message_of(body)

    assert "tool_calls" not in message
    assert message["content"].startswith("```json\n")
    fenced = json.loads(message["content"].removeprefix("```json\n").removesuffix("\n```"))
    assert fenced == {
        "name": "demo__get_weather_forecast",
        "arguments": {"city": "Beijing", "day": "tomorrow"},
    }


def test_no_native_tools_marker_refuses_tools_with_ollamas_wording() -> None:
    error = error_of(ask(f"[demo:no-native-tools] {BEIJING}"))

    assert error["message"] == "registry.ollama.ai/library/demo does not support tools"
    assert error["type"] == "invalid_request_error"


def test_no_native_tools_marker_still_answers_a_request_without_tools() -> None:
    request = ask(f"[demo:no-native-tools] {BEIJING}")
    del request["tools"]

    assert message_of(reply_of(request))["content"].startswith("[demo model] ")


# --- Validation ----------------------------------------------------------------------------------


def test_missing_model_is_refused() -> None:
    request = ask(BEIJING)
    del request["model"]

    assert error_of(request)["message"] == "you must provide a model parameter"


def test_missing_messages_are_refused() -> None:
    error = error_of({"model": "demo"})

    assert error["param"] == "messages"
    assert error["code"] == "missing_required_parameter"


def test_empty_messages_are_refused() -> None:
    error = error_of({"model": "demo", "messages": []})

    assert error["code"] == "empty_array"
    assert "empty array" in error["message"]


def test_a_message_without_role_is_refused() -> None:
    error = error_of({"model": "demo", "messages": [{"content": "hi"}]})

    assert error["message"] == "Missing required parameter: 'messages[0].role'."
    assert error["param"] == "messages[0].role"


def test_tools_that_are_not_a_list_are_refused() -> None:
    error = error_of(ask(BEIJING, tools={"type": "function"}))

    assert error["param"] == "tools"
    assert error["code"] == "invalid_type"


def test_a_tool_without_a_function_name_is_refused() -> None:
    error = error_of(ask(BEIJING, tools=[{"type": "function", "function": {"description": "x"}}]))

    assert error["message"] == "Missing required parameter: 'tools[0].function.name'."


def test_a_tool_name_with_a_dot_is_refused_like_openai_does() -> None:
    tool = {"type": "function", "function": {"name": "demo.weather"}}
    error = error_of(ask(BEIJING, tools=[tool]))

    assert error["message"] == (
        "Invalid 'tools[0].function.name': string does not match pattern. "
        "Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'."
    )
    assert error["code"] == "invalid_value"


def test_more_than_128_tools_are_refused() -> None:
    tools = [{"type": "function", "function": {"name": f"t{index}"}} for index in range(129)]

    assert error_of(ask(BEIJING, tools=tools))["code"] == "array_above_max_length"


def test_tool_choice_naming_an_unknown_tool_is_refused() -> None:
    choice = {"type": "function", "function": {"name": "get_wether"}}
    error = error_of(ask(BEIJING, tool_choice=choice))

    assert "'get_wether' is not in 'tools'" in error["message"]
    assert error["param"] == "tool_choice.function.name"


def test_unanswered_tool_calls_are_refused_with_openais_wording() -> None:
    request = ask(BEIJING)
    first = reply_of(request)
    call_id = message_of(first)["tool_calls"][0]["id"]
    replayed = {"role": "assistant", "content": None, "tool_calls": message_of(first)["tool_calls"]}
    request["messages"] = [*request["messages"], replayed, {"role": "user", "content": "and?"}]
    error = error_of(request)

    assert error["message"] == (
        "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
        f"'tool_call_id'. The following tool_call_ids did not have response messages: {call_id}"
    )
    assert error["param"] == "messages.[1].role"


def test_a_tool_message_without_a_call_is_refused() -> None:
    request = ask(BEIJING)
    request["messages"].append({"role": "tool", "tool_call_id": "call_x", "content": "84"})

    assert "must be a response to a preceeding message with 'tool_calls'" in error_of(request)["message"]


def test_streaming_is_refused_clearly() -> None:
    assert error_of(ask(BEIJING, stream=True))["param"] == "stream"


# --- The body --------------------------------------------------------------------------------------


def test_the_body_has_the_chat_completion_shape() -> None:
    body = reply_of(ask(BEIJING, model="demo-7b"))

    assert body["object"] == "chat.completion"
    assert body["model"] == "demo-7b"
    assert body["system_fingerprint"] == "demo"
    assert re.fullmatch(r"chatcmpl-demo[0-9a-f]{24}", body["id"])
    assert isinstance(body["created"], int)
    message = message_of(body)
    assert message["role"] == "assistant"
    assert message["refusal"] is None
    assert body["choices"][0]["index"] == 0
    assert body["choices"][0]["logprobs"] is None
    usage = body["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0


def test_the_same_request_gives_the_same_body_apart_from_created() -> None:
    def without_created(reply: DemoReply) -> dict[str, Any]:
        return {key: value for key, value in reply.body.items() if key != "created"}

    request = ask("What's the weather in Beijing and Shanghai tomorrow?")

    assert without_created(complete(request)) == without_created(complete(json.loads(json.dumps(request))))


def test_a_different_request_gives_different_ids() -> None:
    first = reply_of(ask(BEIJING))
    second = reply_of(ask("Weather in Paris?"))

    assert first["id"] != second["id"]
    assert message_of(first)["tool_calls"][0]["id"] != message_of(second)["tool_calls"][0]["id"]


# --- Speaking the text paradigms' formats ------------------------------------------------------
#
# The requests are built with the paradigms' own prompt writers: the demo must read what they write.


def tool_defs(*tools: dict[str, Any]) -> list[ToolDef]:
    return [
        ToolDef(
            server_id=1,
            server_name="demo",
            name=tool["function"]["name"].removeprefix("demo__"),
            provider_name=tool["function"]["name"],
            description=tool["function"]["description"],
            input_schema=tool["function"]["parameters"],
        )
        for tool in tools
    ]


TOOLS = tool_defs(*ALL_TOOLS)


def text_request(system: str, *messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"model": "demo", "messages": [{"role": "system", "content": system}, *messages], **extra}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def content_of(request: dict[str, Any]) -> str:
    body = reply_of(request)
    assert "tool_calls" not in message_of(body)
    content: str = message_of(body)["content"]
    return content


XML_AUTO = prompt_xml.system_prompt(TOOLS, ToolChoice("auto"), history=False)
JSON_AUTO = prompt_json.system_prompt(TOOLS, ToolChoice("auto"), history=False)


def test_xml_prompt_gets_a_function_calls_block_with_one_parameter_per_argument() -> None:
    assert content_of(text_request(XML_AUTO, user(BEIJING))) == (
        "<function_calls>\n"
        '<invoke name="demo__get_weather_forecast">\n'
        '<parameter name="city">Beijing</parameter>\n'
        '<parameter name="day">tomorrow</parameter>\n'
        "</invoke>\n"
        "</function_calls>"
    )


def test_xml_prompt_with_two_places_gets_two_invokes() -> None:
    reply = content_of(text_request(XML_AUTO, user("What's the weather in Beijing and Shanghai?")))

    assert reply.count("<invoke ") == 2


def test_xml_results_are_answered_in_plain_text() -> None:
    call = content_of(text_request(XML_AUTO, user(BEIJING)))
    result = '<function_result call_id="call_1" name="demo__get_weather_forecast">\n{"summary": "Sunny"}\n</function_result>'

    answer = content_of(text_request(XML_AUTO, user(BEIJING), assistant(call), user(result)))

    assert answer == "[demo model] demo__get_weather_forecast reports: Sunny."


def test_an_xml_error_result_is_repaired_with_a_fresh_block() -> None:
    first = content_of(text_request(XML_AUTO, user(f"[demo:unknown-tool] {BEIJING}")))
    assert '<invoke name="demo__get_wether_forecast">' in first
    error = (
        '<function_result call_id="call_1" name="demo__get_wether_forecast" is_error="true">\n'
        "unknown tool\n</function_result>"
    )

    second = content_of(
        text_request(XML_AUTO, user(f"[demo:unknown-tool] {BEIJING}"), assistant(first), user(error))
    )

    assert '<invoke name="demo__get_weather_forecast">' in second


def test_xml_malformed_marker_leaves_the_block_unclosed_and_code_fence_wraps_it() -> None:
    cut = content_of(text_request(XML_AUTO, user(f"[demo:malformed-json] {BEIJING}")))
    fenced = content_of(text_request(XML_AUTO, user(f"[demo:code-fence] {BEIJING}")))

    assert cut.endswith('<parameter name="day">tomorrow</parameter>')
    assert "</function_calls>" not in cut
    assert fenced.startswith("```xml\n<function_calls>") and fenced.endswith("</function_calls>\n```")


def test_json_prompt_gets_the_tool_object_or_a_list_for_several_calls() -> None:
    one = json.loads(content_of(text_request(JSON_AUTO, user(BEIJING))))
    two = json.loads(content_of(text_request(JSON_AUTO, user("What's the weather in Beijing and Shanghai?"))))

    assert one == {"tool": "demo__get_weather_forecast", "arguments": {"city": "Beijing", "day": "tomorrow"}}
    assert [call["arguments"]["city"] for call in two] == ["Beijing", "Shanghai"]


def test_json_results_are_answered_and_errors_repaired() -> None:
    call = content_of(text_request(JSON_AUTO, user(BEIJING)))
    done = "Tool result for demo__get_weather_forecast (call id call_1):\n84"
    failed = "Tool error for demo__get_weather_forecast (call id call_1):\nError: city not found"

    assert content_of(text_request(JSON_AUTO, user(BEIJING), assistant(call), user(done))) == (
        '[demo model] demo__get_weather_forecast returned: "84".'
    )
    repaired = json.loads(content_of(text_request(JSON_AUTO, user(BEIJING), assistant(call), user(failed))))
    assert repaired["tool"] == "demo__get_weather_forecast"


def test_json_malformed_marker_drops_the_closing_brackets() -> None:
    cut = content_of(text_request(JSON_AUTO, user(f"[demo:malformed-json] {BEIJING}")))

    assert cut == '{"tool": "demo__get_weather_forecast", "arguments": {"city": "Beijing", "day": "tomorrow"'


def test_a_required_prompt_makes_the_demo_call_even_without_a_match() -> None:
    required = prompt_json.system_prompt(TOOLS, ToolChoice("required"), history=False)

    assert json.loads(content_of(text_request(required, user("Tell me a joke about penguins"))))["tool"]


def test_a_prompt_without_tools_is_answered_in_text() -> None:
    none = prompt_xml.system_prompt([], ToolChoice("none"), history=False)

    assert "no tools were offered" in content_of(text_request(none, user(BEIJING)))


def test_after_a_correction_the_demo_no_longer_misbehaves() -> None:
    required = prompt_json.system_prompt(TOOLS, ToolChoice("required"), history=False)
    question = user(f"[demo:no-tool] {BEIJING}")
    first = content_of(text_request(required, question))
    correction = user("Correction: a tool call is required. Reply with only the JSON object.")

    second = json.loads(content_of(text_request(required, question, assistant(first), correction)))

    assert first.startswith("[demo model] I answer without calling a tool")
    assert second == {
        "tool": "demo__get_weather_forecast",
        "arguments": {"city": "Beijing", "day": "tomorrow"},
    }


# Structured output: the tool_decision schema.


def structured_request(
    question: str, *messages: dict[str, Any], choice: ToolChoice | None = None, tools: list[ToolDef] = TOOLS
) -> dict[str, Any]:
    choice = choice or ToolChoice("auto")
    forced = choice.mode in {"required", "named"}
    schema = structured.decision_schema(tools, allow_answer=not forced)
    system = structured.system_prompt(tools, choice)
    return text_request(system, user(question), *messages, response_format=schema.response_format)


def test_structured_request_gets_a_call_decision_with_every_key_present() -> None:
    decision = json.loads(content_of(structured_request("What's the weather in Beijing?")))

    assert decision == {
        "decision": {
            "action": "call_tool",
            "tool": "demo__get_weather_forecast",
            # day is optional, so nullable in strict form: the demo writes null for "not given".
            "arguments": {"city": "Beijing", "day": None},
        }
    }


def test_structured_results_get_a_final_answer_decision() -> None:
    call = content_of(structured_request(BEIJING))
    result = user('Tool result for demo__get_weather_forecast (call id call_1):\n{"summary": "Sunny"}')

    decision = json.loads(content_of(structured_request(BEIJING, assistant(call), result)))

    assert decision == {
        "decision": {
            "action": "final_answer",
            "answer": "[demo model] demo__get_weather_forecast reports: Sunny.",
        }
    }


def test_structured_relaxed_arguments_come_as_a_json_string() -> None:
    [free] = tool_defs(
        {
            "function": {
                "name": "demo__save_note",
                "description": "Save a short note.",
                "parameters": {
                    "type": "object",
                    "properties": {"text": {"type": "string"}, "meta": {"type": "object"}},
                },
            }
        }
    )

    decision = json.loads(content_of(structured_request('Save a note "buy milk"', tools=[free])))["decision"]

    assert json.loads(decision["arguments_json"]) == {"text": "buy milk"}


def test_a_non_strict_schema_is_refused_with_openais_wording() -> None:
    request = structured_request(BEIJING)
    schema = request["response_format"]["json_schema"]["schema"]
    schema["properties"]["decision"]["anyOf"][0]["properties"]["arguments"]["additionalProperties"] = True

    error = error_of(request)

    assert error["message"] == (
        "Invalid schema for response_format 'tool_decision': In context=('properties', 'decision', 'anyOf', '0', "
        "'properties', 'arguments'), 'additionalProperties' is required to be supplied and to be false."
    )


def test_no_structured_marker_refuses_a_json_schema_response_format() -> None:
    error = error_of(structured_request(f"[demo:no-structured] {BEIJING}"))

    assert error["message"] == "The response_format parameter is unsupported at the moment. Leave it unset."
    assert error["param"] == "response_format"


# Intent: the label prompt, the fill prompt, the answer prompt.


def test_intent_label_prompt_gets_one_tool_name_then_none_once_results_are_in() -> None:
    classify = intent.classify_prompt(TOOLS, required=False, results=False)
    after = intent.classify_prompt(TOOLS, required=False, results=True)
    call = assistant('{"tool": "demo__get_weather_forecast", "arguments": {"city": "Beijing"}}')
    result = user("Tool result for demo__get_weather_forecast (call id call_1):\nSunny")

    assert content_of(text_request(classify, user(BEIJING))) == "demo__get_weather_forecast"
    assert content_of(text_request(classify, user("Tell me a joke about penguins"))) == "none"
    assert content_of(text_request(after, user(BEIJING), call, result)) == "none"


def test_intent_fill_prompt_gets_the_bare_arguments() -> None:
    [weather] = tool_defs(WEATHER)
    fill = intent.fill_prompt(weather)

    assert json.loads(content_of(text_request(fill, user(BEIJING)))) == {"city": "Beijing", "day": "tomorrow"}
    assert content_of(text_request(fill, user(f"[demo:code-fence] {BEIJING}"))).startswith("```json\n{")


def test_intent_answer_prompt_answers_from_the_results() -> None:
    answer = intent.answer_prompt(results=True)
    call = assistant('{"tool": "demo__calculate", "arguments": {"expression": "12 * 7"}}')
    result = user("Tool result for demo__calculate (call id call_1):\n84")

    assert content_of(text_request(answer, user("What is 12 * 7?"), call, result)) == (
        '[demo model] demo__calculate returned: "84".'
    )


# --- Description sensitivity (docs/evals.md) -------------------------------------------------


def _terse_weather(*, with_parameters: bool) -> dict[str, Any]:
    tool = json.loads(json.dumps(WEATHER))
    tool["function"]["description"] = "Weather."
    if not with_parameters:
        tool["function"]["parameters"] = {"type": "object", "properties": {}}
    return tool


def test_a_tool_whose_definition_does_not_say_it_takes_a_place_or_a_day_is_not_called() -> None:
    body = reply_of(ask(BEIJING, tools=[_terse_weather(with_parameters=False)]))

    assert "tool_calls" not in message_of(body)
    assert "does not say that it takes a place or a day" in message_of(body)["content"]


def test_the_parameters_of_a_tersely_described_tool_can_say_what_it_takes() -> None:
    body = reply_of(ask(BEIJING, tools=[_terse_weather(with_parameters=True)]))

    assert calls_of(body) == [("demo__get_weather_forecast", {"city": "Beijing", "day": "tomorrow"})]


def test_a_required_tool_choice_calls_the_tersely_described_tool_anyway() -> None:
    body = reply_of(ask(BEIJING, tools=[_terse_weather(with_parameters=False)], tool_choice="required"))

    assert [name for name, _ in calls_of(body)] == ["demo__get_weather_forecast"]


def test_intent_routing_sees_only_the_one_line_description_so_a_terse_one_routes_to_none() -> None:
    plain = ToolDef(
        1, "demo", "get_weather_forecast", "demo__get_weather_forecast", "Get a forecast for a city.", {}
    )
    terse = ToolDef(1, "demo", "get_weather_forecast", "demo__get_weather_forecast", "Weather.", {})

    def label(tool: ToolDef) -> str:
        prompt = intent.classify_prompt([tool], required=False, results=False)
        messages = [{"role": "system", "content": prompt}, {"role": "user", "content": BEIJING}]
        content: str = message_of(reply_of({"model": "demo", "messages": messages}))["content"]
        return content

    assert label(plain) == "demo__get_weather_forecast"
    assert label(terse) == "none"


def _catalogue_with(weather: dict[str, Any]) -> list[dict[str, Any]]:
    return [weather, CALCULATOR, CONVERTER, NOTES]


TERSE_CATALOGUE = tool_defs(*_catalogue_with(_terse_weather(with_parameters=True)))
UNEXPLAINED = "The tool demo__get_weather_forecast might fit, but its description does not say that it takes a place or a day"


def test_among_several_tools_a_description_that_does_not_say_what_the_tool_takes_loses_the_question() -> None:
    body = reply_of(ask(BEIJING, tools=_catalogue_with(_terse_weather(with_parameters=True))))

    # Its parameters (city, day) would say it, but a catalogue is routed by its descriptions.
    assert "tool_calls" not in message_of(body)
    assert UNEXPLAINED in message_of(body)["content"]


def test_among_several_tools_a_description_that_says_what_the_tool_takes_is_called() -> None:
    described = json.loads(json.dumps(WEATHER))
    described["function"]["description"] = "Weather for a city."

    body = reply_of(ask(BEIJING, tools=_catalogue_with(described)))

    assert calls_of(body) == [("demo__get_weather_forecast", {"city": "Beijing", "day": "tomorrow"})]


@pytest.mark.parametrize(
    "system",
    [
        prompt_xml.system_prompt(TERSE_CATALOGUE, ToolChoice("auto"), history=False),
        prompt_json.system_prompt(TERSE_CATALOGUE, ToolChoice("auto"), history=False),
    ],
    ids=["prompt_xml", "prompt_json"],
)
def test_the_text_paradigms_route_a_catalogue_by_its_descriptions_too(system: str) -> None:
    assert UNEXPLAINED in content_of(text_request(system, user(BEIJING)))


def test_the_structured_paradigm_routes_a_catalogue_by_its_descriptions_too() -> None:
    decision = json.loads(content_of(structured_request(BEIJING, tools=TERSE_CATALOGUE)))

    assert decision["decision"]["action"] == "final_answer"
    assert UNEXPLAINED in decision["decision"]["answer"]


def test_a_note_taking_tool_takes_free_text_whatever_day_the_question_names() -> None:
    body = reply_of(ask("Remember to call mum on Monday", tools=[NOTES]))

    assert [name for name, _ in calls_of(body)] == ["demo__save_note"]


# --- Follow-ups --------------------------------------------------------------------------------


def _second_question(first: str, answer: str, question: str) -> dict[str, Any]:
    """The request of a conversation's second turn: the first question and answer, then this one."""
    return ask(
        question,
        messages=[
            {"role": "user", "content": first},
            {"role": "assistant", "content": answer},
            {"role": "user", "content": question},
        ],
    )


@pytest.mark.parametrize(
    ("question", "arguments"),
    [
        ("And in Paris tomorrow?", {"city": "Paris", "day": "tomorrow"}),
        ("And in Paris?", {"city": "Paris", "day": "tomorrow"}),
        ("What about Friday?", {"city": "Beijing", "day": "friday"}),
    ],
)
def test_a_follow_up_that_names_no_tool_asks_the_previous_question_with_its_own_place_and_day(
    question: str, arguments: dict[str, Any]
) -> None:
    body = reply_of(_second_question(BEIJING, "Beijing tomorrow: sunny, 25 °C.", question))

    assert calls_of(body) == [("demo__get_weather_forecast", arguments)]


def test_a_follow_up_with_a_tool_of_its_own_or_nothing_to_carry_is_read_on_its_own() -> None:
    calculated = reply_of(_second_question(BEIJING, "Sunny.", "And what is 12 * 7?"))
    unrelated = reply_of(_second_question(BEIJING, "Sunny.", "Thanks, that is all."))

    assert calls_of(calculated) == [("demo__calculate", {"expression": "12 * 7"})]
    assert message_of(unrelated).get("tool_calls") is None
