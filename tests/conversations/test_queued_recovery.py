"""A queued turn whose task was lost (the broker restarted without persistence before a worker took
it) is handed to the runner once more, then failed with the reason if it still does not start:
never left queued. The Celery end to end is in ``test_queued_recovery_celery.py``."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from pytest_django.fixtures import Settings

from conversations.execution import queued_turns_check, turn_dispatch
from conversations.lifecycle import QueuedScan, queued_bounds, turn_claim, turns_recover_queued
from conversations.models import Step, Turn
from conversations.record.verification import conversation_verify
from conversations.runner import turn_run
from conversations.services import conversation_start, demo_profile_ensure, turn_start
from servers import gateway
from servers.services import demo_server_ensure
from tests.support import wait_until

WEATHER = "What will the weather be like in Beijing tomorrow?"


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


@pytest.fixture
def alice(db: None) -> User:
    return User.objects.create_user("alice")


def _queued(owner: User, *, for_seconds: float = 0.0) -> Turn:
    """A turn whose task nothing took, created that long ago."""
    _, turn = conversation_start(
        owner=owner,
        model_profile=demo_profile_ensure(),
        question=WEATHER,
        servers=[demo_server_ensure()],
        dispatch=False,
    )
    Turn.objects.filter(pk=turn.pk).update(created_at=timezone.now() - timedelta(seconds=for_seconds))
    turn.refresh_from_db()
    return turn


def _past_again() -> float:
    again_after, fail_after = queued_bounds()
    assert again_after + 5 < fail_after
    return again_after + 5


def _past_fail() -> float:
    return queued_bounds()[1] + 5


def test_the_bounds_are_two_minutes_and_an_hour_unless_set(settings: Settings) -> None:
    assert queued_bounds() == (120.0, 3600.0)
    settings.TURN_QUEUED_REDISPATCH_SECONDS = 30
    settings.TURN_QUEUED_FAIL_SECONDS = 600

    assert queued_bounds() == (30.0, 600.0)


def test_a_turn_queued_longer_than_the_bound_is_handed_on_again_once(alice: User) -> None:
    overdue = _queued(alice, for_seconds=_past_again())
    recent = _queued(alice)
    sent: list[int] = []

    first = turns_recover_queued(dispatch=sent.append)
    second = turns_recover_queued(dispatch=sent.append)

    assert first.redispatched == [overdue.pk] and first.failed == []
    assert second.redispatched == [] and second.failed == []
    assert sent == [overdue.pk]
    assert Turn.objects.get(pk=overdue.pk).status == Turn.Status.QUEUED
    assert Turn.objects.get(pk=recent.pk).heartbeat_at is None  # not handed on: not overdue


def test_a_turn_whose_task_could_not_be_sent_again_is_sent_at_the_next_check(alice: User) -> None:
    overdue = _queued(alice, for_seconds=_past_again())

    def broker_down(turn_id: int) -> None:
        raise ConnectionError("the broker is down")

    with pytest.raises(ConnectionError):
        turns_recover_queued(dispatch=broker_down)
    sent: list[int] = []
    assert turns_recover_queued(dispatch=sent.append).redispatched == [overdue.pk]
    assert sent == [overdue.pk]


@pytest.mark.django_db(transaction=True)
def test_a_turn_handed_on_again_runs_once_though_its_first_task_arrives_too(settings: Settings) -> None:
    settings.TURN_RUNNER = "embedded"
    alice = User.objects.create_user("alice")
    turn = _queued(alice, for_seconds=_past_again())

    assert turns_recover_queued(dispatch=turn_dispatch).redispatched == [turn.pk]
    turn_dispatch(turn.pk)  # the first task was not lost after all

    assert wait_until(lambda: Turn.objects.get(pk=turn.pk).is_finished, 60)
    turn.refresh_from_db()
    assert turn.status == Turn.Status.DONE, turn.error
    kinds = Step.objects.filter(turn=turn, parent__isnull=True).order_by("seq").values_list("kind", flat=True)
    assert list(kinds) == ["connect", "decide", "answer"]


def test_a_turn_still_queued_after_the_longer_bound_fails_with_a_step_saying_why(alice: User) -> None:
    turn = _queued(alice, for_seconds=_past_fail())
    sent: list[int] = []

    recovery = turns_recover_queued(dispatch=sent.append)

    assert recovery.failed == [turn.pk] and recovery.redispatched == [] and sent == []
    turn.refresh_from_db()
    assert turn.status == Turn.Status.FAILED and turn.finished_at is not None
    assert turn.error.startswith("the turn never started: no worker took it in the ")
    assert "ask again once a worker is up" in turn.error
    (step,) = Step.objects.filter(turn=turn)
    assert (step.kind, step.title, step.error) == ("error", "the turn never started", turn.error)
    assert conversation_verify(conversation=turn.conversation).intact  # sealed as it ended
    assert turn_run(turn_id=turn.pk) == "not claimed"  # a task arriving later runs nothing
    # The conversation takes the next question.
    assert turn_start(conversation=turn.conversation, question=WEATHER, dispatch=False).seq == 2


def test_a_turn_handed_on_again_says_so_when_it_fails_later(alice: User) -> None:
    turn = _queued(alice, for_seconds=_past_again())
    turns_recover_queued(dispatch=lambda turn_id: None)
    Turn.objects.filter(pk=turn.pk).update(created_at=timezone.now() - timedelta(seconds=_past_fail()))

    assert turns_recover_queued(dispatch=lambda turn_id: None).failed == [turn.pk]
    assert "(its task was sent again on the way)" in Turn.objects.get(pk=turn.pk).error


def test_running_and_ended_turns_are_left_alone(alice: User) -> None:
    running = _queued(alice, for_seconds=_past_fail())
    assert turn_claim(turn_id=running.pk) is not None
    ended = _queued(alice, for_seconds=_past_fail())
    Turn.objects.filter(pk=ended.pk).update(status=Turn.Status.DONE)

    recovery = turns_recover_queued(dispatch=lambda turn_id: None)

    assert recovery.redispatched == [] and recovery.failed == []
    assert Turn.objects.get(pk=running.pk).status == Turn.Status.RUNNING
    assert Turn.objects.get(pk=ended.pk).status == Turn.Status.DONE


def test_a_scan_reads_on_from_the_lowest_turn_still_queued_and_finds_new_ones(alice: User) -> None:
    scan = QueuedScan()
    waiting = _queued(alice)
    sent: list[int] = []
    for _ in range(3):
        turns_recover_queued(dispatch=sent.append, scan=scan)
    assert scan.floor == waiting.pk  # still queued, so still read
    Turn.objects.filter(pk=waiting.pk).update(status=Turn.Status.DONE)
    turns_recover_queued(dispatch=sent.append, scan=scan)
    turns_recover_queued(dispatch=sent.append, scan=scan)
    assert scan.floor > waiting.pk  # nothing below it is queued any more

    later = _queued(alice, for_seconds=_past_again())

    assert turns_recover_queued(dispatch=sent.append, scan=scan).redispatched == [later.pk]
    assert sent == [later.pk]


def test_the_serving_check_leaves_queued_turns_to_the_embedded_resume(
    alice: User, settings: Settings
) -> None:
    settings.TURN_RUNNER = "embedded"
    turn = _queued(alice, for_seconds=_past_fail())

    queued_turns_check()

    turn.refresh_from_db()
    assert turn.status == Turn.Status.QUEUED and turn.heartbeat_at is None
