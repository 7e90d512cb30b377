"""Every paradigm end to end: ``manage.py ask`` through the real loop, the demo model served
in-process and the demo MCP server over stdio, under each tool_choice, with each misbehaviour."""

from __future__ import annotations

import json
from collections.abc import Iterator
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from conversations.loop.paradigms import PARADIGMS
from servers import gateway
from tests.factories import UserFactory

WEATHER = "What will the weather be like in Beijing tomorrow?"
PROMPT_PARADIGMS = ["prompt_xml", "prompt_json", "structured", "intent"]
CHOICES = {
    "auto": [],
    "required": ["--tool-choice", "required"],
    "named": ["--tool-choice", "named", "--tool", "demo/get_weather_forecast"],
    "none": ["--tool-choice", "none"],
}

# Every paradigm × tool_choice through the real loop: runs in the Postgres pass only (marked slow).

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture(autouse=True)
def _admin() -> None:
    """The superuser ``make run`` creates, whom ``ask`` runs as by default."""
    UserFactory(username="admin", is_superuser=True, is_staff=True)


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    """Pooled stdio sessions would otherwise outlive the test (and its database)."""
    yield
    gateway.close_all()


def _ask(*args: str) -> dict[str, Any]:
    out = StringIO()
    try:
        call_command("ask", *args, "--json", stdout=out)
    except CommandError:
        pass  # the transcript was printed; the test says what it expected of the turn
    transcript: dict[str, Any] = json.loads(out.getvalue())
    turn: dict[str, Any] = transcript["turns"][0]
    return turn


def _weather_calls(turn: dict[str, Any]) -> list[dict[str, Any]]:
    calls = []
    for step in turn["steps"]:
        for exchange in step["exchanges"]:
            if exchange["channel"] == "mcp" and exchange["label"] == "tools/call":
                params = json.loads(exchange["request_body"])["params"]
                if params["name"] == "get_weather_forecast":
                    calls.append(params["arguments"])
    return calls


@pytest.mark.parametrize("choice", list(CHOICES))
@pytest.mark.parametrize("paradigm", sorted(PARADIGMS))
def test_the_weather_question_is_answered_under_every_paradigm_and_tool_choice(
    paradigm: str, choice: str
) -> None:
    turn = _ask(WEATHER, "--paradigm", paradigm, *CHOICES[choice])

    assert turn["status"] == "done", turn["error"]
    assert "Beijing" in turn["answer"]
    if choice == "none":
        assert _weather_calls(turn) == []
    else:
        assert _weather_calls(turn) == [{"city": "Beijing", "day": "tomorrow"}]


def _steps(turn: dict[str, Any], kind: str | None = None) -> list[dict[str, Any]]:
    return [step for step in turn["steps"] if kind is None or step["kind"] == kind]


def _explanations(turn: dict[str, Any]) -> str:
    """Everything the steps say about what went wrong: diagnostics, errors, titles."""
    return "\n".join(
        "\n".join([step["title"], step["error"], *step["diagnostics"]]) for step in turn["steps"]
    )


def _first_reply(turn: dict[str, Any]) -> str:
    exchange = next(e for step in turn["steps"] for e in step["exchanges"] if e["channel"] == "llm")
    content: str = json.loads(exchange["response_body"])["choices"][0]["message"]["content"] or ""
    return content


# (marker, the tool_choice it is shown under, what the explaining step says, paradigm by paradigm)
MISBEHAVIOURS: list[tuple[str, str, dict[str, str]]] = [
    (
        "malformed-json",
        "auto",
        {
            "prompt_xml": "reply is truncated",
            "prompt_json": "reply is truncated",
            "structured": "not valid JSON",
            "intent": "repaired the arguments",
        },
    ),
    (
        "code-fence",
        "auto",
        {
            "prompt_xml": "stripped a code fence",
            "prompt_json": "stripped a code fence",
            "structured": "stripped a code fence",
            "intent": "stripped a code fence",
        },
    ),
    (
        "unknown-tool",
        "auto",
        {
            "prompt_xml": "unknown tool 'demo__get_wether_forecast'",
            "prompt_json": "unknown tool 'demo__get_wether_forecast'",
            "structured": "unknown tool 'demo__get_wether_forecast'",
            "intent": "re-ask: the label is not a tool name",
        },
    ),
    (
        "missing-argument",
        "auto",
        {
            "prompt_xml": "'city' is a required property",
            "prompt_json": "'city' is a required property",
            # Strict mode makes every key present: the left-out city comes as null.
            "structured": "at 'city': None is not of type 'string'",
            "intent": "'city' is a required property",
        },
    ),
    (
        "no-tool",
        "required",
        {
            paradigm: "a tool call is required but the reply has none: asking once more"
            for paradigm in PROMPT_PARADIGMS
        }
        | {"intent": "a tool call is required but the label is none: asking once more"},
    ),
]


@pytest.mark.parametrize("paradigm", PROMPT_PARADIGMS)
@pytest.mark.parametrize(("marker", "choice", "explained"), MISBEHAVIOURS, ids=[m[0] for m in MISBEHAVIOURS])
def test_each_misbehaviour_is_recorded_explained_and_repaired(
    paradigm: str, marker: str, choice: str, explained: dict[str, str]
) -> None:
    turn = _ask(f"[demo:{marker}] {WEATHER}", "--paradigm", paradigm, *CHOICES[choice])

    assert turn["status"] == "done", turn["error"]
    assert explained[paradigm] in _explanations(turn)
    assert _weather_calls(turn)[-1] == {"city": "Beijing", "day": "tomorrow"}
    assert "Beijing" in turn["answer"]


def test_a_code_fence_really_wraps_the_first_reply() -> None:
    turn = _ask(f"[demo:code-fence] {WEATHER}", "--paradigm", "prompt_xml")

    assert _first_reply(turn).startswith("```xml\n<function_calls>")


def test_an_invalid_call_goes_back_to_the_model_as_an_error_and_the_next_call_is_valid() -> None:
    turn = _ask(f"[demo:missing-argument] {WEATHER}", "--paradigm", "prompt_json")

    refused, repaired = [step for step in _steps(turn, "tool")]
    assert refused["status"] == "error"
    assert refused["error"].startswith("not sent: invalid arguments")
    assert repaired["status"] == "ok"
    assert _weather_calls(turn) == [{"city": "Beijing", "day": "tomorrow"}]


def test_auto_falls_back_when_the_model_refuses_native_tools_and_structured_output() -> None:
    turn = _ask(f"[demo:no-native-tools] [demo:no-structured] {WEATHER}", "--paradigm", "auto")

    assert turn["status"] == "done", turn["error"]
    fallbacks = [step["title"] for step in _steps(turn, "fallback")]
    assert fallbacks == ["fallback: native → structured", "fallback: structured → prompt_xml"]
    assert "does not support tools" in _explanations(turn)
    assert _weather_calls(turn) == [{"city": "Beijing", "day": "tomorrow"}]
