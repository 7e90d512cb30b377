"""The text paradigms with a scripted model: what they send, how they read the replies, when they ask again."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from jsonschema.validators import Draft202012Validator

from conversations.loop.llm import Message, ToolCall, ToolChoice, ToolDef
from conversations.loop.paradigms import PARADIGMS
from conversations.loop.paradigms.base import Decision, DecisionContext
from conversations.loop.paradigms.intent import IntentParadigm
from conversations.loop.paradigms.prompt_json import PromptJsonParadigm
from conversations.loop.paradigms.prompt_xml import PromptXmlParadigm
from conversations.loop.paradigms.prompting import call_ids
from conversations.loop.paradigms.structured import (
    StructuredParadigm,
    decision_schema,
    drop_nulls,
    strictify,
)
from conversations.loop.providers.base import ModelReply, ModelRequest
from conversations.loop.wire import WireExchange
from conversations.typealias import JSONDict, JSONValue

WEATHER = ToolDef(
    server_id=1,
    server_name="demo",
    name="get_weather_forecast",
    provider_name="demo__get_weather_forecast",
    description="Get a weather forecast for a city. The data is made up.",
    input_schema={
        "type": "object",
        "title": "get_weather_forecastArguments",
        "properties": {
            "city": {"type": "string", "description": "City name.", "minLength": 1},
            "day": {"type": "string", "description": "today or tomorrow.", "default": "today"},
        },
        "required": ["city"],
    },
)
CALCULATE = ToolDef(
    server_id=1,
    server_name="demo",
    name="calculate",
    provider_name="demo__calculate",
    description="Evaluate an arithmetic expression.",
    input_schema={
        "type": "object",
        "properties": {
            "expression": {"type": "string"},
            "precision": {"type": "integer", "description": "Digits after the point."},
        },
        "required": ["expression"],
    },
)
TOOLS = [WEATHER, CALCULATE]
QUESTION = "What will the weather be like in Beijing tomorrow?"


class FakeAsker:
    """Answers each ``ask`` with the next scripted reply and remembers everything it was told."""

    def __init__(self, *replies: str) -> None:
        self.replies = list(replies)
        self.asked: list[tuple[str, ModelRequest]] = []
        self.notes: list[tuple[str | None, list[str]]] = []
        self.fallbacks: list[str] = []

    def ask(self, request: ModelRequest, *, title: str) -> ModelReply:
        self.asked.append((title, request))
        text = self.replies.pop(0)
        exchange = WireExchange(
            channel="llm",
            label="POST /v1/chat/completions",
            started_at=datetime.now(UTC),
            request_body="{}",
            response_body=json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}]}),
            status="200",
        )
        return ModelReply(text=text, tool_calls=[], finish_reason="stop", exchange=exchange)

    def note(self, *, text: str | None = None, diagnostics: Sequence[str] = ()) -> None:
        self.notes.append((text, list(diagnostics)))

    def fallback(self, *, title: str, reason: str, capability: str | None = None) -> None:
        self.fallbacks.append(title)

    @property
    def titles(self) -> list[str]:
        return [title for title, _ in self.asked]

    def system(self, index: int = 0) -> str:
        return self.asked[index][1].messages[0].content or ""

    def messages(self, index: int = 0) -> list[tuple[str, str]]:
        return [(message.role, message.content or "") for message in self.asked[index][1].messages]


def decide(
    paradigm: Any,
    *replies: str,
    choice: ToolChoice | None = None,
    history: Sequence[Message] = (),
    tools: Sequence[ToolDef] = TOOLS,
) -> tuple[Decision, FakeAsker]:
    asker = FakeAsker(*replies)
    context = DecisionContext(
        messages=[*history, Message(role="user", content=QUESTION)],
        tools=list(tools),
        choice=choice or ToolChoice("auto"),
        asker=asker,
    )
    decision = paradigm.decide(context)
    assert not asker.replies, "every scripted reply was asked for"
    return decision, asker


def calls_of(decision: Decision) -> list[tuple[str, str, JSONValue]]:
    return [(call.id, call.name, call.arguments) for call in decision.calls]


XML_CALL = (
    "<function_calls>\n"
    '<invoke name="demo__get_weather_forecast">\n'
    '<parameter name="city">Beijing</parameter>\n'
    '<parameter name="day">tomorrow</parameter>\n'
    "</invoke>\n"
    "</function_calls>"
)
JSON_CALL = '{"tool": "demo__get_weather_forecast", "arguments": {"city": "Beijing", "day": "tomorrow"}}'

# History from an earlier native turn: a call, its result, the answer.
NATIVE_HISTORY = [
    Message(role="user", content="And in Paris?"),
    Message(
        role="assistant",
        content="Let me look.",
        tool_calls=[
            ToolCall("call_abc", "demo__get_weather_forecast", '{"city": "Paris"}', {"city": "Paris"})
        ],
    ),
    Message(role="tool", content="Rain", tool_call_id="call_abc", name="demo__get_weather_forecast"),
    Message(role="assistant", content="It will rain in Paris."),
]


def test_every_paradigm_is_registered_with_native_first() -> None:
    assert list(PARADIGMS) == ["native", "prompt_xml", "prompt_json", "structured", "intent", "auto"]
    assert not any(
        PARADIGMS[key].native_tools for key in ("prompt_xml", "prompt_json", "structured", "intent")
    )


# --- prompt_xml -------------------------------------------------------------------------------


def test_xml_system_prompt_is_the_tool_list_the_convention_and_the_rules() -> None:
    decision, asker = decide(PromptXmlParadigm(), "Sunny.", tools=[WEATHER])

    schema = json.dumps(
        {
            "name": "demo__get_weather_forecast",
            "description": WEATHER.description,
            "parameters": WEATHER.input_schema,
        }
    )
    assert (
        asker.system()
        == f"""You are a helpful assistant with access to these tools:

