"""The Compare view's charts: tokens, latency and cost per run (paradigm · model) side by side, as
server-rendered SVG — bars this module lays out and ``_compare_charts.html`` draws, no script and
no charting library (like :mod:`inspector.waterfall`). A run without a value (not reported, no
price) gets no bar and says so.

Laid out to be read on a projector: each run's label has a line of its own above its bar, across
the whole drawing (beside the bar, in the third of the drawing left of it, labels were cut just
where the runs differ), and the value sits just left of the bar. ``.chart-grid`` in
``static/css/comparison_detail.css`` never gives a drawing a column so narrow that FONT units
render under 12 px (tests/inspector/test_charts_layout.py checks the two together)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal

from conversations.loop.paradigms import PARADIGMS
from conversations.pricing import turn_cost
from conversations.selectors import RunSummary

WIDTH = 1000  # SVG units; bars start at LABEL_WIDTH (the value left of it) and end VALUE_WIDTH short
LABEL_WIDTH = 300
VALUE_WIDTH = 150
FONT = 20  # the text's size in SVG units (the template sets it on the drawing)
ROW = 54  # a run's label line, then its bar
BAR_HEIGHT = 22
MIN_BAR = 2
# A label at FONT is cut (at its end: what tells the runs apart comes first) to what the drawing's
# width holds at a width per character wider than a sans font's lower case and digits.
LABEL_CHARS = int(WIDTH / (FONT * 0.64))


@dataclass(frozen=True)
class ChartBar:
    y: int
    width: float
    label: str
    value: str  # the number as text, or why there is none

    @property
    def shown(self) -> str:
        """The label as drawn: cut at its end when the drawing's width cannot hold it."""
        return self.label if len(self.label) <= LABEL_CHARS else f"{self.label[: LABEL_CHARS - 1]}…"

    @property
    def label_y(self) -> int:
        return self.y + 18

    @property
    def bar_y(self) -> int:
        return self.y + 27

    @property
    def value_y(self) -> int:
        """The value's baseline, level with the middle of its bar (on the line below the label)."""
        return self.y + 45

    @property
    def value_x(self) -> int:
        """Where the value's text ends: just left of where every bar starts."""
        return LABEL_WIDTH - 8


@dataclass(frozen=True)
class Chart:
    key: str  # tokens_in, tokens_out, prompt_tokens, llm_ms, wall_ms, cost
    title: str
    bars: list[ChartBar]
    height: int

    @property
    def bar_x(self) -> int:
        return LABEL_WIDTH

    @property
    def bar_height(self) -> int:
        return BAR_HEIGHT

    @property
    def font(self) -> int:
        return FONT


def _labels(runs: Sequence[RunSummary]) -> list[str]:
    """Each run's label, what tells the runs apart first: the model profile when every run asks in
    the same paradigm and the profiles differ (Compare providers), the paradigm otherwise."""
    profile_first = len({run.paradigm for run in runs}) == 1 and len({run.profile for run in runs}) > 1
    labels = []
    for run in runs:
        paradigm = PARADIGMS[run.paradigm].label if run.paradigm in PARADIGMS else run.paradigm
        labels.append(f"{run.profile} · {paradigm}" if profile_first else f"{paradigm} · {run.profile}")
    return labels


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
            label=label,
            value=missing if v is None else text(v),
        )
        for index, (label, v) in enumerate(zip(_labels(runs), values, strict=True))
    ]
    return Chart(key, title, bars, len(bars) * ROW + 2)


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
