"""The scaled mode: the issue's example suite started as the pages and the API start it, driven
by a real Celery worker (``evals.tasks.advance_run``) whose turns run as ordinary turn tasks, on
PostgreSQL and Redis."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from inspector.evals.models import EvalRun
from inspector.evals.selectors import run_results
from inspector.evals.services import run_start, suite_save
from servers import gateway
from tests.factories import UserFactory

pytestmark = [pytest.mark.celery, pytest.mark.postgres]

EXAMPLE = (Path(__file__).parent / "example_suite.json").read_text()


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


def test_the_example_suite_runs_on_a_celery_worker(celery_worker: subprocess.Popen[str]) -> None:
    alice: User = UserFactory(username="alice")
    suite = suite_save(owner=alice, text=EXAMPLE)

    run = run_start(suite=suite, user=alice, concurrency=4)

    deadline = time.monotonic() + 180
    while not run.is_finished and time.monotonic() < deadline:
        time.sleep(0.2)
        run.refresh_from_db()
        assert run.finished <= run.total
    assert run.status == EvalRun.Status.DONE, run.error
    results = run_results(run)
    cells = {(cell["paradigm"], cell["variant"]): cell for cell in results["cells"]}  # type: ignore[union-attr, index]
    assert len(cells) == 10
    # Plain passes everywhere; "Weather." loses the weather case in every paradigm (docs/evals.md §8).
    assert all(cell["accuracy"] == 1.0 for (_, variant), cell in cells.items() if variant == "plain")
    assert all(
        (cell["passed"], cell["no_call"]) == (2, 1)
        for (_, variant), cell in cells.items()
        if variant == "terse"
    )
    assert sum(len(cell["conversations"]) for cell in cells.values()) == 30
