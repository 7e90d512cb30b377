"""A turn's life on real parts (the database, the demo model served in-process, real stdio MCP
servers): claimed once, heart-beating while it runs, marked interrupted when its runner dies,
cancelled on request with everything recorded so far kept."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.utils import timezone
from pytest_django.fixtures import Settings

from conversations.execution import turns_resume_queued
from conversations.lifecycle import lifecycle_stop, turn_claim, turn_unwatch, turn_watch, turns_reap_stale
from conversations.models import Conversation, Exchange, ModelProfile, Step, Turn
from conversations.record.recording import TurnRecorder
from conversations.record.verification import conversation_verify
from conversations.runner import turn_run
from conversations.services import (
    TurnInProgress,
    TurnNotCancellable,
    conversation_export,
    conversation_import,
    conversation_start,
    demo_format_profiles_ensure,
    demo_profile_ensure,
    turn_cancel,
    turn_start,
)
from servers import gateway
from servers.models import McpServer
from servers.services import demo_server_ensure
from tests.conversations.hostile_model import SILENT, HostileModel
from tests.support import other_connection, wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
WEATHER = "What will the weather be like in Beijing tomorrow?"
# How long a test waits for a turn that was told to stop: the bound.
STOP_BOUND_SECONDS = 10.0


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


@pytest.fixture
def alice(db: None) -> User:
    # Staff: a stdio fixture server is started on her behalf.
    return User.objects.create_user("alice", is_staff=True)


@pytest.fixture
def fast_lifecycle(settings: Settings) -> Settings:
    settings.TURN_HEARTBEAT_SECONDS = 0.2
    settings.TURN_CANCEL_POLL_SECONDS = 0.05
    return settings


def _queued(
    owner: User, question: str = WEATHER, servers: list[McpServer] | None = None, **options: str
) -> Turn:
    _, turn = conversation_start(
        owner=owner,
        model_profile=demo_profile_ensure(),
        question=question,
        servers=servers if servers is not None else [demo_server_ensure()],
        dispatch=False,
        **options,
    )
    return turn


def _running(owner: User, *, beat_seconds_ago: float | None, runner: str = "") -> Turn:
    """A turn a runner claimed and recorded a step of, whose last heartbeat was that long ago."""
    turn = _queued(owner)
    beat = timezone.now() - timedelta(seconds=beat_seconds_ago) if beat_seconds_ago is not None else None
    Turn.objects.filter(pk=turn.pk).update(
        status=Turn.Status.RUNNING, started_at=beat or timezone.now(), heartbeat_at=beat, runner=runner
    )
    turn.refresh_from_db()
    recorder = TurnRecorder(turn)
    step = recorder.step_open(kind="connect", title="connect 1 MCP server(s)")
    recorder.step_close(step, status="ok", text="demo: connected")
    recorder.step_open(kind="decide", title="ask the model")  # in flight when its runner stopped
    recorder.drain()
    return turn


# --- claiming ---------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_of_many_tasks_claiming_one_queued_turn_at_once_exactly_one_gets_it(alice: User) -> None:
    turn = _queued(alice)
    start = threading.Barrier(8)
    claims: list[int | None] = []

    def claim() -> None:
        start.wait()
        try:
            claims.append(turn_claim(turn_id=turn.pk))
        finally:
            connection.close()

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    won = [claim for claim in claims if claim is not None]
    assert len(claims) == 8 and len(won) == 1
    # The claim is what the turn now holds: every write of the winner carries it.
    assert Turn.objects.get(pk=turn.pk).claim == won[0] > 0
    turn.refresh_from_db()
    assert turn.status == Turn.Status.RUNNING and turn.heartbeat_at is not None and turn.runner


@pytest.mark.django_db(transaction=True)
def test_a_duplicate_task_for_a_turn_runs_it_once(alice: User) -> None:
    turn = _queued(alice)
    # Each on a thread that hands its pooled connection back when it ends (``_run_in_thread``).
    runs = [_run_in_thread(turn) for _ in range(2)]
    for run in runs:
        run.join()
    turn_run(turn_id=turn.pk)  # and a redelivery after it ended

    turn.refresh_from_db()
    assert turn.status == Turn.Status.DONE
    assert Step.objects.filter(turn=turn, kind="connect").count() == 1
    assert Exchange.objects.filter(turn=turn, label="tools/call").count() == 1


# --- heartbeats and stale turns ----------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_watched_turn_heart_beats_while_it_runs(alice: User, fast_lifecycle: Settings) -> None:
    turn = _running(alice, beat_seconds_ago=30)
    before = turn.heartbeat_at
    turn_watch(turn_id=turn.pk)
    try:
        assert wait_until(lambda: Turn.objects.get(pk=turn.pk).heartbeat_at != before, 5)
    finally:
        turn_unwatch(turn_id=turn.pk)
    assert Turn.objects.get(pk=turn.pk).heartbeat_at > before


@pytest.mark.django_db(transaction=True)
def test_a_running_turn_keeps_heart_beating_while_other_turns_start_all_the_time(
    alice: User, fast_lifecycle: Settings
) -> None:
    turn = _running(alice, beat_seconds_ago=30)
    before = turn.heartbeat_at
    turn_watch(turn_id=turn.pk)
    try:
        deadline = time.monotonic() + 5
        beat = False
        others = iter(range(10_000_000, 20_000_000))
        while not beat and time.monotonic() < deadline:
            other = next(others)  # a turn starting (and soon ending) in the same process
            turn_watch(turn_id=other)
            turn_unwatch(turn_id=other)
            time.sleep(0.02)
            beat = Turn.objects.get(pk=turn.pk).heartbeat_at != before
    finally:
        turn_unwatch(turn_id=turn.pk)
    assert beat


def _lifecycle_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "turn-lifecycle"]


@pytest.mark.django_db(transaction=True)
def test_the_lifecycle_thread_stops_when_told_and_a_later_turn_starts_it_again(
    alice: User, fast_lifecycle: Settings
) -> None:
    turn = _running(alice, beat_seconds_ago=30)
    turn_watch(turn_id=turn.pk)
    try:
        assert _lifecycle_threads()
        lifecycle_stop()
        # Stopped after its pass: no thread left checking a database that may be going away.
        assert not _lifecycle_threads()
        before = Turn.objects.get(pk=turn.pk).heartbeat_at
        turn_watch(turn_id=turn.pk)
        assert len(_lifecycle_threads()) == 1
        assert wait_until(lambda: Turn.objects.get(pk=turn.pk).heartbeat_at != before, 5)
    finally:
        turn_unwatch(turn_id=turn.pk)


@pytest.mark.django_db
def test_a_turn_whose_heartbeat_stopped_is_interrupted_keeping_its_steps(alice: User) -> None:
    turn = _running(alice, beat_seconds_ago=61)

    assert turns_reap_stale(window=60) == [turn.pk]

    turn.refresh_from_db()
    assert turn.status == Turn.Status.INTERRUPTED and turn.finished_at is not None
    assert "none came for 60 s" in turn.error
    connect, decide, error = Step.objects.filter(turn=turn).order_by("seq")
    assert (connect.kind, connect.status, connect.text) == ("connect", "ok", "demo: connected")
    # The call it was waiting on never ended: no longer shown as waiting, and says so.
    assert (decide.kind, decide.status, decide.finished_at) == ("decide", "error", None)
    assert decide.error.startswith("not finished: the turn was interrupted")
    assert (error.kind, error.status, error.title) == ("error", "error", "the turn was interrupted")
    assert "last heartbeat was at" in error.error
    assert conversation_verify(conversation=turn.conversation).intact  # sealed as it ended


@pytest.mark.django_db
def test_a_turn_that_heart_beat_within_the_window_is_left_running(alice: User) -> None:
    turn = _running(alice, beat_seconds_ago=59)

    assert turns_reap_stale(window=60) == []

    turn.refresh_from_db()
    assert turn.status == Turn.Status.RUNNING
    assert list(Step.objects.filter(turn=turn).values_list("kind", "status")) == [
        ("connect", "ok"),
        ("decide", "running"),
    ]


@pytest.mark.django_db
def test_a_turn_is_interrupted_once_though_checked_again(alice: User) -> None:
    turn = _running(alice, beat_seconds_ago=120)

    assert turns_reap_stale(window=60) == [turn.pk]
    assert turns_reap_stale(window=60) == []

    assert Step.objects.filter(turn=turn, kind="error").count() == 1


@pytest.mark.django_db
def test_a_turn_whose_runner_on_this_host_is_gone_is_interrupted_at_once(alice: User) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    turn = _running(alice, beat_seconds_ago=1, runner=f"{socket.gethostname()}:{gone.pid}:0badc0de")
    alive = _running(alice, beat_seconds_ago=1, runner=f"{socket.gethostname()}:{os.getppid()}:0badc0de")
    elsewhere = _running(alice, beat_seconds_ago=1, runner=f"another-host:{gone.pid}:0badc0de")

    assert turns_reap_stale(window=60) == [turn.pk]

    turn.refresh_from_db()
    assert turn.status == Turn.Status.INTERRUPTED
    assert f"pid {gone.pid}" in turn.error and "is gone" in turn.error
    statuses = Turn.objects.filter(pk__in=[alive.pk, elsewhere.pk]).values_list("status", flat=True)
    assert set(statuses) == {Turn.Status.RUNNING}


# --- the previous turn rule --------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("ended", [Turn.Status.INTERRUPTED, Turn.Status.FAILED, Turn.Status.CANCELLED])
def test_a_conversation_whose_last_turn_ended_without_an_answer_takes_a_new_question(
    alice: User, ended: str
) -> None:
    first = _queued(alice)
    Turn.objects.filter(pk=first.pk).update(status=ended)

    second = turn_start(conversation=first.conversation, question="And in Paris?", dispatch=False)

    assert (second.seq, second.status) == (2, Turn.Status.QUEUED)


@pytest.mark.django_db
@pytest.mark.parametrize("busy", [Turn.Status.QUEUED, Turn.Status.RUNNING])
def test_a_conversation_whose_last_turn_has_not_ended_refuses_a_new_question(alice: User, busy: str) -> None:
    first = _queued(alice)
    Turn.objects.filter(pk=first.pk).update(status=busy)

    with pytest.raises(TurnInProgress, match=f"still {busy}"):
        turn_start(conversation=first.conversation, question="And in Paris?", dispatch=False)

    assert first.conversation.turns.count() == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_questions_at_once_start_one_turn_and_refuse_the_other(alice: User) -> None:
    first = _queued(alice)
    Turn.objects.filter(pk=first.pk).update(status=Turn.Status.DONE)
    conversation = first.conversation
    outcomes: list[str] = []

    def ask(question: str) -> None:
        try:
            turn = turn_start(conversation=conversation, question=question, dispatch=False)
            outcomes.append(f"turn {turn.seq}")
        except TurnInProgress:
            outcomes.append("refused")
        finally:
            connection.close()

    with other_connection() as other:
        # Both wait on the conversation's row lock, then go one after the other.
        other.execute("SELECT 1 FROM conversations_conversation WHERE id = %s FOR UPDATE", [conversation.pk])
        threads = [threading.Thread(target=ask, args=(q,)) for q in ("And in Paris?", "And in Rome?")]
        for thread in threads:
            thread.start()
        time.sleep(0.5)
        assert outcomes == []  # neither got past the lock
        other.rollback()
    for thread in threads:
        thread.join(10)

    assert sorted(outcomes) == ["refused", "turn 2"]
    assert list(conversation.turns.order_by("seq").values_list("seq", "status")) == [
        (1, Turn.Status.DONE),
        (2, Turn.Status.QUEUED),
    ]


# --- cancel ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_queued_turn_is_cancelled_at_once_with_a_step_saying_who(alice: User) -> None:
    turn = _queued(alice)

    cancelled = turn_cancel(turn=turn, actor=alice)

    assert cancelled.status == Turn.Status.CANCELLED and cancelled.cancel_requested_by == "alice"
    (step,) = Step.objects.filter(turn=turn)
    assert (step.kind, step.title) == ("error", "cancelled by alice")
    turn_run(turn_id=turn.pk)  # its task, arriving later, finds nothing to run
    assert Turn.objects.get(pk=turn.pk).status == Turn.Status.CANCELLED
    assert Step.objects.filter(turn=turn).count() == 1


@pytest.mark.django_db
def test_a_finished_turn_cannot_be_cancelled(alice: User) -> None:
    turn = _queued(alice)
    turn_run(turn_id=turn.pk)

    with pytest.raises(TurnNotCancellable, match="already finished"):
        turn_cancel(turn=Turn.objects.get(pk=turn.pk), actor=alice)

    assert Turn.objects.get(pk=turn.pk).status == Turn.Status.DONE


def _run_in_thread(turn: Turn) -> threading.Thread:
    def run() -> None:
        try:
            turn_run(turn_id=turn.pk)
        finally:
            connection.close()

    thread = threading.Thread(target=run, name=f"test-turn-{turn.pk}")
    thread.start()
    return thread


@pytest.mark.django_db(transaction=True)
def test_a_turn_stuck_in_a_slow_model_call_is_cancelled_keeping_what_it_recorded(
    alice: User, fast_lifecycle: Settings
) -> None:
    bob = User.objects.create_user("bob", is_staff=True)
    turn = _queued(alice, question=f"{WEATHER} [demo:slow=15]")
    runner = _run_in_thread(turn)
    assert wait_until(lambda: Step.objects.filter(turn=turn, kind="decide").exists(), 10)

    turn_cancel(turn=Turn.objects.get(pk=turn.pk), actor=bob)
    runner.join(STOP_BOUND_SECONDS)

    assert not runner.is_alive(), "the turn did not stop within 10 s"
    turn.refresh_from_db()
    assert turn.status == Turn.Status.CANCELLED and turn.error.startswith("cancelled by bob")
    assert turn.cancel_requested_by == "bob"
    steps = list(Step.objects.filter(turn=turn, parent__isnull=True).order_by("seq"))
    assert [(s.kind, s.status) for s in steps] == [("connect", "ok"), ("decide", "error"), ("error", "error")]
    assert steps[0].exchanges.filter(label="tools/list").exists()
    assert "the model call was abandoned: cancelled by bob" in steps[1].error
    assert steps[2].title == "cancelled by bob"
    assert conversation_verify(conversation=turn.conversation).intact
    # The conversation goes on.
    again = turn_start(conversation=turn.conversation, question="Echo hello", dispatch=False)
    assert again.status == Turn.Status.QUEUED


@pytest.fixture
def broken_server(db: None) -> McpServer:
    return McpServer.objects.create(
        name="broken",
        transport="stdio",
        command=sys.executable,
        args=["-m", "tests.fixtures.broken_server"],
        cwd=str(REPO_ROOT),
        call_timeout=60,
    )


@pytest.mark.django_db(transaction=True)
def test_a_turn_stuck_in_a_slow_tool_call_is_cancelled_and_the_server_told(
    alice: User, broken_server: McpServer, fast_lifecycle: Settings
) -> None:
    turn = _queued(
        alice, "Run the hang tool", [broken_server], tool_choice="named", tool_choice_name="broken/hang"
    )
    runner = _run_in_thread(turn)
    assert wait_until(lambda: Step.objects.filter(turn=turn, kind="tool").exists(), 20)

    turn_cancel(turn=Turn.objects.get(pk=turn.pk), actor=alice)
    runner.join(STOP_BOUND_SECONDS)

    assert not runner.is_alive(), "the turn did not stop within 10 s"
    turn.refresh_from_db()
    assert turn.status == Turn.Status.CANCELLED
    tool = Step.objects.get(turn=turn, kind="tool")
    assert tool.status == "error" and "abandoned (cancelled by alice)" in tool.error
    labels = list(tool.exchanges.order_by("seq").values_list("label", flat=True))
    assert "tools/call" in labels and "notifications/cancelled" in labels
    call = json.loads(tool.exchanges.get(label="tools/call").request_body)
    cancelled = json.loads(tool.exchanges.get(label="notifications/cancelled").request_body)
    assert cancelled["params"]["requestId"] == call["id"]  # it names the call it abandons
    last = Step.objects.filter(turn=turn, parent__isnull=True).order_by("-seq").first()
    assert last is not None and last.title == "cancelled by alice"


@pytest.mark.django_db(transaction=True)
def test_a_turn_marked_interrupted_by_another_process_stops_and_keeps_that_ending(
    alice: User, fast_lifecycle: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    turn = _queued(alice, question=f"{WEATHER} [demo:slow=15]")
    runner = _run_in_thread(turn)
    assert wait_until(lambda: Step.objects.filter(turn=turn, kind="decide").exists(), 10)

    # Seen from two minutes on: this process's heartbeat thread keeps beating meanwhile, and a
    # beat landing between an UPDATE of heartbeat_at and the check would make the turn look alive.
    assert turns_reap_stale(now=timezone.now() + timedelta(seconds=120), window=60) == [turn.pk]
    ended = _record_of(turn.pk)
    with caplog.at_level(logging.WARNING, logger="conversations.runner"):
        runner.join(STOP_BOUND_SECONDS)

    assert not runner.is_alive()
    # The runner's writes after the interruption (the abandoned call) were refused by the
    # database (fencing): the record and its seal are the interruption's, unchanged.
    assert _record_of(turn.pk) == ended
    assert ended["turn"][0] == Turn.Status.INTERRUPTED  # type: ignore[index]
    decide = Step.objects.get(turn=turn, kind="decide")
    assert decide.status == "error" and decide.error.startswith("not finished: the turn was interrupted")
    assert conversation_verify(conversation=Conversation.objects.get(pk=turn.conversation_id)).intact
    assert f"turn {turn.pk}: the database refused this runner's write" in caplog.text


def _record_of(turn_pk: int) -> dict[str, object]:
    """A turn's row, steps and exchanges as stored."""
    return {
        "turn": Turn.objects.filter(pk=turn_pk)
        .values_list("status", "error", "finished_at", "updated_at", "seal", "claim")
        .get(),
        "steps": list(
            Step.objects.filter(turn_id=turn_pk)
            .order_by("seq")
            .values_list("pk", "seq", "status", "title", "error", "updated_at")
        ),
        "exchanges": list(Exchange.objects.filter(turn_id=turn_pk).order_by("seq").values_list("pk", "hash")),
    }


