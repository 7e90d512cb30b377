"""Two runs compared case by case: for each cell (model, paradigm, variant) both ran, each case's
passes in the baseline and in the run, and whether it regressed (passed less often), was fixed
(more often) or stayed; cells and cases only one of them ran are listed as such. What
``eval compare A B`` prints and ``eval run --baseline … --fail-on-regression`` gates on.

Cases are matched by their question (a suite edited between the runs keeps its unchanged cases
comparable even when their order moved).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from conversations.typealias import JSONDict
from inspector.evals.models import EvalCaseResult, EvalRun

CellKey = tuple[str, str, str]


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
    "change", "cases": [{"question", "baseline", "run", "change"}]}]}``; ``change`` is one of
    ``regressed``, ``fixed``, ``same``, ``new`` (not in the baseline) or ``gone`` (not in the run)."""
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
                "pass_rate": round(new.total.rate, 4) if new and new.total.rate is not None else None,
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
        "regression": regressed > 0,
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
        )
        for case in cell["cases"]:
            if case["change"] != "same":
                lines.append(
                    f"    {case['change']:<9} {case['baseline'] or '—'} → {case['run'] or '—'}  {case['question']}"
                )
    return lines
