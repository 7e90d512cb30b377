"""The Compare view's charts: tokens, latency and cost per run (paradigm · model) side by side, as
server-rendered SVG — bars this module lays out and ``_compare_charts.html`` draws, no script and
no charting library (like :mod:`inspector.waterfall`). A run without a value (not reported, no
price) gets no bar and says so."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal

from conversations.loop.paradigms import PARADIGMS
from conversations.pricing import turn_cost
from conversations.selectors import RunSummary

WIDTH = 1000  # SVG units; the label column takes LABEL_WIDTH of it, the value text VALUE_WIDTH
LABEL_WIDTH = 300
VALUE_WIDTH = 150
ROW = 26
MIN_BAR = 2


@dataclass(frozen=True)
class ChartBar:
    y: int
    width: float
    label: str
    value: str  # the number as text, or why there is none

    @property
    def value_x(self) -> float:
        """Where the value's text starts: after the bar, or where the bar would be."""
        return LABEL_WIDTH + self.width + 6 if self.width else LABEL_WIDTH


@dataclass(frozen=True)
class Chart:
    key: str  # tokens_in, tokens_out, prompt_tokens, llm_ms, wall_ms, cost
    title: str
    bars: list[ChartBar]
    height: int

    @property
    def bar_x(self) -> int:
        return LABEL_WIDTH


def _label(run: RunSummary) -> str:
    paradigm = PARADIGMS[run.paradigm].label if run.paradigm in PARADIGMS else run.paradigm
    return f"{paradigm} · {run.profile}"[:44]


def _chart(
    key: str,
    title: str,
    runs: Sequence[RunSummary],
    value: Callable[[RunSummary], float | None],
    text: Callable[[float], str],
    missing: str,
) -> Chart:
    values = [value(run) for run in runs]
    top = max((v for v in values if v is not None), default=0.0)
    scale = (WIDTH - LABEL_WIDTH - VALUE_WIDTH) / top if top > 0 else 0.0
    bars = [
        ChartBar(
            y=index * ROW,
            width=0.0 if v is None else max(v * scale, MIN_BAR),
            label=_label(run),
            value=missing if v is None else text(v),
        )
        for index, (run, v) in enumerate(zip(runs, values, strict=True))
    ]
    return Chart(key, title, bars, len(bars) * ROW + 4)


def _cost(run: RunSummary) -> float | None:
    cost = None if run.turn is None else turn_cost(run.turn, run.conversation.model_profile)
    return None if cost is None else float(cost.total)


def _count(value: float) -> str:
    return f"{value:,.0f}"


def _ms(value: float) -> str:
    return f"{value:,.0f} ms"


def _dollars(value: float) -> str:
    return f"${Decimal(str(value)):.6f}" if value < 1 else f"${value:,.2f}"


def _int_or_none(value: int | None) -> float | None:
    return None if value is None else float(value)


def comparison_charts(runs: Sequence[RunSummary]) -> list[Chart]:
    """One chart per measure, each with a bar per run in run order; none without runs."""
    if not runs:
        return []
    return [
        _chart(
            "tokens_in",
            "Tokens in (as reported)",
            runs,
            lambda r: _int_or_none(r.tokens_in),
            _count,
            "not reported",
        ),
        _chart(
            "tokens_out",
            "Tokens out (as reported)",
            runs,
            lambda r: _int_or_none(r.tokens_out),
            _count,
            "not reported",
        ),
        _chart(
            "prompt_tokens",
            "Spliced prompt tokens (counted offline)",
            runs,
            lambda r: _int_or_none(r.prompt_tokens),
            _count,
            "not counted",
        ),
        _chart("llm_ms", "Latency of the model calls", runs, lambda r: r.llm_ms, _ms, "not timed"),
        _chart("wall_ms", "Latency of the whole turn", runs, lambda r: r.wall_ms, _ms, "not finished"),
        _chart("cost", "Cost at the profile's prices", runs, _cost, _dollars, "no price or no usage"),
    ]
