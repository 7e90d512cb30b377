"""Two runs compared case by case: for each cell (model, paradigm, variant) both ran, each case's
passes in the baseline and in the run, and whether it regressed (passed less often), was fixed
(more often) or stayed; cells and cases only one of them ran are listed as such. What
``eval compare A B`` prints and ``eval run --baseline … --fail-on-regression`` gates on.

The gate is a cell's pass rate below the 95% (Wilson) interval of the same cell's pass rate in
the baseline (``below_baseline``), not any one case passing less often: with repeats a model
that passed a case 9 times in 10 and now 8 would otherwise fail CI on noise (decision 0390).
The cases that flipped are listed either way.

Cases are matched by their question (a suite edited between the runs keeps its unchanged cases
comparable even when their order moved).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count, Q

from conversations.typealias import JSONDict
from inspector.evals.models import EvalCaseResult, EvalCell, EvalRun
from inspector.evals.statistics import wilson_interval

CellKey = tuple[str, str, str]
# A cell's case runs: (passed, ended).
Tally = tuple[int, int]


def below_baseline(run: Tally, baseline: Tally) -> bool:
    """The regression rule, the only one (decision 0390): a cell's pass rate is below the low end
    of the 95% (Wilson) interval of the same cell's pass rate in the baseline. False when either
    has no ended case run. The gate, ``eval compare``, a run's JSON and the suite's history ask it."""
    interval = wilson_interval(*baseline)
    passed, ended = run
    return interval is not None and ended > 0 and passed / ended < interval[0]


def cells_below_baseline(run: Mapping[CellKey, Tally], baseline: Mapping[CellKey, Tally]) -> list[CellKey]:
    """The cells of ``run`` that ``baseline`` ran too and that are ``below_baseline``, in ``run``'s order."""
    return [key for key, tally in run.items() if key in baseline and below_baseline(tally, baseline[key])]


def runs_cell_tallies(runs: Iterable[EvalRun]) -> dict[int, dict[CellKey, Tally]]:
    """Per run (by id), per cell key: its case runs' ``(passed, ended)``, one query for all the
    runs (cells of the same key in one run summed, as ``runs_compare`` sums them)."""
    ended = Q(results__status__in=[EvalCaseResult.Status.PASSED, EvalCaseResult.Status.FAILED])
    rows = (
        EvalCell.objects.filter(run__in=list(runs))
        .order_by("run_id", "position")
        .values("run_id", "model", "paradigm", "variant")
        .annotate(
            passed=Count("results", filter=Q(results__status=EvalCaseResult.Status.PASSED)),
            ended=Count("results", filter=ended),
        )
    )
    tallies: dict[int, dict[CellKey, Tally]] = defaultdict(dict)
    for row in rows:
        key = (str(row["model"]), str(row["paradigm"]), str(row["variant"]))
        passed, count = tallies[row["run_id"]].get(key, (0, 0))
        tallies[row["run_id"]][key] = (passed + int(row["passed"]), count + int(row["ended"]))
    return dict(tallies)


@dataclass(frozen=True)
class HistoryEntry:
    """One run of a suite's history: its cells' tallies, the done run it is compared with (None:
    not compared, being the first or not done) and the cells below that run's interval."""

    run: EvalRun
    cells: dict[CellKey, Tally]
    baseline: dict[CellKey, Tally] | None
    below: list[CellKey]


def history_compared(runs: Sequence[EvalRun], *, before: EvalRun | None) -> list[HistoryEntry]:
    """``runs`` of one suite, oldest first, each done one compared with the done run before it
    (``before``: the one before the first of ``runs``, ``selectors.run_previous``) by
    ``below_baseline``; two queries at most, however many runs."""
    tallies = runs_cell_tallies([*runs, *([before] if before is not None else [])])
    previous = tallies.get(before.pk, {}) if before is not None else None
    entries: list[HistoryEntry] = []
    for run in runs:
        cells = tallies.get(run.pk, {})
        done = run.status == EvalRun.Status.DONE
        baseline = previous if done else None
        below = cells_below_baseline(cells, baseline) if baseline is not None else []
        entries.append(HistoryEntry(run=run, cells=cells, baseline=baseline, below=below))
        if done:
            previous = cells
    return entries


@dataclass
class _Tally:
    passed: int = 0
    ended: int = 0

    @property
    def rate(self) -> float | None:
        return self.passed / self.ended if self.ended else None

    def text(self) -> str:
        return f"{self.passed}/{self.ended}"


@dataclass
class _Cell:
    cases: dict[str, _Tally] = field(default_factory=lambda: defaultdict(_Tally))

    @property
    def total(self) -> _Tally:
        return _Tally(sum(t.passed for t in self.cases.values()), sum(t.ended for t in self.cases.values()))


def _tallies(run: EvalRun) -> dict[CellKey, _Cell]:
    cells: dict[CellKey, _Cell] = defaultdict(_Cell)
    results = (
        EvalCaseResult.objects.filter(cell__run=run)
        .select_related("cell")
        .order_by("cell__position", "case_index")
    )
    for result in results:
        key = (result.cell.model, result.cell.paradigm, result.cell.variant)
        tally = cells[key].cases[result.question]
        if result.is_finished:
            tally.ended += 1
            tally.passed += result.status == EvalCaseResult.Status.PASSED
    return cells


