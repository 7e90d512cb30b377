"""Issue 20 item 4: per-tool and per-result token counts are of the text the template splices
(the prompt rendered with and without each piece), in the prompt's own tokenizer."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conversations.loop.splicing import count_tokens, render_chat_template, splice
from conversations.loop.splicing.pieces import removed_inside, removed_span
from conversations.typealias import JSONDict

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "chat_templates"
LLAMA = (CORPUS / "meta-llama-Llama-3.1-8B-Instruct.jinja").read_text()
TOKENS = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
GET_TIME: JSONDict = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The current time in a time zone",
        "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]},
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
HISTORY: list[JSONDict] = [
    {"role": "user", "content": "Time in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "abc123def",
                "type": "function",
                "function": {"name": "get_time", "arguments": '{"tz": "Europe/Paris"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "abc123def", "content": "14:05"},
]


def test_removed_span_is_what_differs_between_two_renderings() -> None:
    assert removed_span("<a>XY<b>", "<a><b>") == "XY"
    assert removed_span("same", "same") == ""
    assert removed_span("aXa", "a") == "Xa"


def _removed_span_by_characters(full: str, without: str) -> str:
    """The same, one character at a time: what the bisections must agree with."""
    prefix = 0
    while prefix < min(len(full), len(without)) and full[prefix] == without[prefix]:
        prefix += 1
    suffix = 0
    while (
        suffix < min(len(full), len(without)) - prefix
        and full[len(full) - 1 - suffix] == without[len(without) - 1 - suffix]
    ):
        suffix += 1
    return full[prefix : len(full) - suffix]


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 4097, 8192, 20_000])
def test_removed_span_over_long_texts_agrees_with_a_character_by_character_comparison(size: int) -> None:
    """The prefix and suffix are found by bisection over slices: with the text removed or
    replaced at the start, the end and around powers of two, and repeated."""
    chance = random.Random(size)
    base = "".join(chance.choice("ab—") for _ in range(size))
    edges = (0, 1, size // 2, 4095, 4096, 4097, size - 4097, size - 4096, size - 4095, size - 1, size)
    for at in sorted({min(max(at, 0), size) for at in edges}):
        for piece in ("X", "<tool_response>\n7\n</tool_response>\n", base[at : at + 5000] or "Y"):
            full = base[:at] + piece + base[at:]
            emptied = base[:at] + "Q" + base[at:]  # the piece replaced, as a result emptied is

            assert removed_span(full, base) == _removed_span_by_characters(full, base)
            assert len(removed_span(full, base)) == len(piece)
            assert removed_span(full, emptied) == _removed_span_by_characters(full, emptied)
            assert removed_span(emptied, full) == _removed_span_by_characters(emptied, full)


# Few letters, so the parts share text with what is around them and with each other.
_TEXT = st.text(alphabet="ab<", max_size=10)


@settings(max_examples=2000, deadline=None)
@given(before=_TEXT, part=_TEXT, changed=_TEXT, after=_TEXT)
def test_what_a_change_removes_is_found_from_the_changed_part_alone_when_it_can_be(
    before: str, part: str, changed: str, after: str
) -> None:
    """A step's pieces are found from the blocks a change touches: that must be the span of the
    whole texts whenever it is given, whatever text surrounds the blocks."""
    inside = removed_inside(part, changed)

    if inside is not None:
        assert inside == removed_span(before + part + after, before + changed + after)


def test_what_a_change_removes_is_left_to_the_whole_texts_when_the_shorter_begins_the_longer() -> None:
    assert removed_inside("<b>XY", "<b>") is None  # what follows could begin with "XY"
    assert removed_inside("<a>X<b>", "<a><b>") == "X"
    assert removed_inside("<a>X<b>", "<a>Q<b>") == "X"
    # The shared end reaches back over the shared start: cut to what the start leaves.
    assert removed_inside("ab<ba", "aba") == removed_span("ab<ba", "aba") == "<b"
    assert removed_inside("XY<b>", "<b>") == removed_span("aXY<b>", "a<b>") == "XY"


def test_llama_tool_counts_include_the_templates_own_wrapping() -> None:
    spliced = splice(
        messages=HISTORY,
        tools=[GET_TIME, GET_WEATHER],
        model="llama-3.1-8b",
        template=LLAMA,
        special_tokens=TOKENS,
    )
    full = spliced.text
    without_weather = render_chat_template(LLAMA, messages=HISTORY, tools=[GET_TIME], special_tokens=TOKENS)
    spliced_weather = removed_span(full, without_weather)

    assert spliced.status == "exact"
    # Llama 3.1 prints each definition with tojson(indent=4), not as one compact JSON line.
    assert json.dumps(GET_WEATHER, indent=4) in spliced_weather
    assert spliced.tokens.tools["get_weather"] == count_tokens(spliced_weather, "llama3")
    assert spliced.tokens.tools["get_weather"] > count_tokens(json.dumps(GET_WEATHER), "llama3")


def test_llama_result_counts_include_the_ipython_turn() -> None:
    spliced = splice(
        messages=HISTORY, tools=[GET_TIME], model="llama-3.1-8b", template=LLAMA, special_tokens=TOKENS
    )

    # The result "14:05" is spliced as a whole ipython turn around its JSON.
    result = '<|start_header_id|>ipython<|end_header_id|>\n\n"14:05"<|eot_id|>'
    assert result in spliced.text
    assert spliced.tokens.results == [count_tokens(result, "llama3")]
    assert "the text the prompt loses when rendered without it" in spliced.tokens.note


def test_the_generic_rendering_counts_by_difference_too() -> None:
    spliced = splice(messages=HISTORY, tools=[GET_TIME, GET_WEATHER], model="gpt-4o")

    line = json.dumps(GET_WEATHER, ensure_ascii=False) + "\n"
    assert spliced.tokens.tools["get_weather"] == count_tokens(line, "o200k_base")
    wrapped = "<|im_start|>user\n<tool_response>\n14:05\n</tool_response><|im_end|>\n"
    assert wrapped in spliced.text
    assert spliced.tokens.results == [count_tokens(wrapped, "o200k_base")]
