"""One rule for "regression" wherever a run is shown against the one before it: the suite page's
history, the run's JSON (``eval run --json``, the API, the run page) and ``eval compare`` /
``--fail-on-regression`` all flag a cell only when its pass rate is below the 95% interval of
the same cell's in the baseline (decision 0390), never merely for a lower pass rate."""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from inspector import evals_results
from inspector.evals.models import EvalCaseResult, EvalCell, EvalRun, Suite
from inspector.evals.selectors import run_history, run_results
from inspector.evals.services import suite_save
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

SUITE = """\
name: repeated
models: [demo]
paradigms: [native]
servers: [demo]
cases:
  - question: What is 2 + 2?
    expect: [{tool: demo/calculate}]
"""
QUESTION = "What is 2 + 2?"


def _done_run(suite: Suite, *, passed: int, of: int) -> EvalRun:
    """A done run of one cell: one case repeated ``of`` times, ``passed`` of them passing."""
    run = EvalRun.objects.create(
        suite=suite,
        owner=suite.owner,
        definition=suite.definition,
        status=EvalRun.Status.DONE,
        repeats=of,
        total=of,
        finished=of,
        passed=passed,
    )
    cell = EvalCell.objects.create(run=run, position=0, model="demo", paradigm="native", variant="default")
    for repeat in range(of):
        failing = repeat >= passed
        EvalCaseResult.objects.create(
            cell=cell,
            case_index=0,
            repeat=repeat,
            question=QUESTION,
            status=EvalCaseResult.Status.FAILED if failing else EvalCaseResult.Status.PASSED,
            failure=EvalCaseResult.Failure.WRONG_TOOL if failing else "",
        )
    return run


def _compared(baseline: EvalRun, run: EvalRun) -> dict[str, Any]:
    out = StringIO()
    call_command(
        "eval",
        "compare",
        str(baseline.public_id),
        str(run.public_id),
        "--json",
        "--user",
        baseline.owner.username,
        stdout=out,
    )
    compared: dict[str, Any] = json.loads(out.getvalue())
    return compared


@pytest.mark.parametrize(
    ("before", "after", "regression"),
    [
        # 9/10 then 8/10: a lower pass rate, inside 9/10's interval [0.60, 0.98]: noise.
        ((9, 10), (8, 10), False),
        # 10/10 then 5/10: below 10/10's interval [0.72, 1].
        ((10, 10), (5, 10), True),
        ((8, 10), (9, 10), False),
    ],
)
def test_the_history_the_run_json_and_the_page_flag_what_eval_compare_flags(
    before: tuple[int, int], after: tuple[int, int], regression: bool
) -> None:
    alice = UserFactory(username="alice")
    suite = suite_save(owner=alice, text=SUITE)
    baseline = _done_run(suite, passed=before[0], of=before[1])
    run = _done_run(suite, passed=after[0], of=after[1])
    client = Client()
    client.force_login(alice)

    assert _compared(baseline, run)["regression"] is regression

    assert [item["regression"] for item in run_history(suite=suite)] == [False, regression]
    results = run_results(run)
    assert results["regression"] is regression
    assert [cell["regression"] for cell in results["cells"]] == [regression]
    history = evals_results.suite_history(suite)
    assert [row.regressed for row in history.rows] == [regression, False]  # newest first
    page = client.get(reverse("inspector-eval-suite", args=[suite.public_id])).content.decode()
    assert page.count('class="regressed"') == (1 if regression else 0)
