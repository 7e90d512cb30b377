"""A real Celery worker on the real Redis killed with SIGKILL mid-turn: another live worker marks
the turn interrupted within the heartbeat window, and the conversation takes the next question."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import User

from conversations.models import Conversation, Exchange, Step, Turn
from conversations.record.verification import conversation_verify
from conversations.services import conversation_start, demo_profile_ensure, turn_cancel, turn_start
from servers.services import demo_server_ensure
from tests.conftest import REPO_ROOT, _database_url, running_celery_worker, worker_answers, worker_log_path

WEATHER = "What will the weather be like in Beijing tomorrow?"
# Short lifecycle timings for the workers, so the test waits seconds, not a minute.
LIFECYCLE_ENV = {
    "TURN_HEARTBEAT_SECONDS": "0.5",
    "TURN_HEARTBEAT_WINDOW_SECONDS": "3",
    "TURN_REAP_SECONDS": "0.5",
}

pytestmark = [pytest.mark.celery, pytest.mark.postgres]


@contextmanager
def _checker_worker(redis_url: str, **lifecycle: str) -> Iterator[subprocess.Popen[str]]:
    """A second live worker that takes no turns (it listens on a queue nobody sends to): what it
    does to the turn is only its lifecycle checks."""
    log_path = Path(settings.VAR_DIR) / "celery-checker-test.log"
    env = {
        **os.environ,
        "DATABASE_URL": _database_url(),
        "REDIS_URL": redis_url,
        "VAR_DIR": str(settings.VAR_DIR),
        "SECRET_KEY": settings.SECRET_KEY,
        **(lifecycle or LIFECYCLE_ENV),
    }
    with log_path.open("w") as log:
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "inspector",
                "worker",
                "-P",
                "threads",
                "-c",
                "2",
                "-Q",
                "no-turns-here",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "-l",
                "info",
                "-n",
                f"checker-{os.getpid()}@%h",
            ],
            cwd=REPO_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            if not worker_answers(redis_url, worker, within=60):
                pytest.fail(f"the checker worker did not come up; see {log_path}")
            yield worker
        finally:
            worker.terminate()
            try:
                worker.wait(timeout=20)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()


def _wait_for(condition: object, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.1)
    return False


@pytest.mark.django_db(transaction=True)
def test_a_turn_whose_worker_is_killed_is_interrupted_and_the_conversation_goes_on(redis_url: str) -> None:
    alice = User.objects.create_user("alice")
    with _checker_worker(redis_url), running_celery_worker(redis_url, **LIFECYCLE_ENV) as doomed:
        conversation, turn = conversation_start(
            owner=alice,
            model_profile=demo_profile_ensure(),
            question=f"{WEATHER} [demo:slow=30]",
            servers=[demo_server_ensure()],
        )
        assert _wait_for(lambda: Step.objects.filter(turn=turn, kind="decide").exists(), 60), "never ran"
        claimed = Turn.objects.get(pk=turn.pk)
        assert claimed.status == Turn.Status.RUNNING and f":{doomed.pid}:" in claimed.runner

        doomed.send_signal(signal.SIGKILL)
        doomed.wait()

        window = float(LIFECYCLE_ENV["TURN_HEARTBEAT_WINDOW_SECONDS"])
        # The checker sees it on its next pass; the heartbeat window bounds the wait in any case.
        assert _wait_for(lambda: Turn.objects.get(pk=turn.pk).status != Turn.Status.RUNNING, window + 10)
        turn.refresh_from_db()
        assert turn.status == Turn.Status.INTERRUPTED
        steps = list(Step.objects.filter(turn=turn, parent__isnull=True).order_by("seq"))
        assert [s.kind for s in steps] == ["connect", "decide", "error"]  # what it recorded stays
        assert steps[1].status == "error" and steps[1].error.startswith("not finished")
        assert steps[0].exchanges.filter(label="tools/list").exists()
        assert steps[-1].title == "the turn was interrupted" and "Everything it recorded" in steps[-1].error

    # A new worker runs the next question of the same conversation.
    with running_celery_worker(redis_url, **LIFECYCLE_ENV):
        again = turn_start(conversation=conversation, question=WEATHER)
        assert _wait_for(lambda: Turn.objects.get(pk=again.pk).is_finished, 60)
        assert Turn.objects.get(pk=again.pk).status == Turn.Status.DONE
    assert Turn.objects.get(pk=turn.pk).status == Turn.Status.INTERRUPTED  # and stays so


@pytest.mark.django_db(transaction=True)
def test_a_turn_running_on_a_worker_is_cancelled_from_another_process(redis_url: str) -> None:
    alice = User.objects.create_user("alice")
    with running_celery_worker(redis_url, TURN_CANCEL_POLL_SECONDS="0.2"):
        _, turn = conversation_start(
            owner=alice,
            model_profile=demo_profile_ensure(),
            question=f"{WEATHER} [demo:slow=30]",
            servers=[demo_server_ensure()],
        )
        assert _wait_for(lambda: Step.objects.filter(turn=turn, kind="decide").exists(), 60), "never ran"

        turn_cancel(turn=Turn.objects.get(pk=turn.pk), actor=alice)  # this process only writes the request

        assert _wait_for(lambda: Turn.objects.get(pk=turn.pk).is_finished, 10), "not stopped within 10 s"
    turn.refresh_from_db()
    assert turn.status == Turn.Status.CANCELLED
    assert (
        Step.objects.filter(turn=turn).order_by("-seq").values_list("title", flat=True)[0]
        == "cancelled by alice"
    )


def _record_of(turn_pk: int) -> dict[str, object]:
    """Everything of a turn a stale runner could change: its row, its steps, its exchanges and
    its conversation's anchor."""
    turn = Turn.objects.select_related("conversation").get(pk=turn_pk)
    return {
        "turn": Turn.objects.filter(pk=turn_pk)
        .values("status", "error", "answer", "finished_at", "updated_at", "seal", "transcript")
        .get(),
        "steps": list(
            Step.objects.filter(turn_id=turn_pk)
            .order_by("seq")
            .values_list("pk", "seq", "kind", "status", "title", "error", "updated_at")
        ),
        "exchanges": list(
            Exchange.objects.filter(turn_id=turn_pk).order_by("seq").values_list("pk", "step_id", "hash")
        ),
        "anchor": Conversation.objects.filter(pk=turn.conversation_id)
        .values_list("chain_turns", "chain_head", "chain_anchor")
        .get(),
    }


