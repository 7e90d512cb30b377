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

from conversations.models import Exchange, Step
from conversations.runner import turn_run
from conversations.services import comparison_start, demo_profile_ensure
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
