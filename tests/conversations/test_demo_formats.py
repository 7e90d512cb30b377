"""The demo model's format conversions: each provider's request into its Chat Completions form,
and its answer back out (the views' tests cover the HTTP side)."""

from __future__ import annotations

import json

import pytest

from conversations.demo.anthropic import ANTHROPIC
from conversations.demo.base import FormatError
from conversations.demo.conventions import DECISION_SCHEMA
from conversations.demo.gemini import GEMINI
from conversations.demo.model import complete
from conversations.demo.openai_chat import CHAT
from conversations.demo.openai_responses import RESPONSES
from conversations.typealias import JSONDict
from tests.support import python_calls

BEIJING = "What will the weather be like in Beijing tomorrow?"
PARAMETERS: JSONDict = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "day": {"type": "string"}},
    "required": ["city"],
}
DECISION: JSONDict = {
    "type": "object",
    "properties": {"decision": {"type": "object"}},
    "required": ["decision"],
    "additionalProperties": False,
}


def test_anthropic_system_tools_choice_and_error_results_become_chat() -> None:
    body: JSONDict = {
        "model": "demo",
        "max_tokens": 100,
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": BEIJING},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "w", "input": {"city": "Beijing"}}],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": "city unknown",
                        "is_error": True,
                    },
                    {"type": "text", "text": "Try again."},
                ],
            },
        ],
        "tools": [{"name": "w", "input_schema": PARAMETERS}],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
    }

    chat = ANTHROPIC.to_chat(body, None)

    assert chat["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": BEIJING},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "w", "arguments": '{"city":"Beijing"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "Error: city unknown"},
        {"role": "user", "content": "Try again."},
    ]
    assert chat["tool_choice"] == "required"
    assert chat["parallel_tool_calls"] is False
    assert chat["tools"] == [
        {"type": "function", "function": {"name": "w", "description": "", "parameters": PARAMETERS}}
    ]


@pytest.mark.parametrize(
    ("choice", "chat_choice"),
    [
        ({"type": "auto"}, "auto"),
        ({"type": "none"}, "none"),
        ({"type": "tool", "name": "w"}, {"type": "function", "function": {"name": "w"}}),
    ],
)
def test_anthropic_tool_choice_forms(choice: JSONDict, chat_choice: object) -> None:
    body: JSONDict = {
        "model": "demo",
        "max_tokens": 9,
        "messages": [{"role": "user", "content": "x"}],
        "tool_choice": choice,
    }

    assert ANTHROPIC.to_chat(body, None)["tool_choice"] == chat_choice


def test_a_schema_without_a_name_is_recognised_as_the_decision_union_by_its_shape() -> None:
    anthropic: JSONDict = {
        "model": "demo",
        "max_tokens": 9,
        "messages": [{"role": "user", "content": "x"}],
        "output_config": {"format": {"type": "json_schema", "schema": DECISION}},
    }
    gemini: JSONDict = {
        "contents": [{"role": "user", "parts": [{"text": "x"}]}],
        "generationConfig": {
            "responseMimeType": "application/json",
            "responseJsonSchema": {"type": "object"},
        },
    }

    assert ANTHROPIC.to_chat(anthropic, None)["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": DECISION_SCHEMA, "schema": DECISION, "strict": True},
    }
    assert GEMINI.to_chat(gemini, "demo")["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "response", "schema": {"type": "object"}},
    }


def test_gemini_contents_pair_responses_by_name_and_lower_the_schema_types() -> None:
    body: JSONDict = {
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "contents": [
            {"role": "user", "parts": [{"text": BEIJING}]},
            {
                "role": "model",
                "parts": [
                    {"functionCall": {"name": "w", "args": {"city": "Beijing"}}, "thoughtSignature": "c2ln"}
                ],
            },
            {
                "role": "user",
                "parts": [{"functionResponse": {"name": "w", "response": {"error": "city unknown"}}}],
            },
        ],
        "tools": [
            {
                "functionDeclarations": [
                    {
                        "name": "w",
                        "parameters": {"type": "OBJECT", "properties": {"city": {"type": "STRING"}}},
                    }
                ]
            }
        ],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["w"]}},
    }

    chat = GEMINI.to_chat(body, "demo")

    assert chat["model"] == "demo"
    assert chat["messages"][2]["tool_calls"][0]["id"] == "call_gemini_1_0"  # type: ignore[index]
    assert chat["messages"][3] == {
        "role": "tool",
        "tool_call_id": "call_gemini_1_0",
        "content": "Error: city unknown",
    }
    assert chat["tools"][0]["function"]["parameters"] == {
        "type": "object",
        "properties": {"city": {"type": "string"}},
    }  # type: ignore[index]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "w"}}


