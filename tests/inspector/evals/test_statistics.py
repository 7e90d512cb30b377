"""The statistics of a cell's repeated case runs (``inspector.evals.statistics``): the Wilson
interval, pass@k and pass^k over each case's repeats, the latency percentile and the per-case
figures — against values worked out by hand — and the keys ``eval run --json`` gives."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

import pytest
from django.contrib.auth.models import User
from pytest_django.fixtures import Settings

from inspector.evals.driver import run_execute
from inspector.evals.models import EvalRun
from inspector.evals.selectors import run_results
from inspector.evals.services import run_start, suite_save
from inspector.evals.statistics import CaseRun, cell_statistics, percentile, wilson_interval
from servers import gateway
from tests.factories import UserFactory


def test_the_wilson_interval_holds_its_rate_and_stays_inside_0_and_1() -> None:
    low, high = wilson_interval(8, 10)  # type: ignore[misc]
    # Wilson's interval for 8 of 10 at 95%: about [0.490, 0.943].
    assert (round(low, 3), round(high, 3)) == (0.49, 0.943)
    none_low, none_high = wilson_interval(0, 5)  # type: ignore[misc]
    assert none_low == 0.0 and 0.4 < none_high < 0.45
    all_low, all_high = wilson_interval(5, 5)  # type: ignore[misc]
    assert all_high == 1.0 and 0.55 < all_low < 0.6
    assert wilson_interval(0, 0) is None


def test_pass_at_k_and_pass_hat_k_over_each_cases_repeats() -> None:
    runs = [
        # case 0 passes 3 of 3, case 1 passes 1 of 3, case 2 passes 0 of 3
        *(CaseRun(0, True, 100, 10, Decimal("0.01")) for _ in range(3)),
        CaseRun(1, True, 200, 10, Decimal("0.01")),
        CaseRun(1, False, 300, 10, Decimal("0.01")),
        CaseRun(1, False, 400, 10, Decimal("0.01")),
        *(CaseRun(2, False, 1000, 20, Decimal("0.02")) for _ in range(3)),
    ]
    stats = cell_statistics(runs, k=3)

    assert stats["pass_rate"] == round(4 / 9, 4)
    low, high = stats["pass_rate_ci"]  # type: ignore[misc]
    assert low < 4 / 9 < high
    # k = 3 of 3 runs: pass@3 is "any passed" (2 of 3 cases), pass^3 "all passed" (1 of 3).
    assert stats["pass_at_k"] == round(2 / 3, 4)
    assert stats["pass_hat_k"] == round(1 / 3, 4)
    assert stats["latency_ms_p95"] == 1000 and stats["latency_ms_mean"] == round(4200 / 9)
    assert stats["tokens_per_case"] == round(120 / 9)
    assert Decimal(str(stats["cost_per_case"])) == Decimal("0.12") / 9


def test_pass_at_1_is_the_pass_rate_and_a_missing_price_gives_no_cost() -> None:
    runs = [CaseRun(0, True, None, 5, None), CaseRun(1, False, None, 5, Decimal("0.1"))]
    stats = cell_statistics(runs, k=1)
    assert stats["pass_at_k"] == stats["pass_hat_k"] == stats["pass_rate"] == 0.5
    assert stats["cost_per_case"] is None and stats["latency_ms_p95"] is None
    assert percentile([5, 1, 3, 2, 4], 0.95) == 5 and percentile([], 0.5) is None


def test_a_case_with_its_own_repeats_is_scored_at_its_own_k() -> None:
    runs = [
        # case 0 (the run's k = 2) passes 1 of 2; case 1 (its own k = 4) passes 3 of 4
        CaseRun(0, True, 10, 1, None),
        CaseRun(0, False, 10, 1, None),
        *(CaseRun(1, True, 10, 1, None) for _ in range(3)),
        CaseRun(1, False, 10, 1, None),
    ]
    stats = cell_statistics(runs, k=2, case_k={1: 4})

    assert stats["pass_rate"] == round(4 / 6, 4) and stats["k"] == 2
    # pass@k: case 0 at k=2 is 1, case 1 at k=4 is 1; pass^k: 0 and 0.
    assert stats["pass_at_k"] == 1.0 and stats["pass_hat_k"] == 0.0
    # Scored at the run's k, case 1's pass^2 would be C(3,2)/C(4,2) = 0.5 and count.
    assert cell_statistics(runs, k=2)["pass_hat_k"] == 0.25


@pytest.fixture
def _embedded(settings: Settings) -> Iterator[None]:
    settings.TURN_RUNNER = "embedded"
    yield
    gateway.close_all()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("_embedded")
def test_eval_run_json_gives_every_statistic_of_a_repeated_cell() -> None:
    alice: User = UserFactory(username="alice")
    suite = (
        "name: repeated\nmodels: [demo]\nparadigms: [native]\nservers: [demo]\nrepeats: 3\n"
        "cases:\n  - {question: 'What is 12 * (3 + 4)?', expect: [{tool: demo/calculate}]}\n"
        "  - {question: 'What is 2 + 2?', expect: [{tool: demo/get_weather_forecast}]}\n"
    )
    run = run_execute(
        run=run_start(suite=suite_save(owner=alice, text=suite), user=alice, dispatch=False),
        poll_seconds=0.05,
    )

    assert run.status == EvalRun.Status.DONE, run.error
    [cell] = run_results(run)["cells"]  # type: ignore[misc]
    assert cell["cases"] == 6 and cell["k"] == 3
    assert cell["pass_rate"] == cell["accuracy"] == 0.5
    assert cell["pass_at_k"] == cell["pass_hat_k"] == 0.5  # the demo is deterministic
    low, high = cell["pass_rate_ci"]
    assert low < 0.5 < high
    assert cell["latency_ms_p95"] >= cell["latency_ms_mean"] > 0
    assert cell["tokens_per_case"] > 0 and cell["cost_per_case"] is None


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("_embedded")
def test_a_case_with_its_own_repeats_runs_that_many_times_in_every_cell() -> None:
    alice: User = UserFactory(username="alice")
    suite = (
        "name: per-case\nmodels: [demo]\nparadigms: [native, prompt_json]\nservers: [demo]\nrepeats: 1\n"
        "cases:\n  - {question: 'What is 12 * (3 + 4)?', expect: [{tool: demo/calculate}], repeats: 3}\n"
        "  - {question: 'What is 2 + 2?', expect: [{tool: demo/calculate}]}\n"
    )
    run = run_execute(
        run=run_start(suite=suite_save(owner=alice, text=suite), user=alice, dispatch=False),
        poll_seconds=0.05,
    )

    assert run.status == EvalRun.Status.DONE, run.error
    assert run.total == 2 * (3 + 1)
    results = run_results(run)
    for cell in results["cells"]:  # type: ignore[union-attr]
        assert cell["cases"] == 4 and cell["finished"] == 4  # type: ignore[index]
        runs = sorted((item["case"], item["repeat"]) for item in cell["results"])  # type: ignore[index]
        assert runs == [(0, 0), (0, 1), (0, 2), (1, 0)]
        assert cell["k"] == 1 and cell["pass_rate"] == 1.0 and cell["pass_hat_k"] == 1.0  # type: ignore[index]


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("_embedded")
def test_a_runs_repeats_replace_the_suites_but_not_a_cases_own() -> None:
    alice: User = UserFactory(username="alice")
    suite = (
        "name: per-case-override\nmodels: [demo]\nparadigms: [native]\nservers: [demo]\nrepeats: 5\n"
        "cases:\n  - {question: 'What is 12 * (3 + 4)?', expect: [{tool: demo/calculate}], repeats: 2}\n"
        "  - {question: 'What is 2 + 2?', expect: [{tool: demo/calculate}]}\n"
    )

    run = run_start(suite=suite_save(owner=alice, text=suite), user=alice, repeats=3, dispatch=False)

    assert run.total == 2 + 3 and run.repeats == 3
