"""The demo model's scenarios in the open: offered by name on the new-conversation and compare
forms, added to the question, refused for a real model; and tool_choice "named" picks among the
tools the servers offered."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from conversations.demo.scenarios import MARKERS
from conversations.models import Conversation, ModelProfile, Turn
from conversations.runner import turn_run
from conversations.services import conversation_start, demo_profile_ensure
from inspector.forms import SCENARIOS
from servers import gateway
from servers.services import demo_server_ensure
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)

WEATHER = "What will the weather be like in Beijing tomorrow?"


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


def _signed_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _new(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "model_profile": demo_profile_ensure().pk,
        "paradigm": "native",
        "tool_choice": "auto",
        "tool_choice_name": "",
        "servers": [demo_server_ensure().pk],
        "question": WEATHER,
    }
    return data | overrides


def test_every_offered_scenario_is_a_switch_the_demo_model_knows() -> None:
    switches = {re.sub(r"=\w+\]$", "=SECONDS]", key) for key in MARKERS}

    offered = {re.sub(r"=[\d.]+\]$", "=SECONDS]", marker) for marker, _, _ in SCENARIOS}

    assert offered <= switches
    names = {name for _, name, _ in SCENARIOS}
    assert {
        "Malformed JSON",
        "Unknown tool",
        "Missing argument",
        "Code fence",
        "No native tools",
        "No structured output",
        "HTTP 500",
        "Slow streaming",
    } <= names


@pytest.mark.django_db(transaction=False)
def test_the_readme_lists_every_offered_scenario_by_name_and_switch() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| ([^|]+?) \| `(\[demo:[^`]+\])` \|", readme, re.M))

    for marker, name, _ in SCENARIOS:
        assert name in rows, name
        assert re.sub(r"=[\d.]+\]$", "=SECONDS]", marker) == rows[name], name


@pytest.mark.parametrize("page", ["inspector-conversations", "inspector-comparisons"])
def test_the_forms_offer_each_scenario_by_name_with_a_sentence(page: str) -> None:
    demo_profile_ensure()
    text = html.unescape(_signed_in(UserFactory(username="alice")).get(reverse(page)).content.decode())

    for marker, name, sentence in SCENARIOS:
        assert f'value="{marker}"' in text
        assert f"{name} — {sentence}" in text


def test_a_chosen_scenario_is_added_to_the_question_and_the_demo_model_misbehaves() -> None:
    as_alice = _signed_in(UserFactory(username="alice"))

    response = as_alice.post(
        reverse("inspector-conversation-create"), _new(scenario="[demo:unknown-tool]", paradigm="prompt_json")
    )

    assert response.status_code == 302
    conversation = Conversation.objects.get()
    turn = conversation.turns.get()
    assert turn.question == f"{WEATHER} [demo:unknown-tool]"


def test_a_scenario_is_refused_for_a_real_model() -> None:
    real = ModelProfile.objects.create(name="gpt", model="gpt-4.1", provider="openai_chat")
    as_alice = _signed_in(UserFactory(username="alice"))

    response = as_alice.post(
        reverse("inspector-conversation-create"), _new(model_profile=real.pk, scenario="[demo:http-500]")
    )

    assert response.status_code == 400
    assert "Scenarios are the demo model" in html.unescape(response.content.decode())
    assert not Conversation.objects.exists()


@pytest.mark.parametrize("page", ["inspector-conversations", "inspector-comparisons"])
def test_every_form_offering_named_tool_choice_picks_among_the_offered_tools(page: str) -> None:
    alice = UserFactory(username="alice")
    _, turn = conversation_start(
        owner=alice,
        model_profile=demo_profile_ensure(),
        question=WEATHER,
        servers=[demo_server_ensure()],
        dispatch=False,
    )
    turn_run(turn_id=turn.pk)
    offered = {f"demo/{tool['name']}" for tool in Turn.objects.get(pk=turn.pk).tools}

    text = _signed_in(alice).get(reverse(page)).content.decode()

    assert text.count('name="tool_choice"') == 1
    picker = re.search(r'<select name="tool_choice_name"[^>]*>(.*?)</select>', text, re.S)
    assert picker is not None
    assert set(re.findall(r'<option value="([^"]+)"', picker.group(1))) == offered


def test_a_badly_written_named_tool_is_told_an_example_that_exists() -> None:
    as_alice = _signed_in(UserFactory(username="alice"))

    response = as_alice.post(
        reverse("inspector-conversation-create"), _new(tool_choice="named", tool_choice_name="get_forecast")
    )

    assert response.status_code == 400
    text = html.unescape(response.content.decode())
    examples = set(re.findall(r"e\.g\. (demo/\w+)", text))
    assert examples == {"demo/get_weather_forecast"}, examples


def test_named_tool_choice_picks_among_the_tools_the_server_offered() -> None:
    alice = UserFactory(username="alice")
    _, turn = conversation_start(
        owner=alice,
        model_profile=demo_profile_ensure(),
        question=WEATHER,
        servers=[demo_server_ensure()],
        dispatch=False,
    )
    turn_run(turn_id=turn.pk)
    as_alice = _signed_in(alice)

    page = as_alice.get(reverse("inspector-conversations")).content.decode()
    wrong = as_alice.post(
        reverse("inspector-conversation-create"),
        _new(tool_choice="named", tool_choice_name="demo/get_forecast"),
    )
    right = as_alice.post(
        reverse("inspector-conversation-create"),
        _new(tool_choice="named", tool_choice_name="demo/get_weather_forecast"),
    )

    picker = re.search(r'<select name="tool_choice_name"[^>]*>(.*?)</select>', page, re.S)
    assert picker is not None
    assert '<optgroup label="demo">' in picker.group(1)
    assert 'value="demo/get_weather_forecast"' in picker.group(1)
    assert 'value="demo/calculate"' in picker.group(1)
    assert wrong.status_code == 400
    assert "demo offers no tool “get_forecast”" in html.unescape(wrong.content.decode())
    assert right.status_code == 302


@pytest.mark.parametrize("page", ["inspector-conversations", "inspector-comparisons"])
def test_a_new_account_picks_a_named_tool_among_the_bundled_servers_tools(page: str) -> None:
    # No turn and no workbench tools/list yet: the bundled server's catalogue is fixed, so the
    # picker offers it without starting the server.
    demo_server_ensure()

    text = _signed_in(UserFactory(username="newcomer")).get(reverse(page)).content.decode()

    picker = re.search(r'<select name="tool_choice_name"[^>]*>(.*?)</select>', text, re.S)
    assert picker is not None, "a new account gets a text box instead of the picker"
    assert set(re.findall(r'<option value="([^"]+)"', picker.group(1))) == {
        "demo/get_weather_forecast",
        "demo/calculate",
        "demo/convert_units",
        "demo/write_note",
        "demo/list_notes",
        "demo/read_note",
    }
