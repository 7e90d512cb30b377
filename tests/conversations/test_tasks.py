"""A real Celery worker on the real Redis runs a turn queued by the web side, end to end."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from datetime import timedelta

import psycopg
import pytest
from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection
from django.utils import timezone

from conversations.models import Exchange, Step, Turn
from conversations.runner import turn_abandon, turn_run
from conversations.services import conversation_start, demo_profile_ensure
from conversations.tasks import run_turn
from inspector.routing import websocket_urlpatterns
from servers import gateway
from servers.services import demo_server_ensure
from tests.conftest import running_celery_worker, worker_log_path

WEATHER = "What will the weather be like in Beijing tomorrow?"


@pytest.fixture(autouse=True)
def _close_sessions() -> None:
    yield
    gateway.close_all()


def _wait_finished(turn: Turn, seconds: float = 60) -> Turn:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        turn.refresh_from_db()
        if turn.is_finished:
            return turn
        time.sleep(0.1)
    raise AssertionError(f"turn still {turn.status} after {seconds} s")


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_a_worker_runs_a_turn_queued_on_commit(celery_worker: subprocess.Popen[str]) -> None:
    alice = User.objects.create_user("alice", password="pw-alice-123")
    conversation, turn = conversation_start(
        owner=alice, model_profile=demo_profile_ensure(), question=WEATHER, servers=[demo_server_ensure()]
    )

    turn = _wait_finished(turn)

    assert turn.status == Turn.Status.DONE, turn.error
    assert "Beijing" in turn.answer
    kinds = list(Step.objects.filter(turn=turn, parent__isnull=True).values_list("kind", flat=True))
    assert kinds == ["connect", "decide", "answer"]
    call = Exchange.objects.get(turn=turn, label="tools/call")
    assert json.loads(call.request_body)["params"]["arguments"] == {"city": "Beijing", "day": "tomorrow"}
    assert json.loads(call.response_body)["result"]["structuredContent"]["city"] == "Beijing"
    llm = Exchange.objects.filter(turn=turn, channel="llm").first()
    assert llm is not None and "tools" in json.loads(llm.request_body)


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("async_db_connections")
async def test_a_websocket_client_sees_the_workers_steps_through_redis(
    celery_worker: subprocess.Popen[str],
) -> None:
    alice = await User.objects.acreate(username="alice")
    profile = await sync_to_async(demo_profile_ensure)()
    server = await sync_to_async(demo_server_ensure)()
    conversation, turn = await sync_to_async(conversation_start)(
        owner=alice, model_profile=profile, question=WEATHER, servers=[server], dispatch=False
    )
    communicator = WebsocketCommunicator(
        URLRouter(websocket_urlpatterns), f"/ws/conversations/{conversation.public_id}/"
    )
    communicator.scope["user"] = alice
    connected, _ = await communicator.connect()
    assert connected

    await sync_to_async(run_turn.delay, thread_sensitive=False)(turn.pk)

    rows: set[int] = set()
    status = ""
    deadline = time.monotonic() + 60
    while status != "done" and time.monotonic() < deadline:
        message = await communicator.receive_json_from(timeout=30)
        if message["type"] == "row":
            rows.add(message["step_id"])
        elif message["type"] == "turn":
            status = message["status"]
    await communicator.disconnect()
    assert status == "done"
    assert len(rows) == 3


@pytest.mark.django_db(transaction=True)
def test_running_a_turn_twice_does_not_run_it_again() -> None:
    alice = User.objects.create_user("alice")
    _, turn = conversation_start(
        owner=alice,
        model_profile=demo_profile_ensure(),
        question=WEATHER,
        servers=[demo_server_ensure()],
        dispatch=False,
    )
    run_turn(turn.pk)
    steps = Step.objects.filter(turn=turn).count()

    turn_run(turn_id=turn.pk)

    assert Step.objects.filter(turn=turn).count() == steps


@pytest.mark.django_db(transaction=True)
def test_a_turn_redelivered_while_its_runner_heart_beats_is_left_running() -> None:
    alice = User.objects.create_user("alice")
    _, turn = conversation_start(
        owner=alice,
        model_profile=demo_profile_ensure(),
        question=WEATHER,
        servers=[demo_server_ensure()],
        dispatch=False,
    )
    Turn.objects.filter(pk=turn.pk).update(status=Turn.Status.RUNNING, heartbeat_at=timezone.now())

    run_turn(turn.pk)

    turn.refresh_from_db()
    assert turn.status == Turn.Status.RUNNING
    assert not turn.steps.exists()


@pytest.mark.django_db
def test_a_turn_redelivered_after_its_runner_stopped_heart_beating_is_marked_interrupted() -> None:
    alice = User.objects.create_user("alice")
    _, turn = conversation_start(
        owner=alice,
        model_profile=demo_profile_ensure(),
        question=WEATHER,
        servers=[demo_server_ensure()],
        dispatch=False,
    )
    silent_since = timezone.now() - timedelta(seconds=settings.TURN_HEARTBEAT_WINDOW_SECONDS + 1)
    Turn.objects.filter(pk=turn.pk).update(status=Turn.Status.RUNNING, heartbeat_at=silent_since)

    run_turn(turn.pk)

    turn.refresh_from_db()
    assert turn.status == Turn.Status.INTERRUPTED
    assert "stopped" in turn.error and "heartbeat" in turn.error


def _spanned_requests(turn: Turn) -> list[int]:
    """Model requests the turn's worker left indexed only in part (as a worker that died would)."""
    rows = [
        Exchange.objects.create(turn=turn, seq=seq, channel="llm", label="POST", request_body="x " * 20)
        for seq in (1, 2, 3)
    ]
    Exchange.objects.filter(pk__in=[row.pk for row in rows[1:]]).update(search_start=2, search_length=4)
    return [row.pk for row in rows]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("ending", ["redelivered", "abandoned"])
