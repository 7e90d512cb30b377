"""Replay and diff: a recorded turn asked again against today's servers and model profile, on
real parts (the demo model served in-process, the bundled stdio demo server), and what differs
shown step by step — the tools offered, the calls chosen, their arguments and results."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from conversations.models import Conversation, Step, Turn
from conversations.presentation import replay_diff, tool_list_diff
from conversations.runner import turn_run
from conversations.services import (
    ReplayError,
    conversation_start,
    demo_profile_ensure,
    turn_replay,
    turn_start,
)
from servers import gateway
from servers.services import demo_server_ensure
from tests.factories import ConversationFactory, StepFactory, TurnFactory, UserFactory

WEATHER = "What will the weather be like in Beijing tomorrow?"
HOSTILE = "<script>alert('owned')</script>"


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


@pytest.fixture
def alice() -> User:
    return UserFactory(username="alice")


def recorded_turn(owner: User, question: str = WEATHER) -> Turn:
    _, turn = conversation_start(
        owner=owner,
        model_profile=demo_profile_ensure(),
        question=question,
        servers=[demo_server_ensure()],
        dispatch=False,
    )
    turn_run(turn_id=turn.pk)
    turn.refresh_from_db()
    assert turn.status == Turn.Status.DONE, turn.error
    return turn


def replayed(turn: Turn, actor: User) -> Turn:
    _, replay = turn_replay(turn=turn, actor=actor, dispatch=False)
    turn_run(turn_id=replay.pk)
    replay.refresh_from_db()
    return replay


# --- on real parts ---------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_replaying_an_unchanged_setup_shows_the_same_tools_calls_arguments_and_results(alice: User) -> None:
    original = recorded_turn(alice)

    replay = replayed(original, alice)
    diff = replay_diff(original=original, replay=replay)

    assert replay.conversation.replay_of == original
    assert diff.tools.same and diff.tools.unchanged == len(original.tools) > 0
    assert len(diff.calls) == 1
    call = diff.calls[0]
    assert call.tool.original == call.tool.replay == "demo/get_weather_forecast"
    assert call.arguments.same and isinstance(call.arguments.original, dict)
    assert "Beijing" in str(call.arguments.original)
    assert call.result.same and call.result.original is not None
    assert diff.status.same and diff.answer.same and diff.answer.original
    assert diff.same


@pytest.mark.django_db(transaction=True)
def test_a_changed_tool_list_is_detected_added_removed_and_changed_schema(alice: User) -> None:
    original = recorded_turn(alice)
    tools = copy.deepcopy(original.tools)
    dropped = tools.pop()  # the replay will offer it again: "added"
    tools[0]["inputSchema"]["properties"]["legacy_flag"] = {"type": "boolean"}
    tools[0]["description"] = f"Old words {HOSTILE}"
    tools.append({**copy.deepcopy(tools[1]), "name": "retired_tool", "provider_name": "demo__retired_tool"})
    Turn.objects.filter(pk=original.pk).update(tools=tools)
    original.refresh_from_db()

    replay = replayed(original, alice)
    diff = replay_diff(original=original, replay=replay)

    assert diff.tools.added == [f"demo/{dropped['name']}"]
    assert diff.tools.removed == ["demo/retired_tool"]
    [change] = diff.tools.changed
    assert change.tool == f"demo/{tools[0]['name']}"
    assert change.description is not None and change.description.original == f"Old words {HOSTILE}"
    assert change.schema is not None and change.schema.removed == 3 and change.schema.added == 0
    assert any(op == "-" and "legacy_flag" in line for op, line in change.schema.lines)
    assert not diff.same


@pytest.mark.django_db(transaction=True)
def test_the_replay_page_shows_the_differences_step_by_step_with_hostile_text_escaped(alice: User) -> None:
    original = recorded_turn(alice)
    tool_step = Step.objects.get(turn=original, kind=Step.Kind.TOOL)
    Step.objects.filter(pk=tool_step.pk).update(
        arguments={"city": HOSTILE}, result={"content": [{"type": "text", "text": HOSTILE}]}
    )
    replay = replayed(original, alice)
    client = Client()
    client.force_login(alice)

    response = client.get(reverse("inspector-conversation", args=[replay.conversation.public_id]))

    html = response.content.decode()
    assert response.status_code == 200
    assert "Differences from the original turn" in html
    assert 'id="call-diff-1"' in html and "demo/get_weather_forecast" in html
    assert 'arguments <span class="badge tone-error">different</span>' in html
    assert 'result <span class="badge tone-error">different</span>' in html
    assert 'answer <span class="badge tone-ok">equal</span>' in html
    assert "<script>alert" not in html
    assert "&lt;script&gt;alert(" in html


@pytest.mark.django_db(transaction=True)
def test_a_follow_up_turn_is_replayed_without_its_history(alice: User) -> None:
    first = recorded_turn(alice)
    second = turn_start(conversation=first.conversation, question="And in Paris?", dispatch=False)
    turn_run(turn_id=second.pk)
    second.refresh_from_db()

    conversation, replay = turn_replay(turn=second, actor=alice, dispatch=False)

    assert conversation.title.endswith("· turn 2")
    assert [t.question for t in conversation.turns.all()] == ["And in Paris?"]
    assert replay.seq == 1


@pytest.mark.django_db(transaction=True)
def test_the_replay_command_runs_the_replay_here_and_prints_the_differences(alice: User) -> None:
    original = recorded_turn(alice)
    Step.objects.filter(turn=original, kind=Step.Kind.TOOL).update(arguments={"city": "Shanghai"})
    out = StringIO()

    call_command("replay", str(original.pk), "--user", "alice", stdout=out)

    replay = Conversation.objects.get(replay_of=original)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith(f"replayed turn 1 of “{original.conversation.title}” as {replay.public_id}")
    assert lines[1].startswith("tools offered: the same")
    assert lines[2] == "call 1: demo/get_weather_forecast · arguments DIFFERENT · result equal"
    assert lines[3] == '    arguments was {"city": "Shanghai"}'
    assert lines[-1] == "differs"


@pytest.mark.django_db
def test_the_replay_command_explains_a_turn_it_cannot_replay(alice: User) -> None:
    turn = TurnFactory(conversation=ConversationFactory(owner=alice), status="running")

    with pytest.raises(CommandError, match="has not finished yet"):
        call_command("replay", str(turn.pk), "--user", "alice")
    with pytest.raises(CommandError, match="no turn 999999"):
        call_command("replay", "999999", "--user", "alice")


# --- the diff on hand-built turns --------------------------------------------------------------


def _turn_with_calls(calls: list[tuple[str, Any, Any]], **fields: Any) -> Turn:
    turn = TurnFactory(**fields)
    decide = StepFactory(turn=turn)
    for tool, arguments, result in calls:
        StepFactory(
            turn=turn,
            parent=decide,
            kind=Step.Kind.TOOL,
            server_name="demo",
            tool_name=tool,
            arguments=arguments,
            result=result,
        )
    return turn


@pytest.mark.django_db
def test_calls_are_aligned_by_order_and_a_missing_call_is_shown_as_none() -> None:
    original = _turn_with_calls(
        [
            ("get_weather_forecast", {"city": "Paris"}, {"t": 1}),
            ("calculate", {"expression": "1+1"}, {"t": 2}),
        ]
    )
    replay = _turn_with_calls([("get_weather_forecast", {"city": "Lyon"}, {"t": 1})], answer="Cloudy.")

    diff = replay_diff(original=original, replay=replay)

    first, second = diff.calls
    assert first.tool.same and not first.arguments.same and first.result.same and not first.same
    assert (second.tool.original, second.tool.replay) == ("demo/calculate", None)
    assert second.arguments.replay is None and not second.same
    assert not diff.answer.same and diff.answer.replay == "Cloudy."


@pytest.mark.django_db
def test_a_call_that_was_never_sent_compares_by_its_error() -> None:
    original = _turn_with_calls([("launch", {}, None)])
    replay = _turn_with_calls([("launch", {}, None)])
    Step.objects.filter(turn=original, kind="tool").update(error="not sent: unknown tool 'launch'")
    Step.objects.filter(turn=replay, kind="tool").update(error="not sent: unknown tool 'launch'")

    [call] = replay_diff(original=original, replay=replay).calls

    assert call.result.same and call.result.original == "not sent: unknown tool 'launch'"


def test_tool_lists_compare_by_server_and_name() -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    before = [
        {"server": "demo", "name": "forecast", "inputSchema": schema, "description": "d"},
        {"server": "other", "name": "forecast", "inputSchema": schema, "description": "d"},
    ]
    after = [
        {"server": "demo", "name": "forecast", "inputSchema": schema, "description": "d"},
        {"server": "third", "name": "forecast", "inputSchema": schema, "description": "d"},
    ]

    diff = tool_list_diff(original=before, replay=after)

    assert (diff.added, diff.removed, diff.changed, diff.unchanged) == (
        ["third/forecast"],
        ["other/forecast"],
        [],
        1,
    )


@pytest.mark.django_db
def test_an_unfinished_turn_cannot_be_replayed(alice: User) -> None:
    turn = TurnFactory(conversation=ConversationFactory(owner=alice), status="queued")

    with pytest.raises(ReplayError, match="not finished"):
        turn_replay(turn=turn, actor=alice, dispatch=False)
    assert not Conversation.objects.filter(replay_of=turn).exists()