### demo__get_weather_forecast
Get a weather forecast for a city. The data is made up.
Parameters:
- city (string, required): City name.
- day (string, optional, default "today"): today or tomorrow.

The same tools as JSON, one per line (name, description, and the JSON Schema of the parameters):
<tools>
{schema}
</tools>

## How to call a tool

To call a tool, write this block:

<function_calls>
<invoke name="TOOL_NAME">
<parameter name="PARAMETER_NAME">value</parameter>
</invoke>
</function_calls>

- One <parameter> per argument, named as in the tool's parameters; give every required parameter.
- Write a string, number or boolean value as plain text, without quotes; write an array or object value as JSON.
- To call several tools at once, put one <invoke> per call inside the same <function_calls> block.
- Use only the tools listed above. Do not wrap the block in a code fence.

## Rules

- Stop right after </function_calls>. The host runs the calls and sends each result back in a user message as <function_result call_id="call_N" name="TOOL_NAME">…</function_result> (with is_error="true" when the call failed).
- Never write <function_result> yourself, and never invent a result.
- Do not put tool calls inside thinking or reasoning text: only your visible reply counts.
- When you have what you need, answer the user in plain text, without any <function_calls> block.

Call a tool when it helps to answer; otherwise answer directly in plain text."""
    )
    assert decision.text == "Sunny."


def test_text_paradigms_send_no_native_tools_and_no_tool_role() -> None:
    for paradigm in (PromptXmlParadigm(), PromptJsonParadigm()):
        _, asker = decide(paradigm, "Sunny.", history=NATIVE_HISTORY)
        [(_, request)] = asker.asked

        assert request.tools == []
        assert request.response_format is None
        assert {message.role for message in request.messages} <= {"system", "user", "assistant"}
        assert all(not message.tool_calls and message.format is None for message in request.messages)


def test_xml_reply_becomes_calls_with_synthesised_ids_and_the_raw_reply_is_kept_verbatim() -> None:
    decision, _ = decide(PromptXmlParadigm(), XML_CALL)

    assert calls_of(decision) == [
        ("call_1", "demo__get_weather_forecast", {"city": "Beijing", "day": "tomorrow"})
    ]
    assert decision.calls[0].arguments_text.startswith("\n<parameter")
    assert decision.assistant == Message(
        role="assistant", content=XML_CALL, tool_calls=decision.calls, format="prompt_xml"
    )


def test_several_invokes_are_parallel_calls_typed_by_the_schema() -> None:
    reply = (
        "<function_calls>\n"
        '<invoke name="demo__calculate"><parameter name="expression">2+2</parameter>'
        '<parameter name="precision">3</parameter></invoke>\n'
        '<invoke name="demo__get_weather_forecast"><parameter name="city">Oslo</parameter></invoke>\n'
        "</function_calls>"
    )
    decision, _ = decide(PromptXmlParadigm(), reply)

    assert calls_of(decision) == [
        ("call_1", "demo__calculate", {"expression": "2+2", "precision": 3}),
        ("call_2", "demo__get_weather_forecast", {"city": "Oslo"}),
    ]


def test_a_fenced_xml_call_is_read_and_the_fence_is_diagnosed() -> None:
    decision, asker = decide(PromptXmlParadigm(), f"```xml\n{XML_CALL}\n```")

    assert len(decision.calls) == 1
    assert "stripped a code fence around the call" in decision.diagnostics
    assert asker.notes[-1] == (None, decision.diagnostics)


def test_an_unknown_tool_is_kept_for_the_loop_to_reject_and_diagnosed() -> None:
    decision, _ = decide(PromptXmlParadigm(), XML_CALL.replace("weather", "wether"))

    assert decision.calls[0].name == "demo__get_wether_forecast"
    assert any("not among the offered tools" in note for note in decision.diagnostics)


def test_xml_history_replays_its_own_replies_verbatim_renders_native_calls_and_wraps_results() -> None:
    own = [
        Message(role="user", content="Weather in Rome?"),
        Message(
            role="assistant",
            content="Checking.\n" + XML_CALL,
            tool_calls=[ToolCall("call_3", "demo__get_weather_forecast", "", {"city": "Rome"})],
            format="prompt_xml",
        ),
        Message(
            role="tool",
            content="Error: boom",
            tool_call_id="call_3",
            name="demo__get_weather_forecast",
            is_error=True,
        ),
        Message(role="assistant", content="The tool failed.", format="prompt_xml"),
    ]
    decision, asker = decide(PromptXmlParadigm(), XML_CALL, history=[*NATIVE_HISTORY, *own])

    assert asker.messages()[1:] == [
        ("user", "And in Paris?"),
        (
            "assistant",
            "Let me look.\n\n<function_calls>\n"
            '<invoke name="demo__get_weather_forecast">\n<parameter name="city">Paris</parameter>\n</invoke>\n'
            "</function_calls>",
        ),
        (
            "user",
            '<function_result call_id="call_abc" name="demo__get_weather_forecast">\nRain\n</function_result>',
        ),
        ("assistant", "It will rain in Paris."),
        ("user", "Weather in Rome?"),
        ("assistant", "Checking.\n" + XML_CALL),
        (
            "user",
            '<function_result call_id="call_3" name="demo__get_weather_forecast" is_error="true">\n'
            "Error: boom\n</function_result>",
        ),
        ("assistant", "The tool failed."),
        ("user", QUESTION),
    ]
    # Two calls are already in the conversation: the next id counts on, skipping used ones.
    assert decision.calls[0].id == "call_4"
    assert "Earlier" not in asker.system()


def test_consecutive_results_become_one_user_message() -> None:
    calls = [
        ToolCall("call_1", "demo__calculate", "", {"expression": "1+1"}),
        ToolCall("call_2", "demo__calculate", "", {"expression": "2+2"}),
    ]
    history = [
        Message(role="user", content="Sums?"),
        Message(role="assistant", content=None, tool_calls=calls),
        Message(role="tool", content="2", tool_call_id="call_1", name="demo__calculate"),
        Message(role="tool", content="4", tool_call_id="call_2", name="demo__calculate"),
    ]
    _, asker = decide(PromptJsonParadigm(), "2 and 4.", history=history)

    assert asker.messages()[2:4] == [
        (
            "assistant",
            json.dumps(
                [
                    {"tool": "demo__calculate", "arguments": {"expression": "1+1"}},
                    {"tool": "demo__calculate", "arguments": {"expression": "2+2"}},
                ]
            ),
        ),
        (
            "user",
            "Tool result for demo__calculate (call id call_1):\n2\n\nTool result for demo__calculate (call id call_2):\n4",
        ),
    ]


def test_tool_choice_none_lists_no_tools_and_ignores_a_call_written_anyway() -> None:
    decision, asker = decide(PromptXmlParadigm(), XML_CALL, choice=ToolChoice("none"))

    assert (
        asker.system()
        == "You are a helpful assistant. No tools are available for this reply: answer the user directly in plain text."
    )
    assert decision.calls == []
    assert decision.text == XML_CALL
    assert any("tool_choice is 'none'" in note for note in decision.diagnostics)


def test_tool_choice_none_with_earlier_calls_explains_how_they_appear() -> None:
    _, asker = decide(PromptXmlParadigm(), "Rain.", choice=ToolChoice("none"), history=NATIVE_HISTORY)

    assert "Earlier tool calls appear in the conversation as <function_calls> blocks" in asker.system()


def test_a_named_tool_choice_lists_only_that_tool_and_makes_the_call_mandatory() -> None:
    _, asker = decide(PromptXmlParadigm(), XML_CALL, choice=ToolChoice("named", "demo__get_weather_forecast"))

    assert "### demo__get_weather_forecast" in asker.system()
    assert "demo__calculate" not in asker.system()
    assert asker.system().endswith(
        "A tool call is required: your next reply must be a <function_calls> block that calls demo__get_weather_forecast."
    )


def test_a_required_call_that_does_not_come_is_asked_for_once_more() -> None:
    decision, asker = decide(PromptXmlParadigm(), "It is sunny.", XML_CALL, choice=ToolChoice("required"))

    assert asker.titles == ["model call", "re-ask: a tool call is required"]
    first, second = asker.messages(0), asker.messages(1)
    assert second[: len(first)] == first
    assert second[len(first) :] == [
        ("assistant", "It is sunny."),
        (
            "user",
            "Correction: a tool call is required. Reply with a <function_calls> block that calls one of the tools, "
            "and nothing else.",
        ),
    ]
    assert asker.notes[0][1] == ["a tool call is required but the reply has none: asking once more"]
    assert len(decision.calls) == 1
    assert decision.assistant.content == XML_CALL


def test_a_second_miss_is_returned_as_the_answer_with_a_diagnostic() -> None:
    decision, asker = decide(PromptJsonParadigm(), "Sunny.", "Still sunny.", choice=ToolChoice("required"))

    assert len(asker.asked) == 2
    assert decision.calls == [] and decision.text == "Still sunny."
    assert (
        decision.diagnostics[-1]
        == "still a tool call is required but the reply has none after one re-ask: the reply is taken as it is"
    )


def test_auto_never_asks_again() -> None:
    decision, asker = decide(PromptXmlParadigm(), "Sunny.")

    assert asker.titles == ["model call"]
    assert decision.calls == [] and decision.text == "Sunny."


# --- prompt_json ------------------------------------------------------------------------------


def test_json_prompt_teaches_the_tool_object_and_the_result_wrapper() -> None:
    _, asker = decide(PromptJsonParadigm(), JSON_CALL)
    system = asker.system()

    assert '{"tool": "TOOL_NAME", "arguments": {"PARAMETER_NAME": value}}' in system
    assert "reply with a JSON array of such objects" in system
    assert 'starts with "Tool result for TOOL_NAME (call id call_N):"' in system
    assert (
        "### demo__calculate\nEvaluate an arithmetic expression.\nParameters:\n- expression (string, required)\n- precision (integer, optional): Digits after the point."
        in system
    )
    assert system.endswith("Call a tool when it helps to answer; otherwise answer directly in plain text.")


def test_json_reply_becomes_a_call_and_a_list_becomes_parallel_calls() -> None:
    one, _ = decide(PromptJsonParadigm(), JSON_CALL)
    both, _ = decide(PromptJsonParadigm(), f"[{JSON_CALL}, {JSON_CALL.replace('Beijing', 'Oslo')}]")

    assert calls_of(one) == [("call_1", "demo__get_weather_forecast", {"city": "Beijing", "day": "tomorrow"})]
    assert [call.arguments for call in both.calls] == [
        {"city": "Beijing", "day": "tomorrow"},
        {"city": "Oslo", "day": "tomorrow"},
    ]
    assert [call.id for call in both.calls] == ["call_1", "call_2"]


def test_truncated_json_is_repaired_and_diagnosed() -> None:
    decision, _ = decide(PromptJsonParadigm(), JSON_CALL[:-2])

    assert decision.calls[0].arguments == {"city": "Beijing", "day": "tomorrow"}
    assert any("truncated" in note for note in decision.diagnostics)


def test_json_history_renders_foreign_text_paradigm_calls_without_their_syntax() -> None:
    xml_turn = [
        Message(role="user", content="Weather in Rome?"),
        Message(
            role="assistant",
            content=XML_CALL,
            tool_calls=[ToolCall("call_1", "demo__get_weather_forecast", "", {"city": "Rome"})],
            format="prompt_xml",
        ),
        Message(role="tool", content="Sun", tool_call_id="call_1", name="demo__get_weather_forecast"),
    ]
    _, asker = decide(PromptJsonParadigm(), "ok", history=xml_turn)

    assert asker.messages()[2:4] == [
        ("assistant", '{"tool": "demo__get_weather_forecast", "arguments": {"city": "Rome"}}'),
        ("user", "Tool result for demo__get_weather_forecast (call id call_1):\nSun"),
    ]


def test_call_ids_count_on_and_skip_ids_in_use() -> None:
    history = [Message(role="assistant", tool_calls=[ToolCall("call_2", "x", "{}")])]

    ids = call_ids(history)

    assert [next(ids), next(ids)] == ["call_3", "call_4"]


# --- structured ---------------------------------------------------------------------------------

_STRICT_FORBIDDEN = {
    "allOf",
    "not",
    "if",
    "then",
    "else",
    "dependentRequired",
    "dependentSchemas",
    "default",
    "title",
    "oneOf",
}


def assert_strict(node: Any, where: str = "root") -> None:
    """The strict-mode rules of docs/wire-formats.md §2, checked on every schema node."""
    if isinstance(node, list):
        for index, item in enumerate(node):
            assert_strict(item, f"{where}[{index}]")
        return
    if not isinstance(node, dict):
        return
    assert not _STRICT_FORBIDDEN & set(node), f"{where} uses {_STRICT_FORBIDDEN & set(node)}"
    if "properties" in node or node.get("type") == "object":
        assert node.get("additionalProperties") is False, where
        assert sorted(node["required"]) == sorted(node.get("properties", {})), where
    for key in ("properties", "$defs"):
        for name, child in node.get(key, {}).items():
            assert_strict(child, f"{where}.{name}")
    for key in ("anyOf", "items"):
        if key in node:
            assert_strict(node[key], f"{where}.{key}")


def plain(value: JSONValue) -> Any:
    """A JSON value to dig into freely (tests index deep into schemas)."""
    return json.loads(json.dumps(value))


def response_schema(request: ModelRequest) -> Any:
    assert request.response_format is not None
    return plain(request.response_format)["json_schema"]["schema"]


def branches(schema: Any) -> list[str]:
    """Each branch as its action (and tool)."""
    decision = schema["properties"]["decision"]
    names = []
    for branch in decision["anyOf"]:
        properties = branch["properties"]
        names.append(
            properties["tool"]["enum"][0] if "tool" in properties else properties["action"]["enum"][0]
        )
    return names


STRUCTURED_CALL = json.dumps(
    {
        "decision": {
            "action": "call_tool",
            "tool": "demo__get_weather_forecast",
            "arguments": {"city": "Beijing", "day": None},
        }
    }
)


def test_structured_sends_a_strict_json_schema_response_format_and_no_tools() -> None:
    _, asker = decide(StructuredParadigm(), STRUCTURED_CALL)
    [(_, request)] = asker.asked

    assert request.tools == []
    assert request.response_format is not None
    assert request.response_format["type"] == "json_schema"
    spec = request.response_format["json_schema"]
    assert isinstance(spec, dict) and spec["name"] == "tool_decision" and spec["strict"] is True
    schema = response_schema(request)
    assert schema["type"] == "object" and schema["required"] == ["decision"]
    assert_strict(schema)
    Draft202012Validator.check_schema(schema)
    assert branches(schema) == ["demo__get_weather_forecast", "demo__calculate", "final_answer"]


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        (ToolChoice("auto"), ["demo__get_weather_forecast", "demo__calculate", "final_answer"]),
        (ToolChoice("required"), ["demo__get_weather_forecast", "demo__calculate"]),
        (ToolChoice("named", "demo__calculate"), ["demo__calculate"]),
        (ToolChoice("none"), ["final_answer"]),
    ],
    ids=["auto", "required", "named", "none"],
)
def test_tool_choice_decides_the_branches_of_the_union(choice: ToolChoice, expected: list[str]) -> None:
    reply = json.dumps(
        {
            "decision": {
                "action": "call_tool",
                "tool": "demo__calculate",
                "arguments": {"expression": "1", "precision": None},
            }
        }
    )
    if choice.mode == "none":
        reply = json.dumps({"decision": {"action": "final_answer", "answer": "Hi"}})
    _, asker = decide(StructuredParadigm(), reply, choice=choice)

    assert branches(response_schema(asker.asked[0][1])) == expected


def test_the_structured_system_message_explains_the_decision_shape() -> None:
    _, auto = decide(StructuredParadigm(), STRUCTURED_CALL)
    _, forced = decide(StructuredParadigm(), STRUCTURED_CALL, choice=ToolChoice("required"))

    assert auto.system().startswith(
        'Your reply is constrained by a JSON Schema (structured output) to one object {"decision": ...}.'
    )
    assert "One tool call per reply." in auto.system()
    assert '"action": "final_answer"' in auto.system()
    assert forced.system().endswith("A tool call is required for this reply: final_answer is not available.")


def test_a_call_decision_becomes_one_call_without_the_nulls_strict_mode_forced() -> None:
    decision, asker = decide(StructuredParadigm(), STRUCTURED_CALL)

    assert calls_of(decision) == [("call_1", "demo__get_weather_forecast", {"city": "Beijing"})]
    assert decision.calls[0].arguments_text == '{"city": "Beijing", "day": null}'
    assert "demo__get_weather_forecast: nulls for optional arguments left out (day)" in decision.diagnostics
    assert any(
        note.startswith("demo__get_weather_forecast in strict form: city: removed minLength")
        for note in decision.diagnostics
    )
    assert decision.assistant.format == "structured" and decision.assistant.content == STRUCTURED_CALL
    Draft202012Validator(WEATHER.input_schema).validate(decision.calls[0].arguments)


def test_a_final_answer_decision_is_kept_as_plain_text() -> None:
    reply = json.dumps({"decision": {"action": "final_answer", "answer": "Sunny in Beijing."}})
    decision, _ = decide(StructuredParadigm(), reply)

    assert decision.calls == [] and decision.text == "Sunny in Beijing."
    assert decision.assistant == Message(role="assistant", content="Sunny in Beijing.")


def test_broken_or_fenced_structured_json_is_repaired_and_diagnosed() -> None:
    cut, _ = decide(StructuredParadigm(), STRUCTURED_CALL[:-3])
    fenced, _ = decide(StructuredParadigm(), f"```json\n{STRUCTURED_CALL}\n```")

    assert cut.calls[0].arguments == {"city": "Beijing"}
    assert any("not valid JSON" in note and "read after repair" in note for note in cut.diagnostics)
    assert fenced.calls[0].arguments == {"city": "Beijing"}
    assert "stripped a code fence around the JSON" in fenced.diagnostics


def test_a_structured_reply_that_breaks_the_schema_is_diagnosed_but_still_read() -> None:
    reply = json.dumps(
        {"decision": {"action": "call_tool", "tool": "demo__get_wether_forecast", "arguments": {"city": "X"}}}
    )
    decision, _ = decide(StructuredParadigm(), reply)

    assert decision.calls[0].name == "demo__get_wether_forecast"
    assert any(
        note.startswith("the reply does not follow the response schema") for note in decision.diagnostics
    )
    assert (
        "the decision names 'demo__get_wether_forecast', which is not one of the offered tools"
        in decision.diagnostics
    )


def test_a_structured_answer_under_required_is_asked_for_once_more() -> None:
    answer = json.dumps({"decision": {"action": "final_answer", "answer": "Sunny."}})
    decision, asker = decide(StructuredParadigm(), answer, STRUCTURED_CALL, choice=ToolChoice("required"))

    assert asker.titles == ["model call", "re-ask: a tool call is required"]
    assert asker.asked[1][1].response_format == asker.asked[0][1].response_format
    assert len(decision.calls) == 1


def test_structured_history_wraps_results_like_the_json_paradigm() -> None:
    _, asker = decide(StructuredParadigm(), STRUCTURED_CALL, history=NATIVE_HISTORY)

    assert asker.messages()[2:4] == [
        (
            "assistant",
            'Let me look.\n\n{"decision": {"action": "call_tool", "tool": "demo__get_weather_forecast", "arguments": {"city": "Paris"}}}',
        ),
        ("user", "Tool result for demo__get_weather_forecast (call id call_abc):\nRain"),
    ]


# strictify, schema by schema.


def test_strictify_makes_optional_properties_nullable_and_moves_defaults_into_descriptions() -> None:
    strict, notes = strictify(WEATHER.input_schema)

    assert strict == {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "City name."},
            "day": {"type": ["string", "null"], "description": 'today or tomorrow. (default: "today")'},
        },
        "required": ["city", "day"],
        "additionalProperties": False,
    }
    assert notes == [
        "city: removed minLength",
        'day: default "today" moved into the description',
        "day: optional, so nullable (null = not given)",
    ]


def test_strictify_closes_nested_objects_and_arrays_of_objects() -> None:
    schema: JSONDict = {
        "type": "object",
        "properties": {
            "address": {
                "type": "object",
                "properties": {
                    "street": {"type": "string"},
                    "zip": {"type": "string", "pattern": "^[0-9]+$"},
                },
                "required": ["street"],
            },
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3, "uniqueItems": True},
            "stops": {
                "type": "array",
                "items": {"type": "object", "properties": {"at": {"type": "integer", "minimum": 0}}},
            },
        },
        "required": ["address", "tags", "stops"],
    }

    strict, notes = strictify(schema)

    assert_strict(strict)
    properties = strict["properties"]
    assert isinstance(properties, dict)
    assert properties["address"] == {
        "type": "object",
        "properties": {
            "street": {"type": "string"},
            "zip": {"type": ["string", "null"], "pattern": "^[0-9]+$"},
        },
        "required": ["street", "zip"],
        "additionalProperties": False,
    }
    assert properties["tags"] == {"type": "array", "items": {"type": "string"}, "maxItems": 3}
    assert properties["stops"] == {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {"at": {"type": ["integer", "null"], "minimum": 0}},
            "required": ["at"],
            "additionalProperties": False,
        },
    }
    assert "tags: removed uniqueItems" in notes


def test_strictify_adds_null_to_an_optional_enum_and_types_a_bare_enum_or_const() -> None:
    schema: JSONDict = {
        "type": "object",
        "properties": {"unit": {"enum": ["c", "f"]}, "mode": {"const": "fast"}},
        "required": ["mode"],
    }

    strict, _ = strictify(schema)

    assert strict["properties"] == {
        "unit": {"enum": ["c", "f", None], "type": ["string", "null"]},
        "mode": {"enum": ["fast"], "type": "string"},
    }


def test_strictify_rewrites_unions_and_removes_what_strict_mode_rejects() -> None:
    schema: JSONDict = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "allOf": [{"properties": {"a": {"type": "string"}}, "required": ["a"]}],
        "properties": {
            "b": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
            "c": {"type": "string", "not": {"enum": ["x"]}, "if": {"minLength": 2}, "then": {"pattern": "y"}},
        },
        "required": ["b", "c"],
        "dependentRequired": {"b": ["c"]},
    }

    strict, notes = strictify(schema)

    assert_strict(strict)
    assert strict["properties"] == {
        "b": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
        "c": {"type": "string"},
        "a": {"type": "string"},
    }
    assert notes == [
        "the arguments: allOf merged into one schema",
        "the arguments: removed dependentRequired",
        "b: oneOf became anyOf",
        "c: removed if, not, then",
    ]


def test_strictify_keeps_local_definitions_and_references() -> None:
    schema: JSONDict = {
        "type": "object",
        "$defs": {"Item": {"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"]}},
        "properties": {
            "items": {"type": "array", "items": {"$ref": "#/$defs/Item", "description": "dropped"}}
        },
        "required": ["items"],
    }

    strict, _ = strictify(schema)

    assert strict["$defs"] == {
        "Item": {
            "type": "object",
            "properties": {"sku": {"type": "string"}},
            "required": ["sku"],
            "additionalProperties": False,
        }
    }
    assert strict["properties"] == {"items": {"type": "array", "items": {"$ref": "#/$defs/Item"}}}


@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        ({"type": "object"}, "the arguments is a free-form object"),
        (
            {"type": "object", "properties": {"meta": {"type": "object", "additionalProperties": True}}},
            "meta is a free-form object",
        ),
        ({"type": "object", "properties": {"value": {}}}, "value accepts a value of any type"),
        ({"type": "object", "properties": {"list": {"type": "array"}}}, "list is an array of any values"),
        (
            {"type": "object", "properties": {}, "patternProperties": {"^x": {"type": "string"}}},
            "the arguments uses 'patternProperties'",
        ),
    ],
    ids=["bare-object", "open-object", "any-value", "untyped-array", "pattern-properties"],
)
def test_what_strict_mode_cannot_describe_travels_as_a_json_encoded_string(
    schema: JSONDict, reason: str
) -> None:
    strict, notes = strictify(schema)

    assert strict["type"] == "string"
    assert str(strict["description"]).endswith(json.dumps(schema))
    assert notes == [
        f"{reason} (keys not listed in advance), which strict mode cannot describe: the arguments travel as one "
        "JSON-encoded string ('arguments_json'), parsed after the reply"
        if "free-form" in reason
        else f"{reason}, which strict mode cannot describe: the arguments travel as one JSON-encoded string "
        "('arguments_json'), parsed after the reply"
    ]


def test_an_empty_property_list_is_a_tool_without_arguments_not_a_free_form_object() -> None:
    assert strictify({"type": "object", "properties": {}}) == (
        {"type": "object", "properties": {}, "required": [], "additionalProperties": False},
        [],
    )


def test_a_relaxed_tool_gets_an_arguments_json_branch_whose_string_is_decoded() -> None:
    notes_tool = ToolDef(
        1,
        "demo",
        "save",
        "demo__save",
        "Save.",
        {"type": "object", "properties": {"meta": {"type": "object"}}},
    )
    reply = json.dumps(
        {"decision": {"action": "call_tool", "tool": "demo__save", "arguments_json": '{"meta": {"k": 1}}'}}
    )

    decision, asker = decide(StructuredParadigm(), reply, tools=[notes_tool])

    schema = response_schema(asker.asked[0][1])
    assert_strict(schema)
    branch = schema["properties"]["decision"]["anyOf"][0]
    assert branch["properties"]["arguments_json"]["type"] == "string"
    assert decision.calls[0].arguments == {"meta": {"k": 1}}
    assert decision.calls[0].arguments_text == '{"meta": {"k": 1}}'
    assert any("'arguments_json'" in note for note in decision.diagnostics)


def test_definitions_of_each_tool_are_hoisted_to_the_root_under_their_own_names() -> None:
    def with_item(name: str) -> ToolDef:
        schema: JSONDict = {
            "type": "object",
            "$defs": {
                "Item": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
            },
            "properties": {"item": {"$ref": "#/$defs/Item"}},
            "required": ["item"],
        }
        return ToolDef(1, "demo", name, f"demo__{name}", "", schema)

    schema = plain(decision_schema([with_item("a"), with_item("b")], allow_answer=True).response_format)[
        "json_schema"
    ]["schema"]

    assert set(schema["$defs"]) == {"demo__a__Item", "demo__b__Item"}
    first = schema["properties"]["decision"]["anyOf"][0]["properties"]["arguments"]
    assert first["properties"]["item"] == {"$ref": "#/$defs/demo__a__Item"}
    assert_strict(schema)
    Draft202012Validator(schema).validate(
        {"decision": {"action": "call_tool", "tool": "demo__b", "arguments": {"item": {"n": 1}}}}
    )


def test_drop_nulls_leaves_out_only_nulls_the_original_schema_does_not_accept() -> None:
    schema: JSONDict = {
        "type": "object",
        "properties": {
            "a": {"type": "string"},
            "b": {"type": ["string", "null"]},
            "c": {"type": "object", "properties": {"d": {"type": "integer"}}},
            "e": {"type": "string"},
        },
        "required": ["e"],
    }

    cleaned = drop_nulls({"a": None, "b": None, "c": {"d": None}, "e": None}, schema)

    assert cleaned == {"b": None, "c": {}, "e": None}


# --- intent -----------------------------------------------------------------------------------


def test_intent_classifies_with_names_only_then_fills_with_one_schema() -> None:
    decision, asker = decide(
        IntentParadigm(), "demo__get_weather_forecast", '{"city": "Beijing", "day": "tomorrow"}'
    )

    assert asker.titles == ["intent: classify", "intent: fill arguments for demo__get_weather_forecast"]
    assert asker.system(0) == (
        "You route a user's request to one tool. The tools:\n"
        "- demo__get_weather_forecast: Get a weather forecast for a city.\n"
        "- demo__calculate: Evaluate an arithmetic expression.\n"
        "\n"
        "Reply with exactly one tool name from the list, or none if no tool is needed.\n"
        "Reply with the name only, with no other words."
    )
    fill = asker.system(1)
    assert fill.startswith("You fill in the arguments for the tool demo__get_weather_forecast")
    assert json.dumps(WEATHER.input_schema) in fill and "demo__calculate" not in fill
    assert fill.endswith(
        'Reply with only the arguments, as one JSON object such as {"city": …, "day": …}: no tool name, no other text, '
        "no code fence. Take the values from the conversation."
    )
    # The classify step shows the label the paradigm read, not only the raw reply.
    assert ("demo__get_weather_forecast", []) in asker.notes
    assert calls_of(decision) == [
        ("call_1", "demo__get_weather_forecast", {"city": "Beijing", "day": "tomorrow"})
    ]
    assert decision.assistant.format == "intent"


def test_intent_none_means_a_plain_text_answer_call() -> None:
    decision, asker = decide(IntentParadigm(), "none", "Hello!")

    assert asker.titles == ["intent: classify", "intent: answer"]
    assert (
        asker.system(1)
        == "You are a helpful assistant. Answer the user's request in plain text; do not call tools."
    )
    assert decision.calls == [] and decision.text == "Hello!"
    assert decision.diagnostics == ["the classification is none: answering in text"]


def test_after_results_the_classify_prompt_shows_them_so_none_means_answer_now() -> None:
    _, asker = decide(IntentParadigm(), "none", "It will rain.", history=NATIVE_HISTORY)

    assert (
        "The conversation already holds tool results: if they answer the request, reply none"
        in asker.system(0)
    )
    assert ("user", "Tool result for demo__get_weather_forecast (call id call_abc):\nRain") in asker.messages(
        0
    )
    assert "Tool calls made so far appear as JSON objects" in asker.system(1)


def test_a_named_choice_skips_the_classification() -> None:
    decision, asker = decide(
        IntentParadigm(), '{"city": "Beijing"}', choice=ToolChoice("named", "demo__get_weather_forecast")
    )

    assert asker.titles == ["intent: fill arguments for demo__get_weather_forecast"]
    assert decision.diagnostics == ["classification skipped: tool_choice names the tool"]


def test_tool_choice_none_goes_straight_to_the_answer() -> None:
    decision, asker = decide(IntentParadigm(), "No tools needed.", choice=ToolChoice("none"))

    assert asker.titles == ["intent: answer"]
    assert decision.text == "No tools needed."


def test_required_forbids_none_in_the_label_prompt_and_asks_once_more() -> None:
    decision, asker = decide(
        IntentParadigm(), "none", "demo__calculate", '{"expression": "1+1"}', choice=ToolChoice("required")
    )

    assert "(none is not allowed)" in asker.system(0)
    assert asker.titles == [
        "intent: classify",
        "re-ask: a tool call is required",
        "intent: fill arguments for demo__calculate",
    ]
    assert asker.messages(1)[-1][1].startswith("Correction: a tool call is required, so none is not allowed.")
    assert decision.calls[0].name == "demo__calculate"


def test_a_label_that_names_no_tool_is_asked_for_again() -> None:
    decision, asker = decide(
        IntentParadigm(), "demo__get_wether_forecast", "demo__get_weather_forecast", '{"city": "X"}'
    )

    assert asker.titles[:2] == ["intent: classify", "re-ask: the label is not a tool name"]
    assert any("not among the offered tools" in note for note in asker.notes[0][1])
    assert decision.calls[0].name == "demo__get_weather_forecast"


def test_fill_replies_are_read_tolerantly() -> None:
    wrapped, _ = decide(
        IntentParadigm(), "demo__calculate", '{"tool": "demo__calculate", "arguments": {"expression": "2"}}'
    )
    fenced, _ = decide(
        IntentParadigm(), "demo__calculate", '```json\n{"expression": "2", "precision": "3"}\n```'
    )
    cut, _ = decide(IntentParadigm(), "demo__calculate", '{"expression": "2"')

    assert wrapped.calls[0].arguments == {"expression": "2"}
    assert fenced.calls[0].arguments == {"expression": "2", "precision": 3}
    assert "stripped a code fence around the arguments" in fenced.diagnostics
    assert cut.calls[0].arguments == {"expression": "2"}
    assert any(note.startswith("repaired the arguments") for note in cut.diagnostics)


def test_a_fill_reply_without_json_is_asked_for_once_more() -> None:
    decision, asker = decide(
        IntentParadigm(), "demo__calculate", "Sure, two plus two.", '{"expression": "2+2"}'
    )

    assert asker.titles == [
        "intent: classify",
        "intent: fill arguments for demo__calculate",
        "re-ask: a JSON object of arguments is required",
    ]
    assert decision.calls[0].arguments == {"expression": "2+2"}


def test_intent_history_renders_calls_from_tool_calls_never_from_its_bare_arguments() -> None:
    own = [
        Message(role="user", content="1+1?"),
        Message(
            role="assistant",
            content='{"expression": "1+1"}',
            tool_calls=[
                ToolCall("call_1", "demo__calculate", '{"expression": "1+1"}', {"expression": "1+1"})
            ],
            format="intent",
        ),
        Message(role="tool", content="2", tool_call_id="call_1", name="demo__calculate"),
    ]
    _, asker = decide(IntentParadigm(), "none", "2", history=own)

    assert ("assistant", '{"tool": "demo__calculate", "arguments": {"expression": "1+1"}}') in asker.messages(
        0
    )


# --- Whatever the model writes ----------------------------------------------------------------

ODD_REPLIES = [
    "",
    "{",
    "null",
    "[]",
    '{"decision": 5}',
    '{"decision": {"action": "call_tool"}}',
    '{"tool": 3, "arguments": "x"}',
    "<function_calls><invoke",
    "```",
    "<think>demo__calculate</think>",
    "\x00\ufffd",
]


@pytest.mark.parametrize("reply", ODD_REPLIES, ids=range(len(ODD_REPLIES)))
@pytest.mark.parametrize(
    "paradigm",
    [PromptXmlParadigm(), PromptJsonParadigm(), StructuredParadigm(), IntentParadigm()],
    ids=lambda p: p.key,
)
def test_no_reply_makes_a_paradigm_raise(paradigm: Any, reply: str) -> None:
    odd_tool = ToolDef(
        1, "demo", "odd", "demo__odd", "", {"type": "object", "properties": {"x": {"type": "strnig"}}}
    )
    asker = FakeAsker(*[reply] * 6)
    context = DecisionContext(
        messages=[Message(role="user", content=QUESTION)],
        tools=[*TOOLS, odd_tool],
        choice=ToolChoice("required"),
        asker=asker,
    )

    decision = paradigm.decide(context)

    assert decision.assistant.role == "assistant"
    assert 1 <= len(asker.asked) <= 4
