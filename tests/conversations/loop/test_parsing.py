"""Reading tool calls from a model's text reply: the two prompt conventions (XML and JSON),
intent labels, and schema coercion — normal replies and the thirteen failure modes of
docs/wire-formats.md §9, each with the calls it must yield and the diagnostic it must leave."""

from __future__ import annotations

import json

from conversations.loop.parsing import (
    ParseResult,
    coerce_arguments,
    parse_json_reply,
    parse_label,
    parse_xml_calls,
)
from conversations.typealias import JSONDict, JSONValue

WEATHER: JSONDict = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "days": {"type": "integer"},
        "metric": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["city"],
}
WRITE_FILE: JSONDict = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
}
SCHEMAS: dict[str, JSONDict] = {
    "get_weather": WEATHER,
    "write_file": WRITE_FILE,
    "get_time": {"type": "object", "properties": {}},
}
NAMES = list(SCHEMAS)


def calls(result: ParseResult) -> list[tuple[str, JSONDict | None]]:
    return [(call.name, call.arguments) for call in result.calls]


def noted(diagnostics: list[str], *phrases: str) -> bool:
    """Whether one diagnostic mentions all ``phrases``."""
    return any(all(phrase.lower() in note.lower() for phrase in phrases) for note in diagnostics)


def xml_call(name: str, **params: str) -> str:
    body = "".join(f'<parameter name="{key}">{value}</parameter>\n' for key, value in params.items())
    return f'<function_calls>\n<invoke name="{name}">\n{body}</invoke>\n</function_calls>'


# --- XML convention: normal replies -----------------------------------------------------------


def test_xml_one_call_is_read_with_schema_typed_arguments() -> None:
    result = parse_xml_calls(xml_call("get_weather", city="Paris", days="3"), schemas=SCHEMAS)

    assert calls(result) == [("get_weather", {"city": "Paris", "days": 3})]
    assert result.text == ""
    assert result.diagnostics == []
    assert '<parameter name="city">Paris</parameter>' in result.calls[0].arguments_text