@pytest.mark.django_db(transaction=True)
def test_a_stale_worker_resumed_after_its_turn_was_interrupted_writes_nothing_into_it(
    redis_url: str,
) -> None:
    alice = User.objects.create_user("alice")
    # A wider window than the other tests': the stale worker must not be reaped before it is
    # stopped (a loaded host can hold up a first turn's heartbeat for seconds).
    lifecycle = {**LIFECYCLE_ENV, "TURN_HEARTBEAT_WINDOW_SECONDS": "8"}
    with _checker_worker(redis_url, **lifecycle), running_celery_worker(redis_url, **lifecycle) as stale:
        conversation, turn = conversation_start(
            owner=alice,
            model_profile=demo_profile_ensure(),
            question=f"{WEATHER} [demo:slow=30]",
            servers=[demo_server_ensure()],
        )
        assert _wait_for(lambda: Step.objects.filter(turn=turn, kind="decide").exists(), 60), "never ran"
        stale.send_signal(signal.SIGSTOP)
        try:
            window = float(lifecycle["TURN_HEARTBEAT_WINDOW_SECONDS"])
            assert _wait_for(lambda: Turn.objects.get(pk=turn.pk).status != Turn.Status.RUNNING, window + 10)
            before = _record_of(turn.pk)
            assert before["turn"]["status"] == Turn.Status.INTERRUPTED  # type: ignore[index]
            assert before["turn"]["seal"]  # type: ignore[index]
        finally:
            stale.send_signal(signal.SIGCONT)

        # The resumed worker hears its turn was ended elsewhere, stops, and its task ends.
        log = worker_log_path()
        assert _wait_for(lambda: "run_turn[" in log.read_text() and "succeeded" in log.read_text(), 60), (
            f"the resumed worker's task did not end; see {log}"
        )
        assert _record_of(turn.pk) == before
        report = conversation_verify(conversation=conversation)
        assert report.intact, report.reason
        text = log.read_text()
        assert f"turn {turn.pk}: the database refused this runner's write" in text
        assert "IntegrityError" not in text