@pytest.mark.django_db(transaction=True)
def test_queued_turns_left_by_an_embedded_server_run_when_the_next_one_starts_serving(
    alice: User, settings: Settings
) -> None:
    settings.TURN_RUNNER = "embedded"
    orphan = _queued(alice)  # queued, then its process died before running it
    running = _running(alice, beat_seconds_ago=1)

    assert turns_resume_queued() == [orphan.pk]

    assert wait_until(lambda: Turn.objects.get(pk=orphan.pk).is_finished, 30)
    assert Turn.objects.get(pk=orphan.pk).status == Turn.Status.DONE
    assert Turn.objects.get(pk=running.pk).status == Turn.Status.RUNNING  # not the resumer's business


@pytest.mark.django_db(transaction=True)
def test_a_reply_still_streaming_in_when_its_turn_is_cancelled_is_not_read_to_its_end(
    alice: User, fast_lifecycle: Settings
) -> None:
    streamed = next(p for p in demo_format_profiles_ensure(stream=True) if p.provider == "openai_chat")
    # About 20 events, 2 s apart: 40 s to read whole.
    _, turn = conversation_start(
        owner=alice,
        model_profile=streamed,
        question="Tell me something about the weather in general [demo:drip=2]",
        servers=[],
        dispatch=False,
    )
    runner = _run_in_thread(turn)
    assert wait_until(lambda: Step.objects.filter(turn=turn, kind="decide").exists(), 10)

    turn_cancel(turn=Turn.objects.get(pk=turn.pk), actor=alice)
    runner.join(STOP_BOUND_SECONDS)

    assert not runner.is_alive()
    assert Turn.objects.get(pk=turn.pk).status == Turn.Status.CANCELLED
    # The abandoned call stops reading at the stream's next event and closes its connection.
    call_thread = f"model-call-turn-{turn.pk}"
    assert wait_until(lambda: all(t.name != call_thread for t in threading.enumerate()), 8)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("case", "stream"), [(SILENT, False), ("endless-stream", True)])
