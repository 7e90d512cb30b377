"""Real chat templates (tests/fixtures/chat_templates/README) rendered by the project and by
transformers' own chat-template function: every case labelled exact matches byte for byte, and
a case transformers cannot render is never labelled exact (issue 20, Tests)."""

from __future__ import annotations

import copy
import importlib
import json
from pathlib import Path
from types import ModuleType

import pytest

from conversations.loop.splicing import render_chat_template, splice
from conversations.typealias import JSONDict

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "chat_templates"
# The special tokens each model's tokenizer config defines (bos/eos as the engine reports them).
TOKENS: dict[str, dict[str, str]] = {
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": {
        "bos_token": "<|begin_of_text|>",
        "eos_token": "<|im_end|>",
    },
    "Qwen-Qwen2.5-7B-Instruct": {"eos_token": "<|im_end|>"},
    "Qwen-Qwen3-0.6B": {"eos_token": "<|im_end|>"},
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": {
        "bos_token": "<｜begin▁of▁sentence｜>",
        "eos_token": "<｜end▁of▁sentence｜>",
    },
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": {
        "bos_token": "<｜begin▁of▁sentence｜>",
        "eos_token": "<｜end▁of▁sentence｜>",
    },
    "meta-llama-Llama-3.1-8B-Instruct": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "meta-llama-Llama-3.2-3B-Instruct": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "meta-llama-Llama-3.3-70B-Instruct": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "mistralai-Mistral-Nemo-Instruct-2407": {"bos_token": "<s>", "eos_token": "</s>"},
}
GET_TIME: JSONDict = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The current time in a time zone",
        "parameters": {
            "type": "object",
            "properties": {"tz": {"type": "string", "description": "IANA zone"}},
            "required": ["tz"],
        },
    },
}
GET_WEATHER: JSONDict = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
TOOLS = [GET_TIME, GET_WEATHER]
SYSTEM: JSONDict = {"role": "system", "content": "You are terse."}
ASK: JSONDict = {"role": "user", "content": "Time and weather in Paris?"}


def call(call_id: str, name: str, arguments: JSONDict) -> JSONDict:
    # Mistral's template requires 9-character alphanumeric call ids.
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments, separators=(",", ":"))},
    }


def result(call_id: str, content: str) -> JSONDict:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


ONE_CALL: JSONDict = {
    "role": "assistant",
    "content": None,
    "tool_calls": [call("abc123def", "get_time", {"tz": "Europe/Paris"})],
}
TWO_CALLS: JSONDict = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        call("abc123def", "get_time", {"tz": "Europe/Paris"}),
        call("ghi456jkl", "get_weather", {"city": "Paris"}),
    ],
}
CASES: dict[str, tuple[list[JSONDict], list[JSONDict] | None]] = {
    "with tools": ([ASK], TOOLS),
    "without tools": ([ASK], None),
    "system prompt": ([SYSTEM, ASK], TOOLS),
    "after a tool call": ([ASK, ONE_CALL, result("abc123def", "14:05")], TOOLS),
    "after a tool error": (
        [ASK, ONE_CALL, result("abc123def", "Error: unknown time zone 'Europe/Pariss'")],
        TOOLS,
    ),
    "parallel calls": (
        [SYSTEM, ASK, TWO_CALLS, result("abc123def", "14:05"), result("ghi456jkl", "Sunny, 21 °C")],
        TOOLS,
    ),
}


def transformers_reference() -> ModuleType:
    """transformers' own chat-template rendering, the reference. It comes with the templates-check
    extra only, so it is imported by the one test that compares with it (marked templates_check):
    the others of this file run without it, and that one fails loudly without it, never skips."""
    return importlib.import_module("transformers.utils.chat_template_utils")


def transformers_rendering(
    reference: ModuleType,
    template: str,
    messages: list[JSONDict],
    tools: list[JSONDict] | None,
    tokens: dict[str, str],
) -> str:
    rendered, _ = reference.render_jinja_template(
        conversations=[copy.deepcopy(messages)],
        tools=copy.deepcopy(tools),
        chat_template=template,
        add_generation_prompt=True,
        **tokens,
    )
    return str(rendered[0])


def with_object_arguments(messages: list[JSONDict]) -> list[JSONDict]:
    """The messages as vLLM hands them to the template: arguments parsed (docs/chat-templates.md §3)."""
    out = copy.deepcopy(messages)
    for message in out:
        calls = message.get("tool_calls")
        for item in calls if isinstance(calls, list) else []:
            assert isinstance(item, dict) and isinstance(item["function"], dict)
            item["function"]["arguments"] = json.loads(str(item["function"]["arguments"]))
    return out


