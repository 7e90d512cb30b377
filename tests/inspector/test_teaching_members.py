"""Reading one member of a model request's body without reading its history
(``teaching.top_level_member``, which the rows' tool_choice note uses): the same answer as
``json.loads``, for any JSON object, and bounded work on a hostile one."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inspector import teaching

KEYS = ["tool_choice", "tools", "toolConfig", "messages", "a", 'x"y', "tool_choice\\"]

scalars = st.none() | st.booleans() | st.integers() | st.text(alphabet=st.sampled_from('ab,:{}[]"\\ \nt_'))
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(KEYS) | st.text(), inner, max_size=4)
    ),
    max_leaves=25,
)
layouts = st.sampled_from([{}, {"indent": 2}, {"separators": (",", ":")}, {"ensure_ascii": False}])


@settings(max_examples=400, deadline=None)
@given(body=st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=5), values, max_size=6), layout=layouts)
def test_a_member_reads_as_json_loads_reads_it(body: dict[str, Any], layout: dict[str, Any]) -> None:
    text = json.dumps(body, **layout)

    for key in KEYS:
        assert teaching.top_level_member(text, key) == body.get(key, teaching.MISSING)


def test_the_last_of_duplicate_members_wins_as_in_json_loads() -> None:
    text = '{"tool_choice": "auto", "messages": [], "tool_choice": "none"}'

    assert teaching.top_level_member(text, "tool_choice") == json.loads(text)["tool_choice"] == "none"


@pytest.mark.parametrize(
    "text",
    [
        # The key inside the history: a message's text, a nested object, an array of strings.
        '{"messages": [{"role": "user", "content": "say \\"tool_choice\\": \\"none\\""}], "tool_choice": "auto"}',
        '{"messages": [{"tool_choice": "none"}], "tool_choice": "auto"}',
        '{"tool_choice": "auto", "messages": [{"tool_choice": "none", "x": {}}]}',
        '{"messages": ["tool_choice", "none"], "tool_choice": "auto"}',
        '{"tool_choice": "auto", "m": {"k": "tool_choice"}}',
    ],
)
def test_a_key_anywhere_but_the_top_level_is_not_the_member(text: str) -> None:
    assert teaching.top_level_member(text, "tool_choice") == "auto"


def test_a_request_without_the_member_has_none() -> None:
    text = '{"messages": [{"role": "tool", "content": "{\\"tool_choice\\": 1}", "tools": [1]}]}'

    assert teaching.top_level_member(text, "tool_choice") is teaching.MISSING
    assert teaching.top_level_member(text, "tools") is teaching.MISSING


def test_many_nested_keys_cost_one_reading_of_the_body() -> None:
    # Thousands of nested "tool_choice" members, each followed by the rest of the body: trying
    # each would read the body thousands of times.
    nested = '{"tool_choice": 1, "rest": ' * 500 + "0" + "}" * 500
    text = '{"m": ' + nested + ', "tool_choice": "auto"}'
    hidden = '{"tool_choice": "auto", "m": ' + nested + "}"

    started = time.perf_counter()
    found = [teaching.top_level_member(body, "tool_choice") for body in (text, hidden)]
    elapsed = time.perf_counter() - started

    assert found == ["auto", "auto"]
    # Bounded work, not a timing assertion on the machine: a few readings of a 14 kB body take
    # milliseconds; reading it for each of 500 nested keys took seconds.
    assert elapsed < 2, elapsed


def test_a_body_nested_past_the_recursion_limit_has_no_member_and_no_crash() -> None:
    deep = '{"tool_choice": "auto", "m": ' + "[" * 100_000 + "]" * 100_000 + "}"

    assert teaching.top_level_member(deep, "tool_choice") is teaching.MISSING
    assert (
        teaching.sent_tool_choice(deep, "openai_chat")
        == "not sent (no tools field: any tools are prompt text)"
    )


def test_the_note_reads_the_sent_tool_choice_of_a_long_request() -> None:
    history = [{"role": "user", "content": "tool_choice " * 10_000}]
    body = json.dumps(
        {"model": "m", "messages": history, "tools": [{"type": "function"}], "tool_choice": "required"}
    )

    assert teaching.sent_tool_choice(body, "openai_chat") == "required"
    assert teaching.sent_tool_choice(json.dumps({"messages": history, "tools": [1]}), "openai_chat") == (
        "not sent (the provider's default: auto)"
    )
    gemini = json.dumps({"contents": [], "toolConfig": {"functionCallingConfig": {"mode": "ANY"}}})
    assert teaching.sent_tool_choice(gemini, "gemini") == '{"mode":"ANY"}'
    assert teaching.sent_tool_choice("not json", "openai_chat") == ""
