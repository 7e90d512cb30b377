"""Celery mode, a real worker on a private Redis: a queued turn whose task the broker lost (a
restart without persistence) is handed to the workers again and runs, once; a turn handed again
while its first task still waits in the broker runs once too."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import redis
from celery import Celery
from django.contrib.auth.models import User
from django.utils import timezone

from conversations.lifecycle import queued_bounds, turns_recover_queued
from conversations.models import Step, Turn
from conversations.services import conversation_start, demo_profile_ensure
from conversations.tasks import run_turn
from servers import gateway
from servers.services import demo_server_ensure
from tests.conftest import running_celery_worker, worker_log_path
from tests.services import PrivateRedis
from tests.support import free_port, wait_until

WEATHER = "What will the weather be like in Beijing tomorrow?"
# Celery's default queue, a Redis list of the messages no worker has taken yet.
QUEUE = "celery"

pytestmark = [pytest.mark.celery, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(free_port(), tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


def _send(broker_url: str, turn_id: int) -> None:
    """What ``turn_start`` sends on commit, through ``broker_url`` (the test process's own broker
    is the shared Redis)."""
    sender = Celery("sender", broker=broker_url, set_as_current=False)
    try:
        sender.send_task(run_turn.name, args=(turn_id,))
    finally:
        sender.close()


def _queued_turn(broker_url: str) -> Turn:
    alice, _ = User.objects.get_or_create(username="alice")
    _, turn = conversation_start(
        owner=alice,
        model_profile=demo_profile_ensure(),
        question=WEATHER,
        servers=[demo_server_ensure()],
        dispatch=False,
    )
    _send(broker_url, turn.pk)
    return turn


def _as_if_queued_for(turn: Turn, seconds: float) -> None:
    Turn.objects.filter(pk=turn.pk).update(created_at=timezone.now() - timedelta(seconds=seconds))


def _ended(turn: Turn, seconds: float = 90) -> Turn:
    assert wait_until(lambda: Turn.objects.get(pk=turn.pk).is_finished, seconds), (
        f"turn {turn.pk} still {Turn.objects.get(pk=turn.pk).status} after {seconds} s"
    )
    turn.refresh_from_db()
    return turn


def _top_level_kinds(turn: Turn) -> list[str]:
    return list(
        Step.objects.filter(turn=turn, parent__isnull=True).order_by("seq").values_list("kind", flat=True)
    )


def _worker_logged(text: str) -> str:
    assert wait_until(lambda: text in worker_log_path().read_text(errors="replace"), 30), text
    return worker_log_path().read_text(errors="replace")


def test_a_turn_whose_task_the_broker_lost_runs_once_when_a_worker_comes(private_redis: PrivateRedis) -> None:
    # No worker yet: the task waits in Redis, which then restarts without persistence.
    turn = _queued_turn(private_redis.url)
    assert redis.Redis.from_url(private_redis.url).llen(QUEUE) == 1
    private_redis.restart()
    assert redis.Redis.from_url(private_redis.url).dbsize() == 0  # the task is gone
    again_after, fail_after = queued_bounds()
    _as_if_queued_for(turn, again_after + 5)
    assert again_after + 5 < fail_after

    with running_celery_worker(private_redis.url, TURN_REAP_SECONDS="0.5"):
        turn = _ended(turn)
        log = _worker_logged(f"turn {turn.pk} done in ")

    assert turn.status == Turn.Status.DONE, turn.error
    assert _top_level_kinds(turn) == ["connect", "decide", "answer"]  # it ran once
    assert log.count(f"turn {turn.pk} done in ") == 1


def test_a_turn_handed_again_while_its_first_task_still_waits_runs_once(private_redis: PrivateRedis) -> None:
    control = Celery("control", broker=private_redis.url, set_as_current=False)
    # The worker's own check runs once, as it starts (before the turn exists): this test hands
    # the turn again itself, at a known moment.
    with running_celery_worker(private_redis.url, TURN_REAP_SECONDS="3600"):
        try:
            # The worker stops taking tasks, so the first one waits in Redis.
            assert control.control.cancel_consumer(QUEUE, reply=True, timeout=10)
            turn = _queued_turn(private_redis.url)
            again_after, _ = queued_bounds()
            _as_if_queued_for(turn, again_after + 5)

            first = turns_recover_queued(dispatch=lambda pk: _send(private_redis.url, pk))
            second = turns_recover_queued(dispatch=lambda pk: _send(private_redis.url, pk))

            assert first.redispatched == [turn.pk] and second.redispatched == []
            assert redis.Redis.from_url(private_redis.url).llen(QUEUE) == 2
            assert control.control.add_consumer(QUEUE, reply=True, timeout=10)
            turn = _ended(turn)
            log = _worker_logged(f"turn {turn.pk} not claimed in ")
            log = _worker_logged(f"turn {turn.pk} done in ")
        finally:
            control.close()

    assert turn.status == Turn.Status.DONE, turn.error
    assert _top_level_kinds(turn) == ["connect", "decide", "answer"]
    assert log.count(f"turn {turn.pk} done in ") == 1
    assert log.count(f"turn {turn.pk} not claimed in ") == 1
