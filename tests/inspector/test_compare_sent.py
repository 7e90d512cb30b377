"""Compare shows what was sent: for each run the spliced prompt beside the raw reply, and a line
diff between any two runs' prompts. Real runs: the demo model in-process, the demo MCP server over
stdio."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator

import pytest
from django.test import Client
from django.urls import reverse

from conversations.models import Exchange, Step, Turn
from conversations.runner import turn_run
from conversations.services import comparison_start, demo_profile_ensure
from inspector.preferences import preference_set
from servers import gateway
from servers.services import demo_server_ensure
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)

WEATHER = "What will the weather be like in Beijing tomorrow?"


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


def test_each_run_shows_its_prompt_and_raw_reply_and_two_prompts_are_diffed() -> None:
    alice = UserFactory(username="alice")
    profile = demo_profile_ensure()
    comparison, turns = comparison_start(
        owner=alice,
        question=WEATHER,
        runs=[(profile, "native"), (profile, "prompt_xml")],
        servers=[demo_server_ensure()],
        dispatch=False,
    )
    for turn in turns:
        turn_run(turn_id=turn.pk)
    client = Client()
    client.force_login(alice)
    url = reverse("inspector-comparison", args=[comparison.public_id])

    text = client.get(url).content.decode()
    swapped = client.get(url, {"a": "2", "b": "1"}).content.decode()

    section = re.search(r'<section class="compare-sent".*?</section>', text, re.S)
    assert section is not None
    for turn in turns:
        step = Step.objects.filter(turn=turn).exclude(kind="tool").exclude(prompt="").order_by("seq").first()
        assert step is not None
        reply = step.exchanges.filter(channel=Exchange.Channel.LLM).first()
        assert reply is not None and json.loads(reply.response_body)
        assert html.escape(step.prompt) in section.group(0)
        assert html.escape(reply.response_body) in section.group(0)
    assert section.group(0).count('class="sent-run"') == 2
    # prompt_xml writes its tools into the prompt: the diff of run 2 against run 1 adds lines.
    added = re.search(
        r'<span class="diff-count add">\+(\d+)</span> <span class="diff-count del">−(\d+)', text
    )
    assert added is not None and int(added.group(1)) > 0
    swapped_counts = re.search(r'diff-count add">\+(\d+)</span> <span class="diff-count del">−(\d+)', swapped)
    assert swapped_counts is not None
    assert (swapped_counts.group(1), swapped_counts.group(2)) == (added.group(2), added.group(1))
    assert "Pick two different runs." in client.get(url, {"a": "1", "b": "1"}).content.decode()


def _model_calls(turn: Turn) -> list[Step]:
    return list(Step.objects.filter(turn=turn).exclude(kind="tool").exclude(prompt="").order_by("seq"))


def _section(text: str) -> str:
    found = re.search(r'<section class="compare-sent".*?</section>', text, re.S)
    assert found is not None
    return found.group(0)


def test_the_user_picks_which_model_call_of_each_run_is_shown_first_last_or_by_number() -> None:
    alice = UserFactory(username="alice")
    profile = demo_profile_ensure()
    comparison, turns = comparison_start(
        owner=alice,
        question=WEATHER,
        runs=[(profile, "native"), (profile, "intent")],
        servers=[demo_server_ensure()],
        dispatch=False,
    )
    for turn in turns:
        turn_run(turn_id=turn.pk)
    client = Client()
    client.force_login(alice)
    url = reverse("inspector-comparison", args=[comparison.public_id])
    calls = [_model_calls(turn) for turn in turns]
    assert all(len(steps) >= 2 for steps in calls) and len(calls[1]) > len(calls[0])

    first = _section(client.get(url).content.decode())
    last = _section(client.get(url, {"call": "last"}).content.decode())
    second = _section(client.get(url, {"call": "2"}).content.decode())
    beyond = _section(client.get(url, {"call": str(len(calls[0]) + 1)}).content.decode())

    def shown(step: Step) -> str:
        return f'<pre tabindex="0" class="body plain">{html.escape(step.prompt)}</pre>'

    for steps in calls:
        assert shown(steps[0]) in first
        assert shown(steps[-1]) in last and shown(steps[0]) not in last
        assert shown(steps[1]) in second
    # Each run says which of its calls is shown; a run with fewer calls says it has none of that number.
    assert (
        f"model call 1 of {len(calls[0])}" in first
        and f"model call {len(calls[1])} of {len(calls[1])}" in last
    )
    assert f"run 1 made {len(calls[0])} model call" in beyond
    assert shown(calls[1][len(calls[0])]) in beyond
    # The picker keeps the choice, and the diff form carries it along.
    assert '<option value="last" selected>' in last
    assert '<input type="hidden" name="call" value="last">' in last
    # Nonsense picks the first.
    assert _section(client.get(url, {"call": "-3"}).content.decode()) == first


def test_with_teaching_on_the_raw_replies_fields_are_explained_and_the_roles_named() -> None:
    alice = UserFactory(username="alice")
    profile = demo_profile_ensure()
    comparison, turns = comparison_start(
        owner=alice,
        question=WEATHER,
        runs=[(profile, "native"), (profile, "structured")],
        servers=[demo_server_ensure()],
        dispatch=False,
    )
    for turn in turns:
        turn_run(turn_id=turn.pk)
    client = Client()
    client.force_login(alice)
    url = reverse("inspector-comparison", args=[comparison.public_id])
    off = _section(client.get(url).content.decode())
    preference_set(user=alice, teaching=True)

    on = _section(client.get(url, {"call": "last"}).content.decode())

    assert 'class="teach' not in off
    runs = re.findall(r'<article class="sent-run".*?</article>', on, re.S)
    assert len(runs) == 2
    for run in runs:
        assert '<p class="teach teach-roles" data-sender="Host" data-receiver="Model">' in run
        assert "not a party to MCP" in run
        fields = re.findall(r'<div class="teach-field[^"]*"><dt><code>([^<]+)</code>', run)
        assert {"choices", "finish_reason", "usage"} <= set(fields), fields
        assert "(no note yet)" not in run
        # What each side of the pair is, as the step-through says it.
        assert "The spliced prompt: the text the model actually reads" in run
        assert "The exact reply the provider sent back" in run