@pytest.mark.templates_check
@pytest.mark.parametrize("arguments", ["object", "string"])
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("name", sorted(TOKENS))
def test_every_exact_rendering_is_transformers_byte_for_byte(name: str, case: str, arguments: str) -> None:
    reference = transformers_reference()  # before the try: a missing extra is no case it cannot render
    template = (CORPUS / f"{name}.jinja").read_text()
    messages, tools = CASES[case]
    tokens = TOKENS[name]
    given = with_object_arguments(messages) if arguments == "object" else messages
    try:
        expected: str | None = transformers_rendering(reference, template, given, tools, tokens)
    except Exception:  # noqa: BLE001 — transformers cannot render this case
        expected = None

    spliced = splice(
        messages=messages,
        tools=tools or [],
        model=name,
        template=template,
        special_tokens=tokens,
        arguments=arguments,
    )

    if expected is None:
        assert spliced.status == "failed", spliced.source
        assert not spliced.exact
    else:
        assert spliced.status == "exact", spliced.source
        assert spliced.text == expected
        assert (
            render_chat_template(
                template, messages=messages, tools=tools, special_tokens=tokens, arguments=arguments
            )
            == expected
        )


def template(name: str) -> str:
    return (CORPUS / f"{name}.jinja").read_text()


def test_deepseek_r1_distill_concatenates_string_arguments_so_an_object_engine_fails() -> None:
    """The issue's case: transformers renders the official template with the wire's string."""
    name = "deepseek-ai-DeepSeek-R1-Distill-Llama-8B"
    messages, tools = CASES["after a tool call"]
    common: dict[str, object] = {"model": name, "template": template(name), "special_tokens": TOKENS[name]}

    as_string = splice(messages=messages, tools=tools or [], arguments="string", **common)  # type: ignore[arg-type]
    as_object = splice(messages=messages, tools=tools or [], arguments="object", **common)  # type: ignore[arg-type]

    assert as_string.status == "exact"
    assert '```json\n{"tz":"Europe/Paris"}\n```' in as_string.text
    assert as_object.status == "failed"
    assert "can only concatenate str" in as_object.source


@pytest.mark.parametrize(
    ("name", "parses"),
    [
        ("meta-llama-Llama-3.1-8B-Instruct", True),  # tool_call.arguments | tojson
        ("Qwen-Qwen2.5-7B-Instruct", True),
        ("deepseek-ai-DeepSeek-R1-Distill-Llama-8B", False),  # concatenates the string
    ],
)
def test_llama_cpp_parses_arguments_only_for_templates_that_read_them_as_objects(
    name: str, parses: bool
) -> None:
    messages, tools = CASES["after a tool call"]
    llama = splice(
        messages=messages,
        tools=tools or [],
        model=name,
        template=template(name),
        special_tokens=TOKENS[name],
        template_source="llama.cpp /props",
    )
    same_as = splice(
        messages=messages,
        tools=tools or [],
        model=name,
        template=template(name),
        special_tokens=TOKENS[name],
        arguments="object" if parses else "string",
    )

    assert llama.status == "exact"
    assert llama.text == same_as.text


def test_re_serialised_arguments_are_said_to_differ_from_the_models_own_text() -> None:
    """Hermes-3 given parsed arguments writes ``{"tz": "Europe/Paris"}``; the model wrote
    ``{"tz":"Europe/Paris"}``. Still exact (the engine renders this), and the source says so."""
    name = "NousResearch-Hermes-3-Llama-3.1-8B-tool_use"
    messages, tools = CASES["parallel calls"]
    common: dict[str, object] = {"model": name, "template": template(name), "special_tokens": TOKENS[name]}

    parsed = splice(messages=messages, tools=tools or [], arguments="object", **common)  # type: ignore[arg-type]
    wire = splice(messages=messages, tools=tools or [], arguments="string", **common)  # type: ignore[arg-type]

    assert parsed.status == "exact"
    assert '"arguments": {"tz": "Europe/Paris"}' in parsed.text
    assert parsed.source.endswith(
        "the template re-serialises tool-call arguments: 2 calls differ from the model's own text"
    )
    assert '"arguments": {"tz":"Europe/Paris"}' in wire.text
    assert wire.source == "the profile's chat template"
