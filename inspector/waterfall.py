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
    # The step's own wire exchanges inside the bar: (x, width) each.
    wire: tuple[tuple[float, float], ...] = field(default=())

    @property
    def detail_anchor(self) -> str:
        """Where the latency text goes: after the bar, or before it when the bar ends near the edge."""
        return "end" if self.x + self.width > WIDTH - 180 else "start"

    @property
    def detail_x(self) -> float:
        return self.x - 4 if self.detail_anchor == "end" else self.x + self.width + 4


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
    for place, step in enumerate(drawn):
        assert step.finished_at is not None
        # The row after the first ones says how many were left out.
        index = place + 1 if left_out and place >= HEAD_BARS else place
        offset = (step.started_at - start).total_seconds() * 1000
        took = (step.finished_at - step.started_at).total_seconds() * 1000
        kind = "tool" if step.parent_id else step.kind
        own = timings.get(step.pk, [])
        on_wire = sum(duration for _, duration in own)
        wire_text = f" · {on_wire:,.0f} ms on the wire" if own else ""
        bars.append(
            Bar(
                y=index * ROW,
                x=LABEL_WIDTH + offset * scale,
                width=max(took * scale, MIN_BAR),
                kind=kind,
                label=f"{'  ' if step.parent_id else ''}#{step.seq} {step.title}"[:48],
                detail=f"{took:,.0f} ms{wire_text}{_tokens(step)}",
                status=step.status,
                wire=tuple(
                    (
                        LABEL_WIDTH + (at - start).total_seconds() * 1000 * scale,
                        max(duration * scale, MIN_BAR / 2),
                    )
                    for at, duration in own
                ),
            )
        )
    ticks = [
        (LABEL_WIDTH + (WIDTH - LABEL_WIDTH) * part / 4, f"{total_ms * part / 4:,.0f} ms")
        for part in range(5)
    ]
    rows = len(bars) + (1 if left_out else 0)
    return Waterfall(
        bars, rows * ROW + 20, total_ms, ticks, len(drawn) + left_out, left_out, HEAD_BARS * ROW + 16
    )
