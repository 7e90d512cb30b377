"""What the step-through and a row's head say about a turn is what its record says: the prompt
slide carries the page's label (exact, illustrative, as sent) and its token counts; a call the
host refused is shown as not executed, never as a ``tools/call`` that "executes the tool"; and
the tool_choice of each model call is the one it ran under — the turn's own until its first
decision with calls, then ``auto`` (the loop relaxes it, ``ToolChoice.after_call``), in every
paradigm. Real runs: the demo model in-process, the demo MCP server over stdio."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from conversations.models import Step, Turn
from conversations.runner import turn_run
from conversations.services import conversation_start, demo_format_profiles_ensure, demo_profile_ensure
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


def _signed_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _run(owner: Any, question: str, *, profile: Any = None, **options: Any) -> Turn:
    _, turn = conversation_start(
        owner=owner,
        model_profile=profile or demo_profile_ensure(),
        question=question,
        servers=[demo_server_ensure()],
        dispatch=False,
        **options,
    )
    turn_run(turn_id=turn.pk)
    turn.refresh_from_db()
    return turn


def _slides(client: Client, turn: Turn) -> list[str]:
    url = reverse("inspector-turn-walk", args=[turn.conversation.public_id, turn.pk])
    first = client.get(url).content.decode()
    total = int(re.search(r"slide 1 of (\d+)", first).group(1))  # type: ignore[union-attr]
    return [client.get(url, {"at": at}).content.decode() for at in range(1, total + 1)]


def _layer(slide: str) -> str:
    return re.search(r'data-layer="(\w+)"', slide).group(1)  # type: ignore[union-attr]


def test_the_prompt_slide_carries_the_pages_label_and_token_counts() -> None:
    alice = UserFactory(username="alice")
    exact = _run(alice, WEATHER)
    anthropic = next(p for p in demo_format_profiles_ensure(stream=False) if p.provider == "anthropic")
    hosted = _run(alice, WEATHER, profile=anthropic)
    client = _signed_in(alice)

    for turn, label in ((exact, "exact"), (hosted, None)):
        step = Step.objects.filter(turn=turn).exclude(prompt="").order_by("seq").first()
        assert step is not None
        prompts = [slide for slide in _slides(client, turn) if _layer(slide) == "prompt"]
        assert prompts, turn.conversation.paradigm
        slide = html.unescape(prompts[0])
        badge = re.search(r'class="badge (prompt-[a-z-]+)[^"]*"[^>]*>([^<]+)<', slide)
        assert badge is not None, slide[:2000]
        if label == "exact":
            assert step.prompt_exact and badge.group(2) == "exact"
            assert "the text the model actually reads" in slide
            tokens = step.tokens["prompt"]
            assert re.search(rf"<strong>{tokens:,}</strong> tokens", slide), slide[:3000]
        else:
            assert not step.prompt_exact and badge.group(2) != "exact"
            # A rendering that is not the model's own never claims to be what it reads.
            assert "actually reads" not in slide
        assert step.prompt_source in slide


def test_a_refused_call_is_shown_as_not_executed_in_the_step_through() -> None:
    alice = UserFactory(username="alice")
    turn = _run(alice, "[demo:missing-argument] " + WEATHER)
    refused = Step.objects.filter(turn=turn, kind="tool", error__startswith="not sent:").first()
    assert refused is not None, "the scenario's first call is refused"

    slides = [html.unescape(s) for s in _slides(_signed_in(alice), turn)]
    shown = [s for s in slides if "Not executed" in s]
    assert len(shown) == 1
    slide = shown[0]
    assert "NOT EXECUTED" in slide
    assert "executes the tool" not in slide and "sent to the server" not in slide.split("nothing was")[0]
    assert re.search(r'class="role role-host">Host</span> → <span class="role role-model">Model', slide)
    assert refused.error in slide
    # The call that was sent after the repair is marked as executed, and only it.
    executes = [s for s in slides if 'class="mark-execute">EXECUTE<' in s]
    assert len(executes) == Step.objects.filter(turn=turn, kind="tool", exchanges__label="tools/call").count()


def _shown_choices(text: str) -> list[str]:
    return re.findall(r'class="tool-choice-sent"[^>]*>tool_choice <code>([^<]*)</code>', html.unescape(text))


@pytest.mark.parametrize("paradigm", ["prompt_xml", "prompt_json", "structured", "intent"])
@pytest.mark.parametrize("mode", ["required", "named"])
def test_a_forced_tool_choice_is_shown_relaxed_after_the_first_call(paradigm: str, mode: str) -> None:
    alice = UserFactory(username="alice")
    preference_set(user=alice, teaching=True)
    turn = _run(
        alice,
        WEATHER,
        paradigm=paradigm,
        tool_choice=mode,
        tool_choice_name="demo/get_weather_forecast" if mode == "named" else "",
    )
    assert turn.status == "done", turn.error
    rows = list(Step.objects.filter(turn=turn, exchanges__channel="llm").distinct().order_by("seq"))
    first_tool = min(s.seq for s in Step.objects.filter(turn=turn, kind="tool"))
    before = [row for row in rows if row.seq < first_tool]
    after = [row for row in rows if row.seq > first_tool]
    assert before and after, [(r.seq, r.kind) for r in rows]

    page = _signed_in(alice).get(reverse("inspector-conversation", args=[turn.conversation.public_id]))
    shown = _shown_choices(page.content.decode())

    assert len(shown) == len(rows), shown
    assert all(value.startswith(mode) for value in shown[: len(before)]), shown
    assert all(value.startswith("auto") for value in shown[len(before) :]), shown
    # The step-through's request slides say the same.
    titles = [
        re.search(r"tool_choice ([^<]+)</h1>", s).group(1)  # type: ignore[union-attr]
        for s in map(html.unescape, _slides(_signed_in(alice), turn))
        if _layer(s) == "request"
    ]
    assert [t.split(" ")[0] for t in titles] == [v.split(" ")[0] for v in shown], (titles, shown)
