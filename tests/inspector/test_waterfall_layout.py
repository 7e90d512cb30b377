"""The timeline's layout (inspector/waterfall.py, inspector/_waterfall.html): a bar's latency text
never runs into the column of row labels, wherever the bar starts and however long it takes —
beside the bar where there is room, inside it when it is wide, on a line of its own otherwise.

Text is measured here at a generous width per character (as wide as the widest digit of the usual
sans fonts, wider than their letters), so a detail that clears the label column by this measure
clears it in a browser too (tests/inspector/test_browser_layout.py measures the real glyphs)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from django.template.loader import render_to_string

from conversations.models import Step
from inspector.waterfall import LABEL_WIDTH, ROW, WIDTH, Bar, Waterfall, turn_waterfall

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
# The detail's font size in SVG units, and a width per character no digit of DejaVu Sans exceeds.
FONT = 11
CHAR = FONT * 0.64


def _step(
    pk: int,
    seq: int,
    start_ms: float,
    took_ms: float,
    *,
    title: str = "calls get_weather_forecast",
    kind: str = "decide",
    parent_id: int | None = None,
    usage: dict[str, int] | None = None,
) -> Step:
    started = T0 + timedelta(milliseconds=start_ms)
    return Step(
        pk=pk,
        seq=seq,
        kind=kind,
        status="ok",
        title=title,
        usage=usage or {},
        parent_id=parent_id,
        started_at=started,
        finished_at=started + timedelta(milliseconds=took_ms),
    )


def _extent(x: float, anchor: str, text: str) -> tuple[float, float]:
    width = len(text) * CHAR
    return (x - width, x) if anchor == "end" else (x, x + width)


def _weather_turn() -> Waterfall:
    """The lecturer's weather turn: the connect step takes most of the turn from its start."""
    chart = turn_waterfall(
        [
            _step(1, 1, 0, 1503, title="6 tools from 1 server(s)", kind="connect"),
            _step(2, 2, 1503, 69, usage={"prompt_tokens": 1031, "completion_tokens": 18}),
            _step(3, 3, 1540, 27, title="demo/get_weather_forecast", parent_id=2),
            _step(4, 4, 1573, 85, title="final answer", kind="answer"),
        ],
        [(1, T0 + timedelta(milliseconds=140), 1361.0), (2, T0 + timedelta(milliseconds=1510), 20.0)],
    )
    assert chart is not None
    return chart


def _assert_clear_of_labels(chart: Waterfall) -> None:
    for bar in chart.bars:
        left, right = _extent(bar.detail_x, bar.detail_anchor, bar.detail)
        assert left >= LABEL_WIDTH, f"{bar.label!r}: its detail starts at {left:.0f}, in the label column"
        assert right <= WIDTH, f"{bar.label!r}: its detail ends at {right:.0f}, past the drawing"


def test_a_bar_from_the_turns_start_to_near_its_end_keeps_its_detail_out_of_the_label_column() -> None:
    chart = _weather_turn()

    first = chart.bars[0]
    assert first.x == LABEL_WIDTH and first.x + first.width > WIDTH - 180
    _assert_clear_of_labels(chart)
    # It is wide enough to hold its own detail, on its own row.
    assert first.detail_y == first.y + 16
    assert first.x <= _extent(first.detail_x, first.detail_anchor, first.detail)[0]
    assert _extent(first.detail_x, first.detail_anchor, first.detail)[1] <= first.x + first.width


@pytest.mark.parametrize("start_ms", [0, 1, 10, 100, 250, 400, 500, 600, 750, 900, 990, 999])
@pytest.mark.parametrize("took_ms", [0, 1, 5, 30, 100, 300, 600, 900, 1000])
def test_no_detail_overlaps_the_label_column_wherever_its_bar_starts_and_however_long(
    start_ms: int, took_ms: int
) -> None:
    took_ms = min(took_ms, 1000 - start_ms)
    chart = turn_waterfall(
        [
            _step(1, 1, 0, 1000, title="the whole turn", kind="connect"),
            _step(2, 2, start_ms, took_ms, usage={"prompt_tokens": 123456, "completion_tokens": 65432}),
        ],
        [(2, T0 + timedelta(milliseconds=start_ms), took_ms / 2)],
    )
    assert chart is not None

    _assert_clear_of_labels(chart)


def test_a_detail_with_no_room_on_its_row_takes_a_line_of_its_own_and_pushes_the_next_rows_down() -> None:
    long_usage = {"prompt_tokens": 1234567, "completion_tokens": 7654321}
    chart = turn_waterfall(
        [
            _step(1, 1, 0, 1000, title="the whole turn", kind="connect"),
            # A narrow bar in the middle: no room before it, after it, nor inside it.
            _step(2, 2, 500, 10, usage=long_usage),
            _step(3, 3, 520, 10),
        ],
        [(2, T0 + timedelta(milliseconds=501), 8.0)],
    )
    assert chart is not None
    _, middle, last = chart.bars

    _assert_clear_of_labels(chart)
    assert middle.detail_place == "below"
    assert middle.detail_y >= middle.y + ROW  # under its bar, not beside it
    assert last.y >= middle.detail_y + 4  # the next row starts below that line
    assert chart.height >= last.y + ROW


@dataclass
class _Turn:
    pk: int


def _texts(chart: Waterfall) -> list[tuple[str, float, str, str]]:
    svg = render_to_string("inspector/_waterfall.html", {"chart": chart, "turn": _Turn(1)})
    return [
        (cls, float(x), anchor, text)
        for cls, x, anchor, text in re.findall(
            r'<text class="(wf-detail[^"]*)" x="([\d.]+)" text-anchor="(\w+)"[^>]*>([^<]*)</text>', svg
        )
    ]


def test_the_drawn_timeline_puts_no_detail_text_in_the_label_column() -> None:
    chart = _weather_turn()

    texts = _texts(chart)

    assert len(texts) == len(chart.bars)
    for _, x, anchor, text in texts:
        left, _right = _extent(x, anchor, text.replace("&#x27;", "'"))
        assert left >= LABEL_WIDTH, f"{text!r} starts at {left:.0f}"


def test_a_detail_inside_its_bar_is_drawn_to_be_read_on_the_bar() -> None:
    chart = _weather_turn()
    inside = [bar for bar in chart.bars if bar.detail_place == "inside"]
    assert inside, "the weather turn's first bar holds its detail"

    classes = [cls for cls, *_ in _texts(chart)]

    assert classes.count("wf-detail wf-detail-inside") == len(inside)


def test_bars_keep_their_rows_when_every_detail_fits_beside_its_bar() -> None:
    chart = turn_waterfall([_step(1, 1, 0, 100, kind="connect"), _step(2, 2, 100, 900)])
    assert chart is not None

    assert [bar.y for bar in chart.bars] == [0, ROW]
    assert all(isinstance(bar, Bar) and bar.detail_place in {"after", "before"} for bar in chart.bars)
    assert chart.height == 2 * ROW + 20