def test_a_turn_waiting_on_a_model_over_the_network_is_cancelled_at_once_keeping_what_was_sent(
    alice: User, fast_lifecycle: Settings, case: str, stream: bool
) -> None:
    # The call runs on the turn's own thread (no thread of its own to leave behind); a cancel
    # shuts its connection down, whether no byte of the answer came yet or it never ends.
    hostile = HostileModel()
    try:
        profile = ModelProfile.objects.create(
            name=f"hostile {case}",
            provider="openai_chat",
            model=case,
            base_url=hostile.base_url("openai_chat"),
            stream=stream,
            deadline_seconds=300,
        )
        _, turn = conversation_start(
            owner=alice, model_profile=profile, question=WEATHER, servers=[], dispatch=False
        )
        runner = _run_in_thread(turn)
        assert wait_until(lambda: hostile.requests, 10)
        assert not [t for t in threading.enumerate() if t.name.startswith("model-call-turn-")]

        started = time.monotonic()
        turn_cancel(turn=Turn.objects.get(pk=turn.pk), actor=alice)
        runner.join(STOP_BOUND_SECONDS)

        assert not runner.is_alive(), "the turn did not stop within 10 s"
        # Within the cancel poll and a little more, not the model's 300 s deadline.
        assert time.monotonic() - started < fast_lifecycle.TURN_CANCEL_POLL_SECONDS + 5
        turn.refresh_from_db()
        assert turn.status == Turn.Status.CANCELLED
        decide = Step.objects.get(turn=turn, kind="decide")
        assert decide.status == "error" and "the model call was abandoned: cancelled by alice" in decide.error
        # The abandoned call is in the record: what was sent, and what had arrived.
        (sent,) = decide.exchanges.all()
        assert json.loads(sent.request_body)["model"] == case
        if stream:
            assert sent.response_body.startswith(
                'data: {"choices":[{"index":0,"delta":{"content":"This re"}}]}'
            )
        assert conversation_verify(conversation=turn.conversation).intact
    finally:
        hostile.close()


@pytest.mark.django_db
def test_a_cancelled_turn_is_exported_and_imported_as_cancelled(alice: User) -> None:
    turn = _queued(alice)
    turn_cancel(turn=turn, actor=alice)

    exported = conversation_export(conversation=turn.conversation, fmt="json", actor=alice, via="test")
    otel = json.loads(
        conversation_export(conversation=turn.conversation, fmt="otel", actor=alice, via="test")
    )
    imported = conversation_import(data=exported, actor=alice, source="test.json")

    assert json.loads(exported)["turns"][0]["status"] == "cancelled"
    copy = imported.turns.get()
    assert (copy.status, copy.error) == ("cancelled", "cancelled by alice before it started")
    assert copy.steps.get().title == "cancelled by alice"
    turn_span = next(
        span
        for resource in otel["resourceSpans"]
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
        if any(a["key"] == "inspector.turn.status" for a in span["attributes"])
    )
    assert turn_span["status"]["code"] == 2  # an error span: the turn did not answer