def _change(before: _Tally | None, after: _Tally | None) -> str:
    if before is None or not before.ended:
        return "new"
    if after is None or not after.ended:
        return "gone"
    assert before.rate is not None and after.rate is not None
    if after.rate < before.rate:
        return "regressed"
    if after.rate > before.rate:
        return "fixed"
    return "same"


def runs_compare(baseline: EvalRun, run: EvalRun) -> JSONDict:
    """``{"baseline", "run", "regression", "regressed", "fixed", "cells": [{"model", "paradigm",
    "variant", "baseline", "run" ("passed/ended" or null), "baseline_pass_rate", "pass_rate",
    "baseline_pass_rate_ci" ([low, high] or null), "below_baseline", "change", "cases":
    [{"question", "baseline", "run", "change"}]}]}``; ``change`` is one of ``regressed``,
    ``fixed``, ``same``, ``new`` (not in the baseline) or ``gone`` (not in the run);
    ``regression`` is whether any cell is ``below_baseline`` (its pass rate under the low end of
    the baseline cell's 95% interval)."""
    before, after = _tallies(baseline), _tallies(run)
    cells: list[dict[str, Any]] = []
    for key in [*after, *(key for key in before if key not in after)]:
        old, new = before.get(key), after.get(key)
        questions = list(dict.fromkeys([*(new.cases if new else {}), *(old.cases if old else {})]))
        cases: list[dict[str, Any]] = []
        for question in questions:
            was = old.cases.get(question) if old else None
            now = new.cases.get(question) if new else None
            cases.append(
                {
                    "question": question,
                    "baseline": was.text() if was else None,
                    "run": now.text() if now else None,
                    "change": _change(was, now),
                }
            )
        changes = {case["change"] for case in cases}
        interval = wilson_interval(old.total.passed, old.total.ended) if old else None
        rate = new.total.rate if new else None
        cells.append(
            {
                "model": key[0],
                "paradigm": key[1],
                "variant": key[2],
                "baseline": old.total.text() if old else None,
                "run": new.total.text() if new else None,
                "baseline_pass_rate": round(old.total.rate, 4)
                if old and old.total.rate is not None
                else None,
                "pass_rate": round(rate, 4) if rate is not None else None,
                "baseline_pass_rate_ci": [round(interval[0], 4), round(interval[1], 4)] if interval else None,
                "below_baseline": old is not None
                and new is not None
                and below_baseline((new.total.passed, new.total.ended), (old.total.passed, old.total.ended)),
                "change": (
                    "new"
                    if old is None
                    else "gone"
                    if new is None
                    else "regressed"
                    if "regressed" in changes
                    else "fixed"
                    if "fixed" in changes
                    else "same"
                ),
                "cases": cases,
            }
        )
    regressed = sum(1 for cell in cells for case in cell["cases"] if case["change"] == "regressed")
    fixed = sum(1 for cell in cells for case in cell["cases"] if case["change"] == "fixed")
    return {
        "baseline": str(baseline.public_id),
        "run": str(run.public_id),
        "regression": any(cell["below_baseline"] for cell in cells),
        "regressed": regressed,
        "fixed": fixed,
        "cells": cells,  # type: ignore[dict-item]
    }


def comparison_lines(comparison: dict[str, Any]) -> list[str]:
    """The comparison as lines for a terminal: every cell, and every case that changed."""
    lines = [
        f"baseline {comparison['baseline']} → run {comparison['run']}: "
        f"{comparison['regressed']} case(s) regressed, {comparison['fixed']} fixed"
    ]
    for cell in comparison["cells"]:
        lines.append(
            f"{cell['model']} · {cell['paradigm']} · {cell['variant']}: "
            f"{cell['baseline'] or '—'} → {cell['run'] or '—'}  {cell['change']}"
            + (
                f", below the baseline's 95% interval [{cell['baseline_pass_rate_ci'][0]:.2f}, "
                f"{cell['baseline_pass_rate_ci'][1]:.2f}]"
                if cell.get("below_baseline")
                else ""
            )
        )
        for case in cell["cases"]:
            if case["change"] != "same":
                lines.append(
                    f"    {case['change']:<9} {case['baseline'] or '—'} → {case['run'] or '—'}  {case['question']}"
                )
    return lines


def regression_message(comparison: dict[str, Any]) -> str:
    """Why the gate failed: the cells below their baseline's interval and the cases that flipped."""
    below = [cell for cell in comparison["cells"] if cell["below_baseline"]]
    flipped = [case["question"] for cell in below for case in cell["cases"] if case["change"] == "regressed"]
    names = "; ".join(
        f"{cell['model']} · {cell['paradigm']} · {cell['variant']} {cell['baseline']} → {cell['run']}"
        for cell in below
    )
    return (
        f"{len(below)} cell(s) passed below the baseline run {comparison['baseline']}'s 95% "
        f"interval: {names}; the cases that flipped: {' | '.join(flipped) or 'none'}"
    )