def test_gemini_refuses_more_responses_than_calls() -> None:
    body: JSONDict = {
        "contents": [
            {"role": "user", "parts": [{"text": BEIJING}]},
            {"role": "model", "parts": [{"functionCall": {"name": "w", "args": {}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "w", "response": {}}}] * 2},
        ]
    }

    with pytest.raises(FormatError, match="number of function response parts"):
        GEMINI.to_chat(body, "demo")


def test_responses_items_group_calls_onto_one_assistant_message() -> None:
    body: JSONDict = {
        "model": "demo",
        "instructions": "Be brief.",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": BEIJING}]},
            {"type": "function_call", "call_id": "call_1", "name": "w", "arguments": "{}"},
            {"type": "function_call", "call_id": "call_2", "name": "w", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "a"},
            {"type": "function_call_output", "call_id": "call_2", "output": "b"},
        ],
        "text": {"format": {"type": "json_schema", "name": "reply", "schema": DECISION, "strict": True}},
        "tool_choice": {"type": "function", "name": "w"},
    }

    chat = RESPONSES.to_chat(body, None)

    assert [m["role"] for m in chat["messages"]] == ["system", "user", "assistant", "tool", "tool"]  # type: ignore[index, union-attr]
    assert [c["id"] for c in chat["messages"][2]["tool_calls"]] == ["call_1", "call_2"]  # type: ignore[index, union-attr]
    assert chat["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "reply", "schema": DECISION, "strict": True},
    }
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "w"}}


def _malformed_call() -> JSONDict:
    chat: JSONDict = {
        "model": "demo",
        "messages": [{"role": "user", "content": f"[demo:malformed-json] {BEIJING}"}],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "demo__get_weather_forecast",
                    "description": "Get the weather forecast for a city.",
                    "parameters": PARAMETERS,
                },
            }
        ],
    }
    reply = complete(chat)
    assert reply.status == 200
    return reply.body


def test_a_call_cut_short_on_purpose_is_an_empty_input_whole_and_the_cut_text_streamed() -> None:
    completion = _malformed_call()
    cut = completion["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]  # type: ignore[index, call-overload]

    whole = ANTHROPIC.from_chat(completion, {})
    streamed = ANTHROPIC.events(completion, {})

    assert whole["content"][0]["input"] == {}  # type: ignore[index]
    fragments = [
        json.loads(line[6:])["delta"]["partial_json"]
        for line in streamed.splitlines()
        if line.startswith("data: ") and "input_json_delta" in line
    ]
    assert "".join(fragments) == cut


def test_chat_passes_through_without_its_stream_fields() -> None:
    body: JSONDict = {
        "model": "demo",
        "messages": [],
        "stream": True,
        "stream_options": {"include_usage": True},
    }

    assert CHAT.to_chat(body, None) == {"model": "demo", "messages": []}


def test_a_long_text_paradigm_history_is_decoded_in_work_that_grows_with_it() -> None:
    """Posted results answer the calls of the assistant message before them: that message is
    known as the history is read, not found by scanning everything decoded so far at each
    posted result (a long conversation's history, or a hostile one, would cost its square).
    Work is counted in Python calls made."""
    from conversations.demo.conventions import understand
    from conversations.demo.request import Message, Request, ToolChoice

    rounds = 2_000
    messages = [Message("system", "Call tools with <function_calls> blocks."), Message("user", "Add.")]
    for n in range(rounds):
        messages.append(
            Message("assistant", f'<function_calls><invoke name="calculate">{n}</invoke></function_calls>')
        )
        result = f'<function_result call_id="c{n}" name="calculate">\n{n}\n</function_result>'
        messages.append(Message("user", result))
    request = Request("demo", tuple(messages), (), ToolChoice("auto"), True, "", "")
    (_, decoded), calls = python_calls(lambda: understand(request))

    assistants = [message for message in decoded.messages if message.role == "assistant"]
    assert [call.id for message in assistants for call in message.calls] == [f"c{n}" for n in range(rounds)]
    assert [message.tool_call_id for message in decoded.messages if message.role == "tool"] == [
        f"c{n}" for n in range(rounds)
    ]
    assert calls < 100 * rounds  # about 28 a round; scanning everything decoded made 2 million here
