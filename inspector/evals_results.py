"""What the eval pages build from an eval run's rows: the matrix (a row per model × paradigm, a
column per description variant, each cell's accuracy band and failure counts), the variants side
by side with their token cost and overriding text, the failing cases with their conversations, a
run's progress, and a suite's runs over time as a server-rendered SVG bar chart with regressions
flagged (no script and no charting library, like :mod:`inspector.charts`).

A regression is a done run in which some cell (the same model, paradigm and variant) passed
below the 95% interval of its pass rate in the suite's previous done run
(``evals.selectors.run_previous``): the gate's rule, ``evals.comparing.below_baseline``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from conversations.escaping import hidden_characters
from conversations.typealias import JSONDict, JSONValue
from inspector.evals import comparing
from inspector.evals import selectors as eval_selectors
from inspector.evals.models import EvalCaseResult, EvalRun, Suite

HISTORY_RUNS = 30  # the suite page charts its newest runs, up to this many
BANDS = 4  # accuracy bands above zero: acc-0 (< 25 %) … acc-4 (100 %)
CHART_WIDTH = 600  # SVG units; the chart sits in the suite page's narrow column
CHART_HEIGHT = 160
CHART_TOP = 26  # room for the value above the tallest bar
CHART_GAP = 8
CHART_BAR_MAX = 60
STATUS_TONES = {
    EvalRun.Status.DONE: "ok",
    EvalRun.Status.FAILED: "error",
    EvalRun.Status.CANCELLED: "error",
    EvalRun.Status.QUEUED: "busy",
    EvalRun.Status.RUNNING: "busy",
}

FAILURE_LABELS = dict(EvalCaseResult.Failure.choices)

CellKey = tuple[str, str, str]  # model, paradigm, variant


def any_hidden(*texts: str) -> bool:
    """Whether any of ``texts`` holds an invisible or bidirectional character: its row then
    carries the hidden-characters note (the characters themselves are marked wherever a page
    shows them, ``inspector.templating``)."""
    return any(hidden_characters(text) for text in texts)


def accuracy_text(accuracy: float | None) -> str:
    return "—" if accuracy is None else f"{accuracy * 100:.0f}%"


def accuracy_band(accuracy: float | None) -> str:
    """The CSS band of an accuracy: ``none``, or 0..4 where only a perfect cell is 4."""
    if accuracy is None:
        return "none"
    if accuracy >= 1:
        return str(BANDS)
    return str(min(int(accuracy * BANDS), BANDS - 1))


@dataclass(frozen=True)
class Progress:
    """A run's progress as the page shows it: case runs ended of all, and whether the run is over."""

    status: str
    total: int
    ended: int  # case runs that have ended (passed or failed)
    passed: int
    running: int
    done: bool  # the run is over (done, failed or cancelled)

    @property
    def percent(self) -> int:
        if not self.total:
            return 100 if self.done else 0
        return min(100, self.ended * 100 // self.total)

    def as_json(self) -> JSONDict:
        """``evals.selectors.run_progress``'s fields (``finished``: case runs ended), plus
        ``done`` (the run is over) and ``percent``."""
        return {
            "status": self.status,
            "total": self.total,
            "finished": self.ended,
            "passed": self.passed,
            "running": self.running,
            "done": self.done,
            "percent": self.percent,
        }


def run_progress(run: EvalRun) -> Progress:
    progress = eval_selectors.run_progress(run=run)
    total = progress["total"]
    return Progress(
        status=progress["status"],
        total=total,
        ended=min(progress["finished"], total) if total else progress["finished"],
        passed=progress["passed"],
        running=progress["running"],
        done=run.is_finished,
    )


def _int(value: JSONValue) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _list(value: JSONValue) -> list[JSONValue]:
    return value if isinstance(value, list) else []


def _decimal(value: JSONValue) -> Decimal | None:
    try:
        return Decimal(value) if isinstance(value, str) else None
    except ArithmeticError:
        return None


@dataclass(frozen=True)
class CellView:
    """One cell of the matrix, from a cell of ``evals.selectors.run_results``."""

    variant: str
    cases: int
    passed: int
    accuracy: float | None
    failures: list[tuple[str, int]]
    input_tokens: int
    output_tokens: int
    cost: Decimal | None
    latency_ms: int | None  # the mean per case run
    regression: bool
    previous_accuracy: float | None

    @classmethod
    def from_json(cls, cell: JSONDict) -> CellView:
        accuracy = cell.get("accuracy")
        previous = cell.get("previous_accuracy")
        latency = cell.get("latency_ms")
        return cls(
            variant=str(cell.get("variant", "")),
            cases=_int(cell.get("finished")),
            passed=_int(cell.get("passed")),
            accuracy=float(accuracy) if isinstance(accuracy, (int, float)) else None,
            failures=[
                (str(label), _int(cell.get(key)))
                for key, label in FAILURE_LABELS.items()
                if _int(cell.get(key))
            ],
            input_tokens=_int(cell.get("input_tokens")),
            output_tokens=_int(cell.get("output_tokens")),
            cost=_decimal(cell.get("cost")),
            latency_ms=latency if isinstance(latency, int) else None,
            regression=cell.get("regression") is True,
            previous_accuracy=float(previous) if isinstance(previous, (int, float)) else None,
        )

    @property
    def accuracy_text(self) -> str:
        return accuracy_text(self.accuracy)

    @property
    def accuracy_value(self) -> str:
        return "" if self.accuracy is None else f"{self.accuracy:.4f}"

    @property
    def band(self) -> str:
        return accuracy_band(self.accuracy)

    @property
    def previous_text(self) -> str:
        return accuracy_text(self.previous_accuracy)

    @property
    def measures(self) -> str:
        parts = [f"{self.input_tokens:,} in · {self.output_tokens:,} out tokens"]
        if self.cost is not None:
            parts.append(_dollars(self.cost))
        if self.latency_ms is not None:
            parts.append(f"{self.latency_ms:,} ms per case")
        return " · ".join(parts)


@dataclass(frozen=True)
class MatrixRow:
    model: str
    paradigm: str
    cells: list[CellView | None]  # one per variant, in the matrix's column order

    @property
    def hidden(self) -> bool:
        return any_hidden(self.model, *(cell.variant for cell in self.cells if cell is not None))


@dataclass(frozen=True)
class Override:
    target: str  # server/tool, or server/tool · parameter
    field: str  # what the text replaces
    text: str

    @property
    def hidden(self) -> bool:
        return any_hidden(self.target, self.text)


@dataclass
class VariantView:
    name: str
    overrides: list[Override]
    case_runs: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    definition_tokens: int = 0
    definition_requests: int = 0
    definition_cost: Decimal | None = None
    cost: Decimal | None = None

    @property
    def hidden(self) -> bool:
        return any_hidden(self.name) or any(override.hidden for override in self.overrides)

    @property
    def cost_text(self) -> str:
        if not self.case_runs:
            return "not run"
        runs = self.case_runs
        # Per model request: what the wording weighs in each request. Per case run it also
        # counts how many requests a case made, which its outcome changes.
        if self.definition_requests:
            per_request = self.definition_tokens / self.definition_requests
            definitions = (
                f"tool definitions {per_request:,.0f} tokens per model request "
                f"({self.definition_tokens / runs:,.0f} per case run)"
            )
        else:
            definitions = f"tool definitions {self.definition_tokens / runs:,.0f} tokens per case run"
        if self.definition_cost is not None:
            definitions += f" ({_dollars(self.definition_cost)} in all)"
        text = (
            f"{definitions} · {self.input_tokens:,} in ({self.input_tokens / runs:,.0f} per case run) · "
            f"{self.output_tokens:,} out"
        )
        return text + (f" · {_dollars(self.cost)}" if self.cost is not None else " · no price")


@dataclass(frozen=True)
class FailureView:
    model: str
    paradigm: str
    variant: str
    question: str
    repeat: int
    kind: str
    reason: str
    conversation_id: str | None
    judge_conversation_id: str | None = None  # where the case's judge was asked, if it has one

    @property
    def hidden(self) -> bool:
        return any_hidden(self.model, self.variant, self.question, self.reason)


@dataclass(frozen=True)
class RunResults:
    variants: list[VariantView]
    rows: list[MatrixRow]
    failures: list[FailureView]
    error: str
    regression: bool


def _dollars(value: Decimal) -> str:
    return f"${value:.6f}" if value < 1 else f"${value:,.2f}"


def _add_cost(total: Decimal | None, cost: Decimal | None) -> Decimal | None:
    if cost is None:
        return total
    return cost if total is None else total + cost


def _overrides(raw: JSONValue) -> list[Override]:
    """A variant's overrides (``{"server/tool": {"description": text, "parameters": {name:
    text}}}``) as lines of text; anything unexpected is shown as it is."""
    if not isinstance(raw, dict):
        return []
    found: list[Override] = []
    for target, override in sorted(raw.items()):
        if not isinstance(override, dict):
            found.append(Override(target, "override", str(override)))
            continue
        description = override.get("description")
        if isinstance(description, str):
            found.append(Override(target, "description", description))
        parameters = override.get("parameters")
        if isinstance(parameters, dict):
            for name, value in sorted(parameters.items()):
                text = value.get("description") if isinstance(value, dict) else value
                found.append(Override(f"{target} · {name}", "parameter description", str(text)))
    return found


def _variant_overrides(run: EvalRun) -> dict[str, JSONValue]:
    """The variants of the document the run ran (frozen when it started)."""
    definition = run.definition if isinstance(run.definition, dict) else {}
    variants = definition.get("variants")
    return dict(variants) if isinstance(variants, dict) else {}


def run_results(run: EvalRun, document: JSONDict) -> RunResults:
    """The matrix, the variants and the failing cases of one run, from the results document the
    CLI and the API give (``evals.selectors.run_results``; the pages read it audited,
    ``evals.services.run_results_read``)."""
    cells = [cell for cell in _list(document.get("cells")) if isinstance(cell, dict)]
    overrides = _variant_overrides(run)
    variants: dict[str, VariantView] = {}
    grid: dict[tuple[str, str], dict[str, CellView]] = {}
    failures: list[FailureView] = []
    for cell in cells:
        view = CellView.from_json(cell)
        model, paradigm = str(cell.get("model", "")), str(cell.get("paradigm", ""))
        variant = variants.setdefault(
            view.variant, VariantView(view.variant, _overrides(overrides.get(view.variant)))
        )
        variant.case_runs += view.cases
        variant.input_tokens += view.input_tokens
        variant.output_tokens += view.output_tokens
        variant.definition_tokens += _int(cell.get("definition_tokens"))
        variant.definition_requests += _int(cell.get("definition_requests"))
        variant.definition_cost = _add_cost(variant.definition_cost, _decimal(cell.get("definition_cost")))
        variant.cost = _add_cost(variant.cost, view.cost)
        grid.setdefault((model, paradigm), {})[view.variant] = view
        for failure in _list(cell.get("failures")):
            if not isinstance(failure, dict):
                continue
            kind = str(failure.get("failure", ""))
            conversation = failure.get("conversation")
            judged = failure.get("judge_conversation")
            failures.append(
                FailureView(
                    model=model,
                    paradigm=paradigm,
                    variant=view.variant,
                    question=str(failure.get("question", "")),
                    repeat=_int(failure.get("repeat")),
                    kind=str(FAILURE_LABELS.get(kind, kind or "failed")),
                    reason=str(failure.get("reason", "")),
                    conversation_id=conversation if isinstance(conversation, str) else None,
                    judge_conversation_id=judged if isinstance(judged, str) else None,
                )
            )
    columns = list(variants)
    rows = [
        MatrixRow(model, paradigm, [by_variant.get(name) for name in columns])
        for (model, paradigm), by_variant in grid.items()
    ]
    return RunResults(list(variants.values()), rows, failures, run.error, document.get("regression") is True)


# ---- a suite's runs over time --------------------------------------------------------------------


@dataclass(frozen=True)
class HistoryRow:
    run: EvalRun
    passed: int
    cases: int
    regressed_cells: list[str]

    @property
    def accuracy(self) -> float | None:
        return self.passed / self.cases if self.cases else None

    @property
    def accuracy_text(self) -> str:
        return accuracy_text(self.accuracy)

    @property
    def regressed(self) -> bool:
        return bool(self.regressed_cells)

    @property
    def status(self) -> str:
        return str(self.run.get_status_display())

    @property
    def tone(self) -> str:
        return STATUS_TONES.get(EvalRun.Status(self.run.status), "busy")


@dataclass(frozen=True)
class HistoryBar:
    x: float
    y: float
    height: float
    label_y: float
    value: str
    title: str
    regressed: bool
    finished: bool


@dataclass(frozen=True)
class HistoryChart:
    bars: list[HistoryBar]
    bar_width: float
    width: int = CHART_WIDTH
    height: int = CHART_HEIGHT
    baseline: int = CHART_HEIGHT - 2


@dataclass(frozen=True)
class History:
    rows: list[HistoryRow]  # newest first, as the table lists them
    chart: HistoryChart

    @property
    def runs(self) -> int:
        return len(self.rows)

    @property
    def regressions(self) -> int:
        return sum(row.regressed for row in self.rows)


def regressed_cells(
    cells: dict[CellKey, tuple[int, int]], baseline: dict[CellKey, tuple[int, int]]
) -> list[str]:
    """The cells below the baseline's interval (``comparing.below_baseline``, the gate's rule),
    as ``model · paradigm · variant: a → b`` (their pass rates)."""
    return [
        f"{' · '.join(key)}: {accuracy_text(baseline[key][0] / baseline[key][1])} → "
        f"{accuracy_text(cells[key][0] / cells[key][1])}"
        for key in comparing.cells_below_baseline(cells, baseline)
    ]


def _chart(rows: Sequence[HistoryRow]) -> HistoryChart:
    """Bars oldest first, left to right; a bar's height is its run's accuracy."""
    count = max(len(rows), 1)
    slot = min(CHART_WIDTH / count, CHART_BAR_MAX + CHART_GAP)
    width = max(slot - CHART_GAP, 2.0)
    usable = CHART_HEIGHT - CHART_TOP - 2
    bars = []
    for index, row in enumerate(rows):
        accuracy = row.accuracy or 0.0
        height = max(accuracy * usable, 2.0)
        y = CHART_HEIGHT - 2 - height
        when = row.run.created_at.strftime("%Y-%m-%d %H:%M")
        flag = " — regression: " + "; ".join(row.regressed_cells) if row.regressed else ""
        bars.append(
            HistoryBar(
                x=index * slot,
                y=y,
                height=height,
                label_y=max(y - 5, 20.0),
                value=row.accuracy_text,
                title=f"{when}: {row.accuracy_text} ({row.passed}/{row.cases}, {row.status}){flag}",
                regressed=row.regressed,
                finished=row.run.is_finished,
            )
        )
    return HistoryChart(bars=bars, bar_width=width)


def suite_history(suite: Suite, *, limit: int = HISTORY_RUNS) -> History:
    """The suite's newest runs with their accuracy, each done run compared with the done run
    before it by the gate's rule (``comparing.history_compared``: three queries, however many
    runs)."""
    runs = list(EvalRun.objects.filter(suite=suite).order_by("-created_at", "-id")[:limit])
    runs.reverse()  # oldest first: each is compared with what came before
    before = eval_selectors.run_previous(run=runs[0]) if runs else None
    oldest_first = [
        HistoryRow(
            run=entry.run,
            passed=sum(passed for passed, _ in entry.cells.values()),
            cases=sum(ended for _, ended in entry.cells.values()),
            regressed_cells=regressed_cells(entry.cells, entry.baseline)
            if entry.baseline is not None
            else [],
        )
        for entry in comparing.history_compared(runs, before=before)
    ]
    return History(rows=list(reversed(oldest_first)), chart=_chart(oldest_first))


@dataclass(frozen=True)
class SuiteRow:
    suite: Suite
    cases: int
    last_run: EvalRun | None

    @property
    def hidden(self) -> bool:
        return any_hidden(self.suite.name)

    @property
    def last_run_text(self) -> str:
        run = self.last_run
        if run is None:
            return ""
        if not run.is_finished:
            return f"{run.get_status_display()} ({run.finished}/{run.total})"
        accuracy = run.passed / run.finished if run.finished else None
        return f"{accuracy_text(accuracy)} · {run.created_at:%Y-%m-%d %H:%M}"


def suite_rows(suites: Iterable[Suite]) -> list[SuiteRow]:
    suites = list(suites)
    latest: dict[int, EvalRun] = {}
    for run in EvalRun.objects.filter(suite__in=suites).order_by("suite_id", "-created_at", "-id"):
        latest.setdefault(run.suite_id, run)
    return [SuiteRow(suite, _case_count(suite.definition), latest.get(suite.pk)) for suite in suites]


def _case_count(definition: JSONValue) -> int:
    cases = definition.get("cases") if isinstance(definition, dict) else None
    return len(cases) if isinstance(cases, list) else 0


@dataclass(frozen=True)
class SuiteSummary:
    models: list[str]
    paradigms: list[str]
    servers: list[str]
    variants: list[str]
    cases: int

    @property
    def cells(self) -> int:
        return len(self.models) * len(self.paradigms) * max(len(self.variants), 1)


def _strings(value: JSONValue) -> list[str]:
    if isinstance(value, dict):
        return [str(key) for key in value]
    return [str(item) for item in value] if isinstance(value, list) else []


def suite_summary(definition: JSONValue) -> SuiteSummary:
    """What a stored suite definition names, for the suite page's header."""
    data = definition if isinstance(definition, dict) else {}
    return SuiteSummary(
        models=_strings(data.get("models")),
        paradigms=_strings(data.get("paradigms")),
        servers=_strings(data.get("servers")),
        variants=_strings(data.get("variants")) or ["default"],
        cases=_case_count(data),
    )


# --- Two runs compared (the page of ``eval compare``) ---------------------------------------------

CHANGE_TONES = {"regressed": "error", "fixed": "ok", "same": "plain", "new": "plain", "gone": "plain"}


@dataclass(frozen=True)
class BaselineChoice:
    run: EvalRun
    chosen: bool

    @property
    def label(self) -> str:
        return f"{self.run.created_at:%Y-%m-%d %H:%M:%S} · {self.run.status} · {self.run.passed}/{self.run.total} passed"


def baseline_choices(run: EvalRun, chosen: EvalRun | None) -> list[BaselineChoice]:
    """The runs ``run`` may be compared with on its page: the suite's other runs (its owner's,
    newest first, at most ``HISTORY_RUNS``), ``chosen`` (default: the run before it) marked."""
    chosen = chosen or eval_selectors.run_previous(run=run)
    runs = (
        EvalRun.objects.filter(suite_id=run.suite_id, owner_id=run.owner_id)
        .exclude(pk=run.pk)
        .order_by("-created_at", "-pk")[:HISTORY_RUNS]
    )
    return [BaselineChoice(other, chosen is not None and other.pk == chosen.pk) for other in runs]


def comparison_view(comparison: dict[str, Any]) -> dict[str, Any]:
    """``evals.comparing.runs_compare``'s document, for the page: each cell and case with its
    change's tone and whether it holds invisible characters, each cell's changes counted."""
    cells = []
    for cell in comparison["cells"]:
        cases = [
            {
                **case,
                "tone": CHANGE_TONES.get(case["change"], "plain"),
                "hidden": any_hidden(case["question"]),
            }
            for case in cell["cases"]
        ]
        counts = Counter(case["change"] for case in cases)
        cells.append(
            {
                **cell,
                "cases": cases,
                "tone": CHANGE_TONES.get(cell["change"], "plain"),
                "hidden": any_hidden(cell["model"], cell["variant"]),
                "counts": [(change, counts[change]) for change in CHANGE_TONES if counts[change]],
            }
        )
    return {**comparison, "cells": cells}
