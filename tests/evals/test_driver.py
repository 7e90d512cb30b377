"""Driving a run through real turns (the demo model, the demo MCP server over stdio, the
embedded runner): each matcher and each failure class, reproduced with the demo's scenarios;
never more turns in flight than the run's concurrency; cancelling stops new cases."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User

from conversations.models import Turn
from evals.driver import run_advance, run_execute
from evals.models import EvalCaseResult, EvalRun
from evals.selectors import Progress, run_results
from evals.services import run_cancel, run_start, suite_save
from servers import gateway
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)

WEATHER = "What will the weather be like in Beijing tomorrow?"
# Each case: its question and expectation, and the failure class it must get ("" passes).
CASES: list[tuple[str, str, str]] = [
    ("What is 12 * (3 + 4)? [demo:malformed-json]", "[{tool: demo/calculate}]", "parse_failure"),
    (f"{WEATHER} [demo:missing-argument]", "[{tool: demo/get_weather_forecast}]", "validation_failure"),
    (f"{WEATHER} [demo:unknown-tool]", "[{tool: demo/get_weather_forecast}]", "wrong_tool"),
    (f"{WEATHER} [demo:no-tool]", "[{tool: demo/get_weather_forecast}]", "no_call"),
    (WEATHER, "[{tool: demo/get_weather_forecast, arguments: {city: {regex: '^Par'}}}]", "wrong_arguments"),
    (WEATHER, "[]", "extra_call"),
    (WEATHER, "[{tool: demo/calculate}]", "wrong_tool"),
    ("What is 12 * (3 + 4)? [demo:http-500]", "[{tool: demo/calculate}]", "error"),
    (WEATHER, "[{tool: demo/get_weather_forecast}]\n    answer_contains: snow in July", "wrong_answer"),
    (WEATHER, "[{tool: demo/get_weather_forecast, arguments: {city: {regex: '^Bei'}, day: tomorrow}}]", ""),
    (
        "Convert 10 km to miles",
        "[{tool: demo/convert_units, arguments: {value: {range: [9.5, 10.5]}, "
        "from_unit: {oneOf: [km, kilometers]}, to_unit: {exact: miles}}}]",
        "",
    ),
    ("Hello there", "[]", ""),
]


def _suite_text(concurrency_hint: str = "") -> str:
    cases = "".join(f"  - question: {question!r}\n    expect: {expect}\n" for question, expect, _ in CASES)
    return f"name: classes{concurrency_hint}\nmodels: [demo]\nparadigms: [native]\nservers: [demo]\ncases:\n{cases}"


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


@pytest.fixture
def alice() -> User:
    user: User = UserFactory(username="alice")
    return user


def test_each_matcher_and_each_failure_class_through_real_turns_never_exceeding_the_concurrency(
    alice: User,
) -> None:
    suite = suite_save(owner=alice, text=_suite_text())
    run = run_start(suite=suite, user=alice, concurrency=3, dispatch=False)
    seen: list[Progress] = []

    run = run_execute(run=run, on_progress=seen.append, poll_seconds=0.05)

    assert run.status == EvalRun.Status.DONE
    results = {result.case_index: result for result in EvalCaseResult.objects.filter(cell__run=run)}
    assert [results[index].failure for index in range(len(CASES))] == [failure for _, _, failure in CASES]
    assert all(results[index].reason for index, (_, _, failure) in enumerate(CASES) if failure)
    assert "'city' is a required property" in results[1].reason
    assert "argument city is 'Beijing', which does not match /^Par/" in results[4].reason
    assert results[7].reason.startswith("the turn failed: the model endpoint answered 500")
    assert max(progress["running"] for progress in seen) == 3
    assert seen[-1]["finished"] == seen[-1]["total"] == len(CASES)
    cell = run_results(run)["cells"][0]  # type: ignore[index]
    assert (cell["passed"], cell["cases"]) == (3, len(CASES))  # type: ignore[index]
    assert cell["wrong_tool"] == 2 and cell["error"] == 1  # type: ignore[index]


def test_a_cancelled_run_starts_no_more_cases(alice: User) -> None:
    suite = suite_save(owner=alice, text=_suite_text())
    run = run_start(suite=suite, user=alice, concurrency=1, dispatch=False)

    run_execute(run=run, on_progress=lambda progress: run_cancel(run=run), poll_seconds=0.05)

    run.refresh_from_db()
    assert run.status == EvalRun.Status.CANCELLED
    started = EvalCaseResult.objects.filter(cell__run=run).exclude(status=EvalCaseResult.Status.PENDING)
    assert started.count() == 1
    turns = Turn.objects.filter(conversation__owner=alice)
    assert turns.count() == 1
    # The turn in flight runs to its end on its own (and is not graded).
    deadline = time.monotonic() + 30
    while not turns.get().is_finished and time.monotonic() < deadline:
        time.sleep(0.05)
    assert turns.get().is_finished
    assert run_advance(run=run) is True
    assert EvalCaseResult.objects.filter(cell__run=run, status=EvalCaseResult.Status.RUNNING).count() == 1
