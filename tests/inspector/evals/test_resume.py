"""No run stays running forever: a run whose driver died (the web process that drove it in the
embedded mode stopped) is taken over by a live process, which keeps the case runs already graded,
asks again the ones whose turn was interrupted and drives the rest; a live driver's run is left
alone; and a duplicate or replaced step never starts a case twice."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.utils import timezone
from pytest_django.fixtures import Settings

from conversations.lifecycle import runner_name, turns_reap_stale
from conversations.models import Step, Turn
from inspector.evals.driver import case_claim, run_advance
from inspector.evals.execution import runs_resume_stale
from inspector.evals.models import EvalCaseResult, EvalRun
from inspector.evals.services import run_start, suite_save
from inspector.evals.tasks import advance_run
from servers import gateway
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)

NEVER = 10.0**9  # seconds

SUITE = (
    "name: resumable\nmodels: [demo]\nparadigms: [native]\nservers: [demo]\ncases:\n"
    "  - {question: 'What is 2 + 2?', expect: [{tool: demo/calculate}]}\n"
    "  - {question: 'What is 3 + 3? [demo:slow=3]', expect: [{tool: demo/calculate}]}\n"
    "  - {question: Hello there, expect: []}\n"
)


@pytest.fixture(autouse=True)
def _embedded(settings: Settings) -> Iterator[None]:
    settings.TURN_RUNNER = "embedded"
    # These tests call the stale checks themselves. The process's lifecycle thread, started by
    # an earlier test of this process, runs them every TURN_REAP_SECONDS, and would take over
    # a run whose driver died before the test's own call does.
    settings.TURN_REAP_SECONDS = NEVER
    yield
    gateway.close_all()


@pytest.fixture
def alice() -> User:
    user: User = UserFactory(username="alice")
    return user


def _wait(condition: Callable[[], bool], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _dead_driver() -> str:
    """The name a process of this host that has exited would have written."""
    process = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True)
    return f"{socket.gethostname()}:{int(process.stdout)}:0badc0de"


def test_a_run_whose_driver_died_is_driven_on_keeping_its_graded_cases(alice: User) -> None:
    run = run_start(suite=suite_save(owner=alice, text=SUITE), user=alice, concurrency=1, dispatch=False)
    dead = _dead_driver()
    run_advance(run=run, driver=dead)
    first = EvalCaseResult.objects.get(cell__run=run, case_index=0)
    _wait(lambda: Turn.objects.filter(conversation__owner=alice, status=Turn.Status.DONE).exists())
    run_advance(run=run, driver=dead)  # grades case 0, starts case 1
    # The run is taken over from its dead driver: the grading may come from the thread now
    # driving it, so wait for it rather than race it.
    _wait(lambda: EvalCaseResult.objects.get(pk=first.pk).status != EvalCaseResult.Status.RUNNING)
    first.refresh_from_db()
    assert first.status == EvalCaseResult.Status.PASSED
    # The driver's process dies, and the turn in flight with it: the turns' check marks it.
    second = EvalCaseResult.objects.get(cell__run=run, case_index=1)
    interrupted = Turn.objects.get(conversation=second.conversation)
    # Waiting on the model ([demo:slow=3]): its steps so far are written, so the check's error
    # step comes after them rather than racing the runner for the first place.
    _wait(lambda: Step.objects.filter(turn=interrupted, kind=Step.Kind.DECIDE).exists())
    assert turns_reap_stale(now=timezone.now() + timedelta(hours=1)) == [interrupted.pk]

    assert runs_resume_stale() == [run.pk]

    _wait(lambda: EvalRun.objects.get(pk=run.pk).is_finished)
    run.refresh_from_db()
    assert (run.status, run.finished, run.passed, run.driver) == ("done", 3, 3, runner_name())
    kept = EvalCaseResult.objects.get(pk=first.pk)
    assert (kept.conversation_id, kept.finished_at) == (first.conversation_id, first.finished_at)
    second.refresh_from_db()
    assert second.status == EvalCaseResult.Status.PASSED
    assert second.conversation_id != interrupted.conversation_id
    assert Turn.objects.get(pk=interrupted.pk).status == Turn.Status.INTERRUPTED  # kept as recorded
    assert runs_resume_stale() == []


def test_a_run_with_a_live_driver_is_left_alone_and_a_silent_one_is_taken_over(alice: User) -> None:
    live = run_start(suite=suite_save(owner=alice, text=SUITE), user=alice, dispatch=False)
    EvalRun.objects.filter(pk=live.pk).update(driver=runner_name(), status=EvalRun.Status.RUNNING)
    silent = run_start(suite=live.suite, user=alice, dispatch=False)
    EvalRun.objects.filter(pk=silent.pk).update(
        driver="another-host:12:ab", updated_at=timezone.now() - timedelta(minutes=5)
    )

    assert runs_resume_stale() == [silent.pk]
    assert EvalRun.objects.get(pk=live.pk).driver == runner_name()
    _wait(lambda: EvalRun.objects.get(pk=silent.pk).is_finished)
    assert EvalRun.objects.get(pk=silent.pk).status == EvalRun.Status.DONE


def test_a_case_run_is_claimed_once_and_a_replaced_task_chain_starts_nothing(alice: User) -> None:
    run = run_start(suite=suite_save(owner=alice, text=SUITE), user=alice, concurrency=2, dispatch=False)
    result = EvalCaseResult.objects.filter(cell__run=run).order_by("case_index").first()
    assert result is not None
    stale_copy = EvalCaseResult.objects.get(pk=result.pk)

    assert case_claim(result=result) is True
    assert case_claim(result=stale_copy) is False

    EvalRun.objects.filter(pk=run.pk).update(driver="celery:new-chain")
    advance_run(run.pk, "celery:old-chain")  # a step of the chain that was replaced
    assert not EvalCaseResult.objects.filter(cell__run=run, conversation__isnull=False).exists()
    assert EvalRun.objects.get(pk=run.pk).driver == "celery:new-chain"


@pytest.mark.postgres
def test_two_copies_of_the_same_step_at_once_start_each_case_once(alice: User) -> None:
    """A redelivered ``advance_run`` running beside the original (the same chain's driver)."""
    run = run_start(suite=suite_save(owner=alice, text=SUITE), user=alice, concurrency=2, dispatch=False)
    barrier = threading.Barrier(2)

    def step() -> bool:
        try:
            barrier.wait(timeout=10)
            return run_advance(run=run, driver="celery:chain")
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=2) as pool:
        steps = [pool.submit(step) for _ in range(2)]
        assert [future.result(timeout=30) for future in steps] == [False, False]
    started = EvalCaseResult.objects.filter(cell__run=run, conversation__isnull=False)
    assert sorted(started.values_list("case_index", flat=True)) == [0, 1]
    turns = Turn.objects.filter(conversation__owner=alice)
    assert turns.count() == 2
    _wait(lambda: all(turn.is_finished for turn in turns.all()))
