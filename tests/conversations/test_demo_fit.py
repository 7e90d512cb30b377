"""The demo model's description rule (conversations/demo/fit.py, docs/evals.md §8): whether the
chosen tool's description fits the question, read with its negations, in every format."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conversations.demo.fit import description_fit
from conversations.demo.request import Tool
from conversations.demo.understanding import read_facts, read_negations
from conversations.loop.llm import ToolChoice
from conversations.loop.paradigms import prompt_json, prompt_xml
from tests.conversations.test_demo_model import (
    BEIJING,
    CALCULATOR,
    CONVERTER,
    NOTES,
    WEATHER,
    ask,
    calls_of,
    content_of,
    message_of,
    reply_of,
    structured_request,
    text_request,
    tool_defs,
    user,
)

NEGATED = "Weather forecast. Never pass a city or a day: this tool takes neither."
SKIES = "Tells what the skies will do at a spot on Earth."
TERSE = "Weather."


def _weather(description: str, *, parameters: bool = True) -> dict[str, Any]:
    tool = json.loads(json.dumps(WEATHER))
    tool["function"]["description"] = description
    if not parameters:
        tool["function"]["parameters"] = {"type": "object", "properties": {}}
    return tool


def _catalogue(description: str) -> list[dict[str, Any]]:
    return [_weather(description), CALCULATOR, CONVERTER, NOTES]


def _demo_tool(description: str) -> Tool:
    function = _weather(description)["function"]
    return Tool(function["name"], function["description"], function["parameters"])


# --- Reading a description -------------------------------------------------------------------


def test_a_negation_refuses_the_rest_of_its_clause_up_to_a_contrast() -> None:
    affirmed, refused = read_negations(
        "Weather forecast. Never pass a city or a day: this tool takes neither."
    )
    assert "city" in refused and "day" in refused
    assert "weather" in affirmed and "city" not in affirmed

    affirmed, refused = read_negations("It doesn't need a key but takes a city.")
    assert refused == ["need", "a", "key"]
    assert "city" in affirmed


def test_a_description_that_refuses_what_the_question_gives_scores_nothing_and_does_not_fit() -> None:
    fit = description_fit(_demo_tool(NEGATED), read_facts(BEIJING), among=4)

    assert fit.refuses == ("a place", "a day")
    assert fit.score == 0
    assert not fit.fits


def test_a_description_that_affirms_one_place_word_and_refuses_another_still_takes_a_place() -> None:
    fit = description_fit(_demo_tool("Weather for a city, not a country."), read_facts(BEIJING), among=4)

    assert fit.takes == ("a place",)
    assert fit.refuses == ()
    assert fit.fits


def test_the_score_counts_topic_words_and_twice_each_kind_taken() -> None:
    fit = description_fit(_demo_tool(SKIES), read_facts(BEIJING), among=4)

    assert fit.topic == ("weather",)  # "skies" is a weather word
    assert fit.takes == ("a place",)  # "a spot on Earth" is a place
    assert fit.score == 3
    assert fit.fits


def test_a_description_that_names_a_parameter_takes_what_that_parameter_takes() -> None:
    tool = Tool(
        "lookup",
        "Current conditions for q.",
        {
            "type": "object",
            "properties": {"q": {"type": "string", "description": "City name or coordinates"}},
        },
    )

    assert description_fit(tool, read_facts(BEIJING), among=4).takes == ("a place",)


# --- The four descriptions, among the catalogue --------------------------------------

UNFIT = "The tool demo__get_weather_forecast might fit, but"


def test_a_description_that_says_it_takes_neither_city_nor_day_does_not_get_the_city_weather_question() -> (
    None
):
    body = reply_of(ask(BEIJING, tools=_catalogue(NEGATED)))

    assert "tool_calls" not in message_of(body)
    assert (
        f"{UNFIT} its description says that it does not take a place or a day" in message_of(body)["content"]
    )


def test_a_description_without_the_keywords_that_still_says_weather_at_a_place_is_called() -> None:
    body = reply_of(ask(BEIJING, tools=_catalogue(SKIES)))

    assert calls_of(body) == [("demo__get_weather_forecast", {"city": "Beijing", "day": "tomorrow"})]


def test_an_empty_description_among_several_tools_is_not_routed_to() -> None:
    body = reply_of(ask(BEIJING, tools=_catalogue("")))

    assert "tool_calls" not in message_of(body)
    assert (
        f"{UNFIT} it has no description to tell it apart from the other tools" in message_of(body)["content"]
    )


def test_a_lone_tool_without_a_description_is_judged_by_its_parameters() -> None:
    assert [name for name, _ in calls_of(reply_of(ask(BEIJING, tools=[_weather("")])))] == [
        "demo__get_weather_forecast"
    ]
    # With neither, its name is all there is: it is called.
    bare = reply_of(ask(BEIJING, tools=[_weather("", parameters=False)]))
    assert [name for name, _ in calls_of(bare)] == ["demo__get_weather_forecast"]


def test_a_topic_only_description_fails_the_weather_question_and_only_it() -> None:
    """ "Weather." names the topic and no kind of value: the documented rule refuses it for a
    question that gives a place and a day, and still calls it for one that gives neither."""
    body = reply_of(ask(BEIJING, tools=_catalogue(TERSE)))
    assert (
        f"{UNFIT} its description does not say that it takes a place or a day" in message_of(body)["content"]
    )

    plain = reply_of(ask("What is the weather like?", tools=_catalogue(TERSE)))
    assert [name for name, _ in calls_of(plain)] == ["demo__get_weather_forecast"]


def test_a_required_tool_choice_calls_a_refusing_description_anyway() -> None:
    body = reply_of(ask(BEIJING, tools=_catalogue(NEGATED), tool_choice="required"))

    assert [name for name, _ in calls_of(body)] == ["demo__get_weather_forecast"]


# --- The same rule in every format -----------------------------------------------------------


@pytest.mark.parametrize(
    "description", [NEGATED, SKIES, "", TERSE], ids=["negated", "skies", "empty", "terse"]
)
def test_every_paradigm_applies_the_same_rule(description: str) -> None:
    native = reply_of(ask(BEIJING, tools=_catalogue(description)))
    called = bool(message_of(native).get("tool_calls"))
    catalogue = tool_defs(*_catalogue(description))
    xml = content_of(
        text_request(prompt_xml.system_prompt(catalogue, ToolChoice("auto"), history=False), user(BEIJING))
    )
    plain_json = content_of(
        text_request(prompt_json.system_prompt(catalogue, ToolChoice("auto"), history=False), user(BEIJING))
    )
    decision = json.loads(content_of(structured_request(BEIJING, tools=catalogue)))["decision"]

    assert called == (description == SKIES)
    assert ("<invoke" in xml) == called
    assert ('"tool"' in plain_json) == called
    assert (decision["action"] == "call_tool") == called
