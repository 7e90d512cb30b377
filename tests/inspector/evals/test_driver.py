"""Driving a run through real turns (the demo model, the demo MCP server over stdio, the
embedded runner): each matcher and each failure class, reproduced with the demo's scenarios;
never more turns in flight than the run's concurrency; cancelling stops new cases."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from django.contrib.auth.models import User
from pytest_django.fixtures import Settings

from conversations.models import Turn
from inspector.evals.driver import run_advance, run_execute
from inspector.evals.models import EvalCaseResult, EvalRun
from inspector.evals.selectors import Progress, run_results
from inspector.evals.services import run_cancel, run_start, suite_save
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
def _embedded(settings: Settings) -> None:
    """The embedded default, also in the Postgres pass (where REDIS_URL would pick Celery)."""
    settings.TURN_RUNNER = "embedded"


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


def _wait(condition: Callable[[], bool], seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_cancelling_a_run_cancels_its_turns_in_flight_and_starts_no_more(alice: User) -> None:
    text = "name: slow\nmodels: [demo]\nparadigms: [native]\nservers: [demo]\ncases:\n" + "".join(
        f"  - {{question: 'What is {n} + 1? [demo:slow=20]', expect: [{{tool: demo/calculate}}]}}\n"
        for n in range(3)
    )
    run = run_start(suite=suite_save(owner=alice, text=text), user=alice, concurrency=2, dispatch=False)
    run_advance(run=run)
    turns = Turn.objects.filter(conversation__owner=alice)
    _wait(lambda: turns.filter(status=Turn.Status.RUNNING).count() == 2)

    run = run_cancel(run=run, actor=alice)

    assert run.status == EvalRun.Status.CANCELLED
    assert run.error.startswith("cancelled by alice: 0 of 3 case runs had ended; 2 in flight were cancelled")
    _wait(lambda: all(turn.is_finished for turn in turns.all()))
    assert [turn.status for turn in turns] == [Turn.Status.CANCELLED] * 2
    assert all(turn.cancel_requested_by == "alice" for turn in turns)
    assert run_advance(run=run) is True
    statuses = sorted(EvalCaseResult.objects.filter(cell__run=run).values_list("status", flat=True))
    assert statuses == ["cancelled", "cancelled", "pending"]
    assert turns.count() == 2
    assert run_cancel(run=run, actor=alice).error == run.error  # twice changes nothing