def test_xml_several_invokes_in_one_block_are_parallel_calls() -> None:
    reply = (
        "<function_calls>\n"
        '<invoke name="get_weather"><parameter name="city">Paris</parameter></invoke>\n'
        '<invoke name="get_weather"><parameter name="city">Rome</parameter></invoke>\n'
        "</function_calls>"
    )

    result = parse_xml_calls(reply, schemas=SCHEMAS)

    assert calls(result) == [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"})]
    assert result.diagnostics == []


def test_xml_call_without_parameters_has_empty_arguments() -> None:
    empty = parse_xml_calls(
        '<function_calls><invoke name="get_time"></invoke></function_calls>', schemas=SCHEMAS
    )
    closed = parse_xml_calls('<function_calls><invoke name="get_time"/></function_calls>', schemas=SCHEMAS)

    assert calls(empty) == calls(closed) == [("get_time", {})]
    assert empty.diagnostics == closed.diagnostics == []


def test_xml_prose_before_the_call_becomes_the_text() -> None:
    result = parse_xml_calls(
        "I'll check the weather.\n\n" + xml_call("get_weather", city="Oslo"), schemas=SCHEMAS
    )

    assert calls(result) == [("get_weather", {"city": "Oslo"})]
    assert result.text == "I'll check the weather."


def test_xml_plain_text_final_answer_has_no_calls_and_no_diagnostics() -> None:
    result = parse_xml_calls("  It is sunny in Paris, 18 °C.  ", schemas=SCHEMAS)

    assert result == ParseResult(calls=[], text="It is sunny in Paris, 18 °C.", diagnostics=[])


def test_xml_final_answer_keeps_its_own_code_fence() -> None:
    answer = "Run this:\n```python\nprint('hi')\n```"

    result = parse_xml_calls(answer, schemas=SCHEMAS)

    assert result.calls == [] and result.text == answer and result.diagnostics == []


def test_xml_attributes_in_any_order_and_single_quotes_are_accepted() -> None:
    reply = (
        "<function_calls><invoke call_id='1' name='get_weather'>"
        "<parameter type=\"string\" name='city'>Lima</parameter></invoke></function_calls>"
    )

    assert calls(parse_xml_calls(reply, schemas=SCHEMAS)) == [("get_weather", {"city": "Lima"})]


def test_xml_multi_line_value_keeps_its_indentation_but_not_the_tag_layout() -> None:
    content = "def f():\n    return 1\n"
    reply = xml_call("write_file", path="a.py", content=f"\n{content}")

    result = parse_xml_calls(reply, schemas=SCHEMAS)

    assert calls(result) == [("write_file", {"path": "a.py", "content": "def f():\n    return 1"})]


# --- XML convention: failure modes ---------------------------------------------------------------


def test_1_xml_code_fence_around_the_call_is_stripped_and_noted() -> None:
    reply = "Checking.\n```xml\n" + xml_call("get_weather", city="Paris") + "\n```"

    result = parse_xml_calls(reply, schemas=SCHEMAS)

    assert calls(result) == [("get_weather", {"city": "Paris"})]
    assert result.text == "Checking."
    assert noted(result.diagnostics, "code fence")


def test_1_xml_copy_code_artefact_from_a_chat_ui_is_stripped() -> None:
    reply = "xml\nCopy code\n" + xml_call("get_time")

    result = parse_xml_calls(reply, schemas=SCHEMAS)

    assert calls(result) == [("get_time", {})]
    assert result.text == ""
    assert noted(result.diagnostics, "code fence")


def test_2_xml_truncated_inside_a_value_keeps_complete_parameters_and_the_partial_value() -> None:
    reply = '<function_calls>\n<invoke name="get_weather">\n<parameter name="days">2</parameter>\n<parameter name="city">Par'

    result = parse_xml_calls(reply, schemas=SCHEMAS)

    assert calls(result) == [("get_weather", {"days": 2, "city": "Par"})]
    assert noted(result.diagnostics, "truncated", "</parameter>")


def test_2_xml_truncated_after_a_parameter_keeps_the_call() -> None:
    reply = '<function_calls><invoke name="get_weather"><parameter name="city">Paris</parameter>\n</inv'

    result = parse_xml_calls(reply, schemas=SCHEMAS)

    assert calls(result) == [("get_weather", {"city": "Paris"})]
    assert noted(result.diagnostics, "truncated")


def test_2_xml_missing_function_calls_close_is_truncation() -> None:
    reply = '<function_calls><invoke name="get_time"></invoke>'

    result = parse_xml_calls(reply, schemas=SCHEMAS)

    assert calls(result) == [("get_time", {})]
    assert noted(result.diagnostics, "truncated", "</function_calls>")


def test_2_xml_cut_inside_an_opening_tag_yields_no_call() -> None:
    result = parse_xml_calls('Let me see.\n<function_calls>\n<invoke name="get_wea', schemas=SCHEMAS)

    assert result.calls == []
    assert result.text == "Let me see."
    assert noted(result.diagnostics, "truncated")


def test_3_xml_invented_function_results_and_everything_after_are_cut() -> None:
    reply = (
        xml_call("get_weather", city="Paris")
        + "\n<function_results>Sunny, 18 °C</function_results>\n"
        + "It is sunny.\n"
        + xml_call("get_time")
    )

    result = parse_xml_calls(reply, schemas=SCHEMAS)

    assert calls(result) == [("get_weather", {"city": "Paris"})]
    assert result.text == ""
    assert noted(result.diagnostics, "invented result", "function_results")


def test_3_xml_invented_tool_use_result_is_cut_too() -> None:
    reply = xml_call("get_time") + "\n<tool_use_result><result>12:00</result></tool_use_result> Done."

    result = parse_xml_calls(reply, schemas=SCHEMAS)

    assert calls(result) == [("get_time", {})]
    assert noted(result.diagnostics, "invented result", "tool_use_result")


def test_4_xml_calls_inside_think_are_ignored_and_noted() -> None:
    reply = "<think>Maybe " + xml_call("get_time") + " first?</think>\nThe answer is 4."

    result = parse_xml_calls(reply, schemas=SCHEMAS)

    assert result.calls == []
    assert result.text == "The answer is 4."
    assert noted(result.diagnostics, "ignored 1 call", "<think>")


def test_4_xml_call_after_a_thinking_block_counts() -> None:
    reply = "<thinking>I need the weather.</thinking>\n" + xml_call("get_weather", city="Kyiv")

    result = parse_xml_calls(reply, schemas=SCHEMAS)

    assert calls(result) == [("get_weather", {"city": "Kyiv"})]
    assert noted(result.diagnostics, "<think>", "reasoning")


def test_4_xml_unclosed_think_swallows_the_rest_of_the_reply() -> None:
    result = parse_xml_calls("<think>let me call " + xml_call("get_time"), schemas=SCHEMAS)

    assert result.calls == [] and result.text == ""
    assert noted(result.diagnostics, "ignored 1 call", "<think>")


def test_6_xml_array_value_that_is_not_strict_json_is_repaired() -> None:
    result = parse_xml_calls(xml_call("get_weather", city="Nice", tags="['sun', 'wind',]"), schemas=SCHEMAS)

    assert calls(result) == [("get_weather", {"city": "Nice", "tags": ["sun", "wind"]})]
    assert noted(result.diagnostics, "get_weather.tags", "repaired")


def test_7_xml_text_values_are_typed_by_the_schema() -> None:
    reply = xml_call("get_weather", city="007", days="5", metric="true", tags='["a", "b"]')

    result = parse_xml_calls(reply, schemas=SCHEMAS)

    assert calls(result) == [("get_weather", {"city": "007", "days": 5, "metric": True, "tags": ["a", "b"]})]
    assert result.diagnostics == []


def test_7_xml_value_that_fits_no_schema_type_is_kept_as_text_and_noted() -> None:
    result = parse_xml_calls(xml_call("get_weather", city="Paris", days="three"), schemas=SCHEMAS)

    assert calls(result) == [("get_weather", {"city": "Paris", "days": "three"})]
    assert noted(result.diagnostics, "get_weather.days", "expected integer", "kept as text")


def test_7_xml_parameter_not_in_the_schema_is_kept_and_noted() -> None:
    result = parse_xml_calls(xml_call("get_weather", city="Paris", country="FR"), schemas=SCHEMAS)

    assert calls(result) == [("get_weather", {"city": "Paris", "country": "FR"})]
    assert noted(result.diagnostics, "get_weather.country", "not in the schema")


def test_8_xml_unknown_tool_is_kept_as_a_call_and_noted_with_the_offered_names() -> None:
    result = parse_xml_calls(xml_call("get_wether", city="Paris", days="2"), schemas=SCHEMAS)

    assert calls(result) == [("get_wether", {"city": "Paris", "days": "2"})]
    assert noted(
        result.diagnostics, "get_wether", "not among the offered tools", "get_weather, write_file, get_time"
    )
    assert noted(result.diagnostics, "did you mean 'get_weather'")


def test_9_xml_text_before_and_after_the_calls_is_kept() -> None:
    reply = "First the weather." + xml_call("get_weather", city="Bern") + "\nThen I will answer."

    result = parse_xml_calls(reply, schemas=SCHEMAS)

    assert calls(result) == [("get_weather", {"city": "Bern"})]
    assert result.text == "First the weather.\n\nThen I will answer."


def test_9_xml_invoke_without_function_calls_wrapper_is_read_and_noted() -> None:
    result = parse_xml_calls('Sure: <invoke name="get_time"></invoke>', schemas=SCHEMAS)

    assert calls(result) == [("get_time", {})]
    assert result.text == "Sure:"
    assert noted(result.diagnostics, "not inside <function_calls>")


def test_10_xml_closing_parameter_tag_inside_file_content_is_kept_in_the_value() -> None:
    content = "XML values end with </parameter>, as in <b>x</b></parameter>."
    reply = xml_call("write_file", content=content, path="doc.md")

    result = parse_xml_calls(reply, schemas=SCHEMAS)

    assert calls(result) == [("write_file", {"content": content, "path": "doc.md"})]
    assert noted(result.diagnostics, "write_file.content", "</parameter>", "last")


def test_10_xml_typed_value_ends_at_the_first_closing_tag() -> None:
    reply = '<function_calls><invoke name="get_weather"><parameter name="days">3</parameter></parameter></invoke></function_calls>'

    result = parse_xml_calls(reply, schemas=SCHEMAS)

    assert calls(result) == [("get_weather", {"days": 3})]
    assert noted(result.diagnostics, "stray text")


def test_11_xml_cdata_is_unwrapped_and_noted() -> None:
    content = "if a < b && c > d: </parameter> stays"
    result = parse_xml_calls(
        xml_call("write_file", path="x.py", content=f"<![CDATA[{content}]]>"), schemas=SCHEMAS
    )

    assert calls(result) == [("write_file", {"path": "x.py", "content": content})]
    assert noted(result.diagnostics, "write_file.content", "CDATA")


def test_11_xml_entities_are_decoded_and_noted() -> None:
    reply = xml_call(
        "write_file", path="a&amp;b.txt", content="&lt;p class=&quot;x&quot;&gt;it&apos;s&lt;/p&gt; &#169;"
    )

    result = parse_xml_calls(reply, schemas=SCHEMAS)

    assert calls(result) == [("write_file", {"path": "a&b.txt", "content": '<p class="x">it\'s</p> ©'})]
    assert noted(result.diagnostics, "write_file.content", "entities")


def test_12_xml_empty_or_blank_reply_has_no_calls() -> None:
    for reply in ("", "  \n\t", None):
        result = parse_xml_calls(reply, schemas=SCHEMAS)

        assert result == ParseResult(calls=[], text="", diagnostics=["empty reply"])


def test_13_xml_failed_generation_from_a_server_error_is_re_parsed_locally() -> None:
    error = {
        "error": {
            "code": "tool_use_failed",
            "message": "Failed to call a function. Please adjust your prompt.",
            "failed_generation": "```xml\n" + xml_call("get_weather", city="Paris", days="2") + "\n```",
        }
    }
    failed_generation = json.loads(json.dumps(error))["error"]["failed_generation"]

    result = parse_xml_calls(failed_generation, schemas=SCHEMAS)

    assert calls(result) == [("get_weather", {"city": "Paris", "days": 2})]
    assert noted(result.diagnostics, "code fence")


# --- JSON convention: normal replies --------------------------------------------------------------


def test_json_one_call_is_read_exactly() -> None:
    reply = '{"tool": "get_weather", "arguments": {"city": "Paris", "days": 3, "tags": ["a"]}}'

    result = parse_json_reply(reply, schemas=SCHEMAS)

    assert calls(result) == [("get_weather", {"city": "Paris", "days": 3, "tags": ["a"]})]
    assert result.text == "" and result.diagnostics == []
    assert json.loads(result.calls[0].arguments_text) == {"city": "Paris", "days": 3, "tags": ["a"]}


def test_json_list_of_calls_is_several_calls() -> None:
    reply = '[{"tool": "get_time", "arguments": {}}, {"tool": "get_weather", "arguments": {"city": "Rome"}}]'

    assert calls(parse_json_reply(reply, schemas=SCHEMAS)) == [
        ("get_time", {}),
        ("get_weather", {"city": "Rome"}),
    ]


def test_json_call_with_no_arguments_has_empty_arguments() -> None:
    result = parse_json_reply('{"tool": "get_time", "arguments": {}}', schemas=SCHEMAS)

    assert calls(result) == [("get_time", {})] and result.diagnostics == []


def test_json_call_missing_its_arguments_key_is_called_with_none_and_noted() -> None:
    result = parse_json_reply('{"tool": "get_time"}', schemas=SCHEMAS)

    assert calls(result) == [("get_time", {})]
    assert noted(result.diagnostics, "get_time", "no arguments")


def test_json_prose_before_the_call_becomes_the_text() -> None:
    reply = 'Let me look that up. {"tool": "get_weather", "arguments": {"city": "Oslo"}}'

    result = parse_json_reply(reply, schemas=SCHEMAS)

    assert calls(result) == [("get_weather", {"city": "Oslo"})]
    assert result.text == "Let me look that up."


def test_json_plain_text_final_answer_has_no_calls_and_no_diagnostics() -> None:
    result = parse_json_reply("Paris is sunny today (18 °C) — enjoy!", schemas=SCHEMAS)

    assert result == ParseResult(calls=[], text="Paris is sunny today (18 °C) — enjoy!", diagnostics=[])


def test_json_values_are_not_stringly_typed() -> None:
    reply = '{"tool": "get_weather", "arguments": {"city": "007", "days": 2}}'

    assert calls(parse_json_reply(reply, schemas=SCHEMAS)) == [("get_weather", {"city": "007", "days": 2})]


# --- JSON convention: failure modes -------------------------------------------------------------


def test_1_json_code_fence_around_the_call_is_stripped_and_noted() -> None:
    reply = '```json\n{"tool": "get_weather", "arguments": {"city": "Paris"}}\n```'

    result = parse_json_reply(reply, schemas=SCHEMAS)

    assert calls(result) == [("get_weather", {"city": "Paris"})]
    assert result.text == ""
    assert noted(result.diagnostics, "code fence")


def test_1_json_fence_after_prose_with_copy_code_artefact_is_stripped() -> None:
    reply = 'Here you go:\n```json\njson Copy code\n{"tool": "get_time", "arguments": {}}\n```'

    result = parse_json_reply(reply, schemas=SCHEMAS)

    assert calls(result) == [("get_time", {})]
    assert result.text == "Here you go:"
    assert noted(result.diagnostics, "code fence")


def test_2_json_truncated_call_is_repaired_and_noted() -> None:
    result = parse_json_reply('{"tool": "get_weather", "arguments": {"city": "Par', schemas=SCHEMAS)

    assert calls(result) == [("get_weather", {"city": "Par"})]
    assert noted(result.diagnostics, "truncated")


def test_3_json_invented_result_line_and_later_calls_are_cut() -> None:
    reply = (
        '{"tool": "get_time", "arguments": {}}\n'
        "Tool execution result: 12:00\n"
        '{"tool": "get_weather", "arguments": {"city": "Paris"}}'
    )

    result = parse_json_reply(reply, schemas=SCHEMAS)

    assert calls(result) == [("get_time", {})]
    assert result.text == ""
    assert noted(result.diagnostics, "invented result", "tool execution result")


def test_3_json_invented_result_tag_is_cut() -> None:
    reply = '{"tool": "get_time", "arguments": {}}\n<tool_use_result>12:00</tool_use_result>\nIt is noon.'

    result = parse_json_reply(reply, schemas=SCHEMAS)

    assert calls(result) == [("get_time", {})]
    assert result.text == ""
    assert noted(result.diagnostics, "invented result", "tool_use_result")


def test_4_json_calls_inside_think_are_ignored_and_noted() -> None:
    reply = '<think>I could send {"tool": "get_time", "arguments": {}}</think>\nIt is 4 o\'clock.'

    result = parse_json_reply(reply, schemas=SCHEMAS)

    assert result.calls == []
    assert result.text == "It is 4 o'clock."
    assert noted(result.diagnostics, "ignored 1 call", "<think>")


def test_4_json_call_after_a_think_block_counts() -> None:
    reply = '<think>Need the time.</think>{"tool": "get_time", "arguments": {}}'

    result = parse_json_reply(reply, schemas=SCHEMAS)

    assert calls(result) == [("get_time", {})]
    assert noted(result.diagnostics, "<think>")


def test_4_json_reasoning_before_a_lone_closing_think_tag_is_set_aside() -> None:
    # R1-style templates put the opening <think> in the prompt, so only the close appears.
    reply = 'Maybe {"tool": "get_time"} first.</think>\nNo tool needed: it is noon.'

    result = parse_json_reply(reply, schemas=SCHEMAS)

    assert result.calls == []
    assert result.text == "No tool needed: it is noon."
    assert noted(result.diagnostics, "ignored 1 call", "<think>")


def test_5_json_key_variants_are_accepted_and_noted() -> None:
    variants = [
        '{"name": "get_weather", "parameters": {"city": "Rome"}}',
        '{"tool_name": "get_weather", "args": {"city": "Rome"}}',
        '{"function": "get_weather", "tool_input": {"city": "Rome"}}',
        '{"tool": "get_weather", "input": {"city": "Rome"}}',
    ]
    for reply in variants:
        result = parse_json_reply(reply, schemas=SCHEMAS)

        assert calls(result) == [("get_weather", {"city": "Rome"})], reply
        assert noted(result.diagnostics, "get_weather", "read the call from the keys"), reply


def test_5_json_openai_function_nesting_with_string_arguments_is_decoded() -> None:
    reply = '{"type": "function", "function": {"name": "get_weather", "arguments": "{\\"city\\": \\"Rome\\", \\"days\\": 2}"}}'

    result = parse_json_reply(reply, schemas=SCHEMAS)

    assert calls(result) == [("get_weather", {"city": "Rome", "days": 2})]
    assert result.calls[0].arguments_text == '{"city": "Rome", "days": 2}'
    assert noted(result.diagnostics, "OpenAI-style")
    assert noted(result.diagnostics, "JSON-encoded string")


def test_5_json_tool_calls_wrapper_yields_every_call() -> None:
    reply = json.dumps(
        {
            "tool_calls": [
                {"function": {"name": "get_time", "arguments": "{}"}},
                {"name": "get_weather", "arguments": {"city": "Oslo"}},
            ]
        }
    )

    assert calls(parse_json_reply(reply, schemas=SCHEMAS)) == [
        ("get_time", {}),
        ("get_weather", {"city": "Oslo"}),
    ]


def test_5_json_arguments_that_are_not_an_object_are_none_and_noted() -> None:
    result = parse_json_reply('{"tool": "get_weather", "arguments": ["Paris"]}', schemas=SCHEMAS)

    assert calls(result) == [("get_weather", None)]
    assert result.calls[0].arguments_text == '["Paris"]'
    assert noted(result.diagnostics, "get_weather", "not an object")


def test_6_json_python_flavoured_json_is_repaired_and_noted() -> None:
    reply = "{'tool': 'get_weather', arguments: {'city': 'Paris\nFrance', 'metric': True, 'tags': None,},}"

    result = parse_json_reply(reply, schemas=SCHEMAS)

    assert calls(result) == [("get_weather", {"city": "Paris\nFrance", "metric": True, "tags": None})]
    assert noted(result.diagnostics, "repaired")


def test_7_json_clean_string_numbers_and_booleans_are_typed_by_the_schema_and_noted() -> None:
    reply = '{"tool": "get_weather", "arguments": {"city": "10", "days": "3", "metric": "false"}}'

    result = parse_json_reply(reply, schemas=SCHEMAS)

    assert calls(result) == [("get_weather", {"city": "10", "days": 3, "metric": False})]
    assert noted(result.diagnostics, "get_weather.days", "'3'", "integer 3")
    assert noted(result.diagnostics, "get_weather.metric", "boolean false")


def test_7_json_string_that_is_not_a_clean_literal_is_left_alone() -> None:
    reply = '{"tool": "get_weather", "arguments": {"days": "about 3"}}'

    assert calls(parse_json_reply(reply, schemas=SCHEMAS)) == [("get_weather", {"days": "about 3"})]


def test_8_json_unknown_tool_is_kept_as_a_call_and_noted_with_the_offered_names() -> None:
    result = parse_json_reply('{"tool": "search_web", "arguments": {"q": "x"}}', schemas=SCHEMAS)

    assert calls(result) == [("search_web", {"q": "x"})]
    assert noted(result.diagnostics, "search_web", "not among the offered tools", "get_weather")


def test_9_json_text_before_and_after_the_call_is_kept() -> None:
    reply = 'I will check. {"tool": "get_time", "arguments": {}} Then I answer.'

    result = parse_json_reply(reply, schemas=SCHEMAS)

    assert calls(result) == [("get_time", {})]
    assert result.text == "I will check.\n\nThen I answer."


def test_9_json_object_without_a_tool_key_is_the_answer_text_and_noted() -> None:
    result = parse_json_reply('{"city": "Paris", "temperature": 18}', schemas=SCHEMAS)

    assert result.calls == []
    assert result.text == '{"city": "Paris", "temperature": 18}'
    assert noted(result.diagnostics, "without a tool key", "answer text")


def test_9_json_a_data_object_with_a_name_key_is_not_mistaken_for_a_call() -> None:
    result = parse_json_reply('The city is {"name": "Paris", "population": 2100000}.', schemas=SCHEMAS)

    assert result.calls == []
    assert noted(result.diagnostics, "without a tool key")


def test_10_json_braces_and_quotes_inside_strings_do_not_end_the_object() -> None:
    content = 'function f() { return "}"; } // it\'s {'
    reply = (
        "Writing: "
        + json.dumps({"tool": "write_file", "arguments": {"path": "f.js", "content": content}})
        + " ok"
    )

    result = parse_json_reply(reply, schemas=SCHEMAS)

    assert calls(result) == [("write_file", {"path": "f.js", "content": content})]
    assert result.text == "Writing:\n\nok"


def test_12_json_empty_or_blank_reply_has_no_calls() -> None:
    for reply in ("", " \n ", None):
        result = parse_json_reply(reply, schemas=SCHEMAS)

        assert result == ParseResult(calls=[], text="", diagnostics=["empty reply"])


def test_12_json_forced_json_answer_is_the_answer_text() -> None:
    result = parse_json_reply('{"response": "It is sunny in Paris."}', schemas=SCHEMAS)

    assert result.calls == []
    assert result.text == '{"response": "It is sunny in Paris."}'
    assert noted(result.diagnostics, "answer text")


def test_13_json_failed_generation_from_a_server_error_is_re_parsed_locally() -> None:
    error = {
        "error": {
            "message": "Failed to call a function. Please adjust your prompt.",
            "type": "invalid_request_error",
            "code": "tool_use_failed",
            "failed_generation": '<function=get_weather>{"city": "Paris", "days": "2"}</function>',
        }
    }

    result = parse_json_reply(error["error"]["failed_generation"], schemas=SCHEMAS)

    assert calls(result) == [("get_weather", {"city": "Paris", "days": 2})]
    assert result.text == ""
    assert noted(result.diagnostics, "<function=NAME>")
    assert noted(result.diagnostics, "get_weather.days", "integer 2")


# --- coerce_arguments ----------------------------------------------------------------------


def coerce(value: str, schema: JSONValue) -> tuple[JSONValue, list[str]]:
    coerced, notes = coerce_arguments({"p": value}, {"type": "object", "properties": {"p": schema}})
    return coerced["p"], notes


def test_coerce_keeps_a_string_verbatim_even_if_it_looks_like_a_number() -> None:
    assert coerce("007", {"type": "string"}) == ("007", [])
    assert coerce(" padded ", {"type": "string"}) == (" padded ", [])


def test_coerce_reads_numbers_by_the_schema() -> None:
    assert coerce("1e3", {"type": "number"}) == (1000.0, [])
    assert coerce(" 42 ", {"type": "integer"}) == (42, [])
    assert coerce("-2.5", {"type": "number"}) == (-2.5, [])
    value, notes = coerce("3.0", {"type": "integer"})
    assert value == 3 and isinstance(value, int) and noted(notes, "p:", "integer 3")
    value, notes = coerce("007", {"type": "integer"})
    assert value == 7 and noted(notes, "'007'")


def test_coerce_rejects_non_finite_and_unparseable_numbers_as_text() -> None:
    for text in ("1e999", "NaN", "inf", "twelve"):
        value, notes = coerce(text, {"type": "number"})

        assert value == text and noted(notes, "expected number", "kept as text"), text


def test_coerce_reads_booleans_and_notes_non_canonical_spellings() -> None:
    assert coerce("true", {"type": "boolean"}) == (True, [])
    assert coerce("false", {"type": "boolean"}) == (False, [])
    for text, expected in (("True", True), ("YES", True), ("1", True), ("no", False), ("0", False)):
        value, notes = coerce(text, {"type": "boolean"})

        assert value is expected and noted(notes, f"read {text!r} as"), text


def test_coerce_reads_null_for_nullable_types_from_type_lists_and_any_of() -> None:
    assert coerce("null", {"type": ["integer", "null"]}) == (None, [])
    value, notes = coerce("", {"type": ["integer", "null"]})
    assert value is None and noted(notes, "empty value", "null")
    assert coerce("5", {"anyOf": [{"type": "integer"}, {"type": "null"}]}) == (5, [])
    assert coerce("null", {"oneOf": [{"type": "boolean"}, {"type": "null"}]}) == (None, [])
    assert coerce("", {"type": ["string", "null"]}) == ("", [])


def test_coerce_parses_arrays_and_objects_repairing_them_when_needed() -> None:
    assert coerce('["a", 1]', {"type": "array"}) == (["a", 1], [])
    assert coerce('{"x": [1, 2]}', {"type": "object"}) == ({"x": [1, 2]}, [])
    value, notes = coerce("{x: 1, 'y': True,}", {"type": "object"})
    assert value == {"x": 1, "y": True} and noted(notes, "repaired the JSON object")
    value, notes = coerce("```json\n[1, 2,]\n```", {"type": "array"})
    assert value == [1, 2] and noted(notes, "repaired")
    value, notes = coerce("a, b", {"type": "array"})
    assert value == "a, b" and noted(notes, "expected array")


def test_coerce_prefers_a_json_container_in_a_string_union() -> None:
    assert coerce('["a", "b"]', {"type": ["string", "array"]}) == (["a", "b"], [])
    assert coerce("a, b", {"type": ["string", "array"]}) == ("a, b", [])


def test_coerce_unquotes_a_quoted_non_string_value_and_notes_it() -> None:
    value, notes = coerce('"12"', {"type": "integer"})

    assert value == 12 and noted(notes, "removed the quotes")


def test_coerce_matches_enum_values_ignoring_case_and_notes_values_outside_the_enum() -> None:
    value, notes = coerce("celsius", {"type": "string", "enum": ["Celsius", "Fahrenheit"]})
    assert value == "Celsius" and noted(notes, "allowed value 'Celsius'")
    value, notes = coerce("kelvin", {"enum": ["Celsius", "Fahrenheit"]})
    assert value == "kelvin" and noted(notes, "not one of the allowed values")
    assert coerce("2", {"enum": [1, 2, 3]}) == (2, [])


def test_coerce_follows_local_refs() -> None:
    schema: JSONDict = {
        "type": "object",
        "properties": {
            "where": {"$ref": "#/$defs/Place"},
            "n": {"anyOf": [{"$ref": "#/$defs/N"}, {"type": "null"}]},
        },
        "$defs": {"Place": {"type": "object"}, "N": {"type": "integer"}},
    }

    assert coerce_arguments({"where": '{"lat": 1.5}', "n": "4"}, schema) == (
        {"where": {"lat": 1.5}, "n": 4},
        [],
    )


def test_coerce_keeps_untyped_and_unknown_parameters_as_text() -> None:
    schema: JSONDict = {"type": "object", "properties": {"free": {"description": "anything"}}}

    coerced, notes = coerce_arguments({"free": "[1]", "extra": "5"}, schema, tool="t")

    assert coerced == {"free": "[1]", "extra": "5"}
    assert notes == ["t.extra: not in the schema; kept as text"]


def test_coerce_reads_unknown_parameters_by_additional_properties() -> None:
    schema: JSONDict = {"type": "object", "additionalProperties": {"type": "integer"}}

    assert coerce_arguments({"anything": "5"}, schema) == ({"anything": 5}, [])


def test_coerce_never_raises_on_a_broken_schema() -> None:
    broken: list[JSONValue] = [
        {"type": 5},
        {"anyOf": "nope"},
        {"$ref": "#/missing"},
        {"$ref": "#/properties/p"},
        [],
        None,
    ]
    for schema in broken:
        value, _ = coerce("x", schema)

        assert value == "x", schema
    assert coerce_arguments({"p": "1"}, None) == ({"p": "1"}, ["p: not in the schema; kept as text"])  # type: ignore[arg-type]


# --- parse_label ----------------------------------------------------------------------------------


def test_label_exact_name_is_read_without_diagnostics() -> None:
    assert parse_label("get_weather", names=NAMES) == ("get_weather", [])
    assert parse_label("none", names=NAMES) == (None, [])


def test_label_quotes_backticks_punctuation_and_prefixes_are_tolerated_and_noted() -> None:
    for reply in ('"get_time"', "`get_time`.", "Tool: get_time", "**get_time**!", "tool_name = 'get_time'"):
        label, notes = parse_label(reply, names=NAMES)

        assert label == "get_time", reply
        assert noted(notes, "read 'get_time'"), reply


def test_label_case_differences_are_matched_and_noted() -> None:
    label, notes = parse_label("Get_Weather", names=NAMES)

    assert label == "get_weather"
    assert noted(notes, "ignoring case")


def test_label_name_inside_a_sentence_is_found_as_a_whole_word() -> None:
    label, notes = parse_label("I would use the get_time tool here.", names=NAMES)
    assert label == "get_time" and noted(notes, "found 'get_time'")

    label, _ = parse_label("use get_weather_forecast", names=["get_weather", "get_weather_forecast"])
    assert label == "get_weather_forecast"

    label, _ = parse_label("call demo.time now", names=["demo", "demo.time"])
    assert label == "demo.time"


def test_label_several_names_are_ambiguous_and_the_first_wins() -> None:
    label, notes = parse_label("Either write_file or get_time would do.", names=NAMES)

    assert label == "write_file"
    assert noted(notes, "ambiguous", "write_file, get_time")


def test_label_none_variants_mean_no_tool() -> None:
    for reply in ("None", "NONE.", "no tool", "N/A", "`none`", "No tool is needed for this."):
        label, _ = parse_label(reply, names=NAMES)

        assert label is None, reply
    assert noted(parse_label("N/A", names=NAMES)[1], "as none")


def test_label_unknown_reply_is_none_and_lists_the_offered_names() -> None:
    label, notes = parse_label("search_the_web", names=NAMES)

    assert label is None
    assert noted(
        notes, "'search_the_web'", "not among the offered tools", "get_weather, write_file, get_time"
    )


def test_label_empty_reply_is_none() -> None:
    assert parse_label("", names=NAMES) == (None, ["empty reply"])
    assert parse_label(None, names=NAMES) == (None, ["empty reply"])


def test_label_reasoning_in_think_is_set_aside() -> None:
    label, notes = parse_label("<think>get_weather? no, the time.</think>get_time", names=NAMES)

    assert label == "get_time"
    assert noted(notes, "<think>")


def test_label_fenced_reply_is_read() -> None:
    assert parse_label("```\nget_time\n```", names=NAMES)[0] == "get_time"
