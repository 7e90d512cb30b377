"""A turn's timeline as a server-rendered SVG waterfall: one bar per model call and tool call, at
its start and as long as it took, with its latency and tokens, and inside it the time its own
wire exchanges took (the HTTP call to the model, the JSON-RPC call to the server), so a step that
took 3 s around a 21 ms request says so. No script and no charting library: the template draws
the bars this module lays out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from conversations.loop.providers import USAGE_INPUT_KEYS, USAGE_OUTPUT_KEYS
from conversations.models import Step

WIDTH = 1000  # the drawing's width in SVG units; the label column takes LABEL_WIDTH of it
LABEL_WIDTH = 300
ROW = 26
MIN_BAR = 2
FONT = 11  # the text's size in SVG units (.wf-detail in static/css/conversation_detail.css)
# A width per character of the latency text at FONT: as wide as the widest digit of the usual sans
# fonts (DejaVu Sans's), wider than its words' letters, so the text fits wherever it is put.
DETAIL_CHAR = FONT * 0.64
GAP = 4
DETAIL_LINE = 14  # a latency text with no room on its bar's row takes a line of this height below
# A turn of thousands of calls draws its first and last ones, one row between saying how many it
# left out (10,000 bars were 3 MB of SVG).
HEAD_BARS = 40
TAIL_BARS = 40


@dataclass(frozen=True)
class Bar:
    y: int
    x: float
    width: float
    kind: str
    label: str
    detail: str
    status: str
    # Where the latency text goes (``_detail_place``): after, before or inside the bar, or below.
    detail_place: str
    detail_x: float
    detail_y: int
    # The step's own wire exchanges inside the bar: (x, width) each.
    wire: tuple[tuple[float, float], ...] = field(default=())

    @property
    def detail_anchor(self) -> str:
        return "end" if self.detail_place == "before" else "start"


@dataclass(frozen=True)
class Waterfall:
    bars: list[Bar]
    height: int
    total_ms: float
    ticks: list[tuple[float, str]]
    calls: int = 0
    left_out: int = 0
    gap_y: int = 0


def _tokens(step: Step) -> str:
    usage = step.usage if isinstance(step.usage, dict) else {}
    tokens_in = next((usage[key] for key in USAGE_INPUT_KEYS if isinstance(usage.get(key), int)), None)
    tokens_out = next((usage[key] for key in USAGE_OUTPUT_KEYS if isinstance(usage.get(key), int)), None)
    if tokens_in is None and tokens_out is None:
        return ""
    return f" · {tokens_in or 0} in / {tokens_out or 0} out tokens"


# What a bar is drawn from: a caller may load steps with only these fields.
WATERFALL_FIELDS = (
    "turn_id",
    "parent_id",
    "seq",
    "kind",
    "status",
    "title",
    "usage",
    "started_at",
    "finished_at",
)


def _detail_place(x: float, width: float, detail: str) -> tuple[str, float]:
    """Where a bar's latency text goes, and the x it is anchored at: after the bar, else before it,
    else inside it, else on a line of its own below it — never in the label column (a bar from
    the turn's start to near its end has no room before it, and its text used to land on the
    labels)."""
    text = len(detail) * DETAIL_CHAR
    if x + width + GAP + text <= WIDTH:
        return "after", x + width + GAP
    if x - GAP - text >= LABEL_WIDTH + GAP:
        return "before", x - GAP
    if width >= text + 2 * GAP:
        return "inside", x + GAP
    return "below", max(LABEL_WIDTH + GAP, min(x, WIDTH - text))


# One wire exchange's timing, as the bars read it: (step id, started at, duration in ms).
WireTiming = tuple[int | None, datetime, float | None]


def turn_waterfall(
    steps: Sequence[Step],
    wire: Sequence[WireTiming] = (),
    *,
    left_out: int = 0,
    span: tuple[datetime, datetime] | None = None,
) -> Waterfall | None:
    """The bars of ``steps`` (every step of one turn, children included) that have finished,
    with the timings of their wire exchanges (``wire``) drawn inside; None when there is
    nothing to draw. With ``left_out``, ``steps`` are the first ``HEAD_BARS`` and the last
    ``TAIL_BARS`` of the turn's timed steps, ``left_out`` more were between them, and ``span``
    is when the first of all started and the last ended."""
    timed = [step for step in steps if step.finished_at is not None and step.kind != "fallback"]
    if not timed:
        return None
    start = min(step.started_at for step in timed) if span is None else span[0]
    end = max(step.finished_at for step in timed if step.finished_at is not None) if span is None else span[1]
    total_ms = max((end - start).total_seconds() * 1000, 1.0)
    scale = (WIDTH - LABEL_WIDTH) / total_ms
    timings: dict[int, list[tuple[datetime, float]]] = {}
    for step_id, started_at, duration_ms in wire:
        if step_id is not None and duration_ms is not None:
            timings.setdefault(step_id, []).append((started_at, duration_ms))
    ordered = sorted(timed, key=lambda s: (s.started_at, s.seq))
    if not left_out:
        left_out = max(len(ordered) - HEAD_BARS - TAIL_BARS, 0)
        ordered = [*ordered[:HEAD_BARS], *ordered[-TAIL_BARS:]] if left_out else ordered
    drawn = ordered
    bars = []
    y = 0
    gap_y = 0
    for place, step in enumerate(drawn):
        assert step.finished_at is not None
        if left_out and place == HEAD_BARS:
            # The row after the first ones says how many were left out.
            gap_y = y + 16
            y += ROW
        offset = (step.started_at - start).total_seconds() * 1000
        took = (step.finished_at - step.started_at).total_seconds() * 1000
        kind = "tool" if step.parent_id else step.kind
        own = timings.get(step.pk, [])
        on_wire = sum(duration for _, duration in own)
        wire_text = f" · {on_wire:,.0f} ms on the wire" if own else ""
        x = LABEL_WIDTH + offset * scale
        width = max(took * scale, MIN_BAR)
        detail = f"{took:,.0f} ms{wire_text}{_tokens(step)}"
        detail_place, detail_x = _detail_place(x, width, detail)
        below = detail_place == "below"
        bars.append(
            Bar(
                y=y,
                x=x,
                width=width,
                kind=kind,
                label=f"{'  ' if step.parent_id else ''}#{step.seq} {step.title}"[:48],
                detail=detail,
                status=step.status,
                detail_place=detail_place,
                detail_x=detail_x,
                detail_y=y + ROW + 6 if below else y + 16,
                wire=tuple(
                    (
                        LABEL_WIDTH + (at - start).total_seconds() * 1000 * scale,
                        max(duration * scale, MIN_BAR / 2),
                    )
                    for at, duration in own
                ),
            )
        )
        y += ROW + (DETAIL_LINE if below else 0)
    ticks = [
        (LABEL_WIDTH + (WIDTH - LABEL_WIDTH) * part / 4, f"{total_ms * part / 4:,.0f} ms")
        for part in range(5)
    ]
    return Waterfall(bars, y + 20, total_ms, ticks, len(drawn) + left_out, left_out, gap_y)
