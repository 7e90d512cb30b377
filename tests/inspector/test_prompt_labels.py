"""What a spliced prompt may claim, the same on the conversation page and on Compare
(templates/inspector/_prompt_badge.html): exact only for a real template rendered whole; a prompt
paradigm's messages without a template "as sent — the provider applies its own template"; a
failed render "failed". Real runs: the demo model in-process, the demo MCP server over stdio."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator

import pytest
from django.test import Client
from django.urls import reverse

from conversations.models import Comparison, ModelProfile, Step, Turn
from conversations.runner import turn_run
from conversations.services import comparison_start, demo_profile_ensure
from servers import gateway
from servers.services import demo_server_ensure
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)

WEATHER = "What will the weather be like in Beijing tomorrow?"
AS_SENT = "as sent — the provider applies its own template"
BADGE = re.compile(r'<span class="badge (prompt-[a-z-]+(?: prompt-[a-z-]+)?)"[^>]*>([^<]*)</span>')


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


def _demo_without_template(template: str = "") -> ModelProfile:
    """The demo model served as a hosted model would be: no chat template known (or a broken one)."""
    return ModelProfile.objects.create(
        name="demo, no template",
        provider="openai_chat",
        model="demo",
        api_key_env="DEMO_MODEL_API_KEY",
        is_demo=True,
        native_tools="yes",
        structured_output="yes",
        chat_template=template,
    )


def _compared(profile: ModelProfile) -> tuple[Client, Comparison, list[Turn]]:
    alice = UserFactory(username="alice")
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
    return client, comparison, turns


def _prompt_badges(client: Client, turn: Turn) -> list[str]:
    """The label of each spliced prompt of the turn's conversation page."""
    text = html.unescape(
        client.get(reverse("inspector-conversation", args=[turn.conversation.public_id])).content.decode()
    )
    sections = re.findall(r'<section class="spliced".*?</header>', text, re.S)
    assert sections
    return [BADGE.findall(section)[0][1] for section in sections]


def _compare_badges(client: Client, comparison: Comparison) -> list[str]:
    """The label of each run's prompt in Compare's "What was sent"."""
    text = html.unescape(
        client.get(reverse("inspector-comparison", args=[comparison.public_id])).content.decode()
    )
    section = re.search(r'<section class="compare-sent".*?</section>', text, re.S)
    assert section is not None
    runs = re.findall(r'<div class="sent-prompt">.*?</h4>', section.group(0), re.S)
    return [BADGE.findall(run)[0][1] for run in runs]


def test_a_prompt_paradigm_without_a_template_is_as_sent_on_both_pages_never_exact() -> None:
    client, comparison, (native, xml) = _compared(_demo_without_template())

    assert set(_prompt_badges(client, xml)) == {AS_SENT}
    assert set(_prompt_badges(client, native)) == {"illustrative"}
    assert _compare_badges(client, comparison) == ["illustrative", AS_SENT]
    step = Step.objects.filter(turn=xml).exclude(prompt="").first()
    assert step is not None and not step.prompt_exact
    assert step.prompt_source.startswith(AS_SENT)


def test_a_failed_template_is_failed_on_both_pages() -> None:
    client, comparison, turns = _compared(_demo_without_template("{{ raise_exception('no tools here') }}"))

    for turn in turns:
        assert set(_prompt_badges(client, turn)) == {"failed"}
    assert _compare_badges(client, comparison) == ["failed", "failed"]


def test_the_demo_profile_is_exact_on_both_pages() -> None:
    client, comparison, turns = _compared(demo_profile_ensure())

    for turn in turns:
        assert set(_prompt_badges(client, turn)) == {"exact"}
    assert _compare_badges(client, comparison) == ["exact", "exact"]


def test_a_stored_paradigm_prompt_recorded_as_exact_before_the_label_existed_reads_as_sent() -> None:
    client, _, (_, xml) = _compared(_demo_without_template())
    # The record of an earlier version: the same text, stored as exact under the old source.
    Step.objects.filter(turn=xml).exclude(prompt="").update(
        prompt_exact=True,
        prompt_source="the messages as the paradigm wrote them (the provider adds its own chat markup)",
    )

    assert set(_prompt_badges(client, xml)) == {AS_SENT}
