"""A real Celery worker keeps serving turns when its Redis restarts under it or Postgres drops its
connections, and logs how each turn ended."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import Celery
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection

from conversations.models import Step, Turn
from conversations.services import conversation_start, demo_profile_ensure
from conversations.tasks import run_turn
from servers import gateway
from servers.services import demo_server_ensure
from tests.conftest import running_celery_worker, worker_answers, worker_log_path
from tests.services import PrivateRedis

WEATHER = "What will the weather be like in Beijing tomorrow?"
PRIVATE_REDIS_PORT = 7301


@pytest.fixture
def private_redis() -> Iterator[PrivateRedis]:
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", PRIVATE_REDIS_PORT)) == 0:
            pytest.fail(f"port {PRIVATE_REDIS_PORT} is taken: another private redis-server is still running")
    server = PrivateRedis(PRIVATE_REDIS_PORT, Path(settings.VAR_DIR))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


def _queue_turn(broker_url: str) -> Turn:
    """A new conversation whose first turn is sent to the worker through ``broker_url``."""
    alice, _ = User.objects.get_or_create(username="alice")
    _, turn = conversation_start(
        owner=alice,
        model_profile=demo_profile_ensure(),
        question=WEATHER,
        servers=[demo_server_ensure()],
        dispatch=False,
    )
    sender = Celery("sender", broker=broker_url, set_as_current=False)
    try:
        sender.send_task(run_turn.name, args=(turn.pk,))
    finally:
        sender.close()
    return turn


def _wait_status(turn: Turn, statuses: set[str], seconds: float = 90) -> Turn:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        turn.refresh_from_db()
        if turn.status in statuses:
            return turn
        time.sleep(0.1)
    raise AssertionError(f"turn {turn.pk} still {turn.status} after {seconds} s (wanted {statuses})")


def _top_level_kinds(turn: Turn) -> list[str]:
    return list(
        Step.objects.filter(turn=turn, parent__isnull=True).order_by("seq").values_list("kind", flat=True)
    )


def _wait_for_log(text: str, seconds: float = 30) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        log = worker_log_path().read_text(errors="replace")
        if text in log:
            return log
        time.sleep(0.1)
    raise AssertionError(f"the worker never logged {text!r}")


@pytest.mark.celery
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_worker_keeps_serving_turns_when_its_redis_restarts_under_a_running_turn(
    private_redis: PrivateRedis,
) -> None:
    # Each model call takes a second, so the restart lands while the first turn runs.
    with running_celery_worker(private_redis.url, DEMO_MODEL_LATENCY_SECONDS="1") as worker:
        before = _queue_turn(private_redis.url)
        _wait_status(before, {Turn.Status.RUNNING})

        private_redis.restart()

        assert worker_answers(private_redis.url, worker, within=60), "the worker did not reconnect"
        before = _wait_status(before, {Turn.Status.DONE, Turn.Status.FAILED, Turn.Status.INTERRUPTED})
        after = _wait_status(_queue_turn(private_redis.url), {Turn.Status.DONE, Turn.Status.FAILED})

        assert worker.poll() is None
        log = _wait_for_log(f"turn {after.pk} done")
    assert before.status == Turn.Status.DONE, before.error
    assert after.status == Turn.Status.DONE, after.error
    # Each turn ran once: one connect, one decision, one answer.
    assert _top_level_kinds(before) == ["connect", "decide", "answer"]
    assert _top_level_kinds(after) == ["connect", "decide", "answer"]
    assert "Unrecoverable error" not in log
    assert f"turn {before.pk} done in " in log


WORKER_SESSIONS = "inspector-test-worker"


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_a_worker_keeps_serving_turns_after_postgres_drops_its_connections(redis_url: str) -> None:
    # The worker's sessions carry a name of their own (libpq's PGAPPNAME): only they are dropped.
    # Dropping every other session of the test database dropped this test process's own pooled
    # connections too, and the next test in this process drew dead ones: psycopg's pool checks
    # one, discards it and waits longer before each next try, and gave up after 30 s.
    with running_celery_worker(redis_url, PGAPPNAME=WORKER_SESSIONS) as worker:
        first = _wait_status(_queue_turn(redis_url), {Turn.Status.DONE, Turn.Status.FAILED})
        with connection.cursor() as cursor:
            # What a Postgres restart does to the worker's pooled connections, on this test
            # database only: the shared server keeps running.
            cursor.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = current_database() AND application_name = %s",
                [WORKER_SESSIONS],
            )
            (terminated,) = cursor.fetchone()

        second = _wait_status(_queue_turn(redis_url), {Turn.Status.DONE, Turn.Status.FAILED})

        assert worker.poll() is None
        log = _wait_for_log(f"turn {second.pk} done")
    assert terminated >= 1
    assert first.status == Turn.Status.DONE, first.error
    assert second.status == Turn.Status.DONE, second.error
    assert _top_level_kinds(second) == ["connect", "decide", "answer"]
    # The pool lent no dead connection: no attempt failed and was retried.
    assert "(task RETRY)" not in log
    assert f"turn {first.pk} done in " in log