def test_a_turn_that_ends_without_its_runner_has_its_last_request_indexed_whole(ending: str) -> None:
    alice = User.objects.create_user("alice")
    _, turn = conversation_start(
        owner=alice, model_profile=demo_profile_ensure(), question=WEATHER, servers=[], dispatch=False
    )
    silent_since = timezone.now() - timedelta(seconds=settings.TURN_HEARTBEAT_WINDOW_SECONDS + 1)
    Turn.objects.filter(pk=turn.pk).update(status=Turn.Status.RUNNING, heartbeat_at=silent_since)
    first, middle, last = _spanned_requests(turn)

    if ending == "redelivered":
        run_turn(turn.pk)
    else:
        assert turn_abandon(turn_id=turn.pk, reason="gone")

    spans = dict(Exchange.objects.filter(turn=turn).values_list("pk", "search_start"))
    assert spans == {first: None, middle: 2, last: None}


@pytest.fixture
def starved_role(transactional_db: None) -> Iterator[tuple[str, list[psycopg.Connection]]]:
    """A database role allowed two connections, both held by the test: a worker using it finds
    Postgres refusing it ("too many connections") until the test lets go of them."""
    db = settings.DATABASES["default"]
    role = f"starved_{os.getpid()}"
    admin = connection.cursor()
    admin.execute(f'CREATE ROLE "{role}" LOGIN CONNECTION LIMIT 2')
    admin.execute(f'GRANT ALL ON ALL TABLES IN SCHEMA public TO "{role}"')
    admin.execute(f'GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO "{role}"')
    held = [
        psycopg.connect(
            host=db.get("HOST") or "127.0.0.1", port=db.get("PORT") or 5432, user=role, dbname=db["NAME"]
        )
        for _ in range(2)
    ]
    try:
        yield role, held
    finally:
        for conn in held:
            conn.close()
        admin.execute(f'DROP OWNED BY "{role}"')
        admin.execute(f'DROP ROLE "{role}"')
        admin.close()


def _starved_worker_env(role: str, retries: int) -> dict[str, str]:
    db = settings.DATABASES["default"]
    return {
        "DATABASE_URL": f"postgres://{role}@{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}/{db['NAME']}",
        "DATABASE_POOL_MIN_SIZE": "1",
        "DATABASE_POOL_MAX_SIZE": "2",
        "DATABASE_POOL_TIMEOUT_SECONDS": "1",
        "TURN_DATABASE_RETRIES": str(retries),
        "TURN_RETRY_BACKOFF_MAX_SECONDS": "2",
    }


def _wait_for_log(text: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if text in worker_log_path().read_text():
            return
        time.sleep(0.1)
    raise AssertionError(f"the worker never logged {text!r}")


@pytest.mark.celery
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_turn_refused_a_database_connection_is_retried_and_then_runs(
    redis_url: str, starved_role: tuple[str, list[psycopg.Connection]]
) -> None:
    role, held = starved_role
    alice = User.objects.create_user("alice")
    with running_celery_worker(redis_url, **_starved_worker_env(role, retries=6)):
        _, turn = conversation_start(
            owner=alice, model_profile=demo_profile_ensure(), question=WEATHER, servers=[demo_server_ensure()]
        )
        _wait_for_log("Retry in")
        turn.refresh_from_db()
        assert turn.status == Turn.Status.QUEUED

        for conn in held:
            conn.close()
        turn = _wait_finished(turn)

    assert turn.status == Turn.Status.DONE, turn.error
    assert "Beijing" in turn.answer


@pytest.mark.celery
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_turn_that_never_gets_a_connection_is_marked_failed_with_the_reason(
    redis_url: str, starved_role: tuple[str, list[psycopg.Connection]]
) -> None:
    role, held = starved_role
    alice = User.objects.create_user("alice")
    with running_celery_worker(redis_url, **_starved_worker_env(role, retries=1)):
        _, turn = conversation_start(
            owner=alice, model_profile=demo_profile_ensure(), question=WEATHER, servers=[demo_server_ensure()]
        )
        _wait_for_log("raised unexpected")
        # The database comes back: the verdict, waiting in the queue, is written.
        for conn in held:
            conn.close()
        turn = _wait_finished(turn)

    assert turn.status == Turn.Status.FAILED
    assert turn.error.startswith("the worker could not run this turn after 1 retry: OperationalError")
    assert "couldn't get a connection" in turn.error
    assert not Step.objects.filter(turn=turn).exists()


@pytest.mark.django_db(transaction=True)
def test_abandoning_a_finished_turn_leaves_it_alone() -> None:
    alice = User.objects.create_user("alice")
    _, turn = conversation_start(
        owner=alice,
        model_profile=demo_profile_ensure(),
        question=WEATHER,
        servers=[demo_server_ensure()],
        dispatch=False,
    )
    run_turn(turn.pk)

    changed = turn_abandon(turn_id=turn.pk, reason="too late")

    turn.refresh_from_db()
    assert changed is False
    assert turn.status == Turn.Status.DONE
    assert turn.error == ""
