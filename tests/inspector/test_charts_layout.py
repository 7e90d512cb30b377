"""Compare's charts laid out to be read on a projector (inspector/charts.py,
inspector/_compare_charts.html): each run's label on a line of its own above its bar, what tells
the runs apart first, a value (or why there is none) beside its bar and never on a label, and text
big enough once the drawing is scaled to the narrowest column the page gives a chart.

The drawing is parsed as the template renders it; tests/inspector/test_browser_layout.py measures
the same in Chromium."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.template.loader import render_to_string

from conversations.models import Conversation
from conversations.selectors import RunSummary
from inspector.charts import Chart, comparison_charts

CSS = Path(__file__).resolve().parents[2] / "static" / "css" / "comparison_detail.css"
READABLE_PX = 12
ROOT_PX = 16  # 1rem
# A width per character no letter or digit of a sans font's lower case exceeds, in font sizes.
CHAR = 0.64
WEATHER_PARADIGMS = ("native", "prompt_xml", "prompt_json", "structured", "intent", "auto")
PROVIDERS = ("openai_chat", "openai_responses", "anthropic", "gemini")


def _run(paradigm: str, profile: str, tokens: int | None = 2174) -> RunSummary:
    return RunSummary(
        conversation=Conversation(),
        turn=None,
        paradigm=paradigm,
        profile=profile,
        model="demo",
        is_demo=True,
        status="done",
        finished=True,
        steps=4,
        model_calls=2,
        tokens_in=tokens,
        tokens_out=None if tokens is None else 49,
        prompt_tokens=tokens,
        prompt_encodings=[],
        llm_ms=812.0,
        wall_ms=2019.0,
        tool="demo/get_weather_forecast",
        arguments={"city": "Beijing"},
        answered=True,
        answer="Fog, -1 to 9 °C.",
        error="",
    )


def _paradigms() -> list[RunSummary]:
    return [_run(paradigm, "demo", 1000 + 900 * index) for index, paradigm in enumerate(WEATHER_PARADIGMS)]


def _providers() -> list[RunSummary]:
    return [_run("native", f"demo {provider}", 2174) for provider in PROVIDERS]


def _svg(chart: Chart) -> str:
    html = render_to_string("inspector/_compare_charts.html", {"charts": [chart]})
    found = re.search(r"<svg .*?</svg>", html, re.S)
    assert found is not None
    return found.group(0)


def _font(svg: str) -> float:
    found = re.search(r'<svg [^>]*font-size="([\d.]+)"', svg)
    assert found is not None, "the drawing sets its text's size"
    return float(found.group(1))


def _texts(svg: str, cls: str) -> list[tuple[float, float, str, str]]:
    """Each text of ``cls``: (x, baseline y, anchor, text)."""
    return [
        (float(x), float(y), rest, text)
        for x, y, rest, text in re.findall(
            rf'<text class="{cls}" x="([\d.]+)" y="([\d.]+)"([^>]*)>([^<]*)</text>', svg
        )
    ]


def _box(x: float, y: float, anchor: str, text: str, font: float) -> tuple[float, float, float, float]:
    """A text's box (left, top, right, bottom): its glyphs at most CHAR wide, rising at most 0.8 of
    the font's size above the baseline (a sans font's capitals and digits: about 0.73) and falling
    0.25 below it."""
    width = len(text) * CHAR * font
    left = x - width if 'text-anchor="end"' in anchor else x
    return left, y - font * 0.8, left + width, y + font * 0.25


def _bars(svg: str) -> list[tuple[float, float, float, float]]:
    return [
        (float(x), float(y), float(x) + float(w), float(y) + float(h))
        for x, y, w, h in re.findall(
            r'<rect x="([\d.]+)" y="([\d.]+)" width="([\d.]+)" height="([\d.]+)"', svg
        )
    ]


def _overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


@pytest.mark.parametrize("runs", [_paradigms(), _providers()], ids=["paradigms", "providers"])
def test_every_label_is_whole_and_no_bar_or_value_covers_it(runs: list[RunSummary]) -> None:
    for chart in comparison_charts(runs):
        svg = _svg(chart)
        font = _font(svg)
        labels = [_box(x, y, anchor, text, font) for x, y, anchor, text in _texts(svg, "cc-label")]
        values = [_box(x, y, anchor, text, font) for x, y, anchor, text in _texts(svg, "cc-value")]

        assert [text for *_, text in _texts(svg, "cc-label")] == [bar.label for bar in chart.bars]
        assert len(labels) == len(values) == len(runs)
        for label in labels:
            assert 0 <= label[0] and label[2] <= 1000, f"{chart.key}: a label runs out of the drawing"
            assert not any(_overlap(label, bar) for bar in _bars(svg)), f"{chart.key}: a bar covers a label"
            assert not any(_overlap(label, value) for value in values), f"{chart.key}: a value covers a label"


def test_the_no_price_text_stays_off_the_labels() -> None:
    cost = next(chart for chart in comparison_charts(_paradigms()) if chart.key == "cost")
    svg = _svg(cost)
    font = _font(svg)

    values = _texts(svg, "cc-value")
    labels = [_box(x, y, anchor, text, font) for x, y, anchor, text in _texts(svg, "cc-label")]

    assert {text for *_, text in values} == {"no price or no usage"}
    for x, y, anchor, text in values:
        assert not any(_overlap(_box(x, y, anchor, text, font), label) for label in labels)


def test_compare_providers_labels_begin_with_the_profile_that_tells_the_runs_apart() -> None:
    chart = comparison_charts(_providers())[0]

    labels = [bar.label for bar in chart.bars]

    assert [label.split(" · ")[0] for label in labels] == [f"demo {provider}" for provider in PROVIDERS]
    assert all("Native function calling" in label for label in labels)


def test_compare_paradigms_labels_begin_with_the_paradigm() -> None:
    chart = comparison_charts(_paradigms())[0]

    assert chart.bars[3].label == "API structured output (json_schema) · demo"
    assert chart.bars[4].label == "Intent recognition + predefined functions · demo"


def test_a_label_too_long_for_the_drawing_is_cut_at_its_end_and_whole_in_its_title() -> None:
    chart = comparison_charts([_run("native", "p" * 80), _run("native", "q" * 80)])[0]
    svg = _svg(chart)
    font = _font(svg)

    shown = [text for *_, text in _texts(svg, "cc-label")]

    assert all(len(text) * CHAR * font <= 1000 for text in shown)
    assert shown[0].startswith("p" * 40) and shown[0].endswith("…")
    assert f"<title>{chart.bars[0].label}: 2,174</title>" in svg


def test_text_is_at_least_12_css_px_in_the_narrowest_column_the_page_gives_a_chart() -> None:
    # The chart grid's columns are never narrower than this (or the whole width, when less).
    column = re.search(r"\.chart-grid \{[^}]*minmax\(min\(100%, ([\d.]+)rem\)", CSS.read_text())
    assert column is not None
    narrowest_px = float(column.group(1)) * ROOT_PX
    chart = comparison_charts(_paradigms())[0]
    svg = _svg(chart)
    view_width = float(re.search(r'viewBox="0 0 ([\d.]+) ', svg).group(1))  # type: ignore[union-attr]

    assert _font(svg) * narrowest_px / view_width >= READABLE_PX
