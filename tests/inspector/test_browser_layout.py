"""The pages a lecturer projects, measured in a real browser at a projector's sizes: the timeline's
latency text off the row labels, Compare's charts readable (text at least 12 CSS px, no label under
a bar or a value), the call id inside its column, the home page's "Search in" boxes on their
labels' lines, and the field notes' summaries wrapped rather than cut.

The server is the one `make run` starts (tests/inspector/test_browser.py); its conversations are
asked with `manage.py ask` before it starts: the weather question, Compare over every paradigm, and
Compare over the demo model's four wire formats (Compare providers)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Page

from inspector.waterfall import LABEL_WIDTH, WIDTH
from tests.inspector.test_browser import PASSWORD, WEATHER, InspectorServer
from tests.inspector.test_browser_teaching import _manage, _overflow, browser

__all__ = ["browser"]  # the module's Chromium, shared with the teaching tests' fixture

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]

PROVIDERS = ("openai_chat", "openai_responses", "anthropic", "gemini")
SET_UP = (
    "from django.contrib.auth import get_user_model; "
    "from conversations.services import demo_format_profiles_ensure; "
    "from inspector.preferences import preference_set; "
    "demo_format_profiles_ensure(stream=False); "
    "preference_set(user=get_user_model().objects.get(username='admin'), teaching=True)"
)


@dataclass
class Hall:
    server: InspectorServer
    weather: str  # the weather conversation's page
    paradigms: str  # Compare over every paradigm, the demo model
    providers: str  # Compare over the four wire formats, native function calling


@pytest.fixture(scope="module")
def hall(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hall]:
    server = InspectorServer(tmp_path_factory.mktemp("layout"))
    server.set_up()
    _manage(server, "shell", "-c", SET_UP)
    weather = json.loads(_manage(server, "ask", WEATHER, "--json"))
    every = "native,prompt_xml,prompt_json,structured,intent,auto"
    paradigms = json.loads(_manage(server, "ask", WEATHER, "--compare", every, "--json"))
    runs = ",".join(f"demo {provider}:native" for provider in PROVIDERS)
    providers = json.loads(_manage(server, "ask", WEATHER, "--compare", runs, "--json"))
    server.start()
    try:
        yield Hall(
            server,
            f"{server.base}/c/{weather['conversation']['id']}/",
            f"{server.base}/compare/{paradigms['comparison']}/",
            f"{server.base}/compare/{providers['comparison']}/",
        )
    finally:
        server.stop()


def _signed_in(browser: Browser, hall: Hall, *, width: int, height: int, **options: object) -> Page:
    context: BrowserContext = browser.new_context(viewport={"width": width, "height": height}, **options)  # type: ignore[arg-type]
    page = context.new_page()
    page.goto(f"{hall.server.base}/accounts/login/")
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", PASSWORD)
    page.click("form.stacked-form button[type=submit]")
    page.wait_for_url(f"{hall.server.base}/")
    return page


def _open(page: Page, url: str) -> None:
    page.goto(url)
    page.wait_for_load_state("networkidle")


def _overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return (
        a["x"] < b["x"] + b["width"]
        and b["x"] < a["x"] + a["width"]
        and a["y"] < b["y"] + b["height"]
        and b["y"] < a["y"] + a["height"]
    )


# Each bar's row label and latency text, as boxes in the drawing's own units.
WATERFALL_BOXES = """() => [...document.querySelectorAll('.waterfall-chart g.wf-bar')].map(g => {
  const box = (e) => { const b = e.getBBox(); return {x: b.x, y: b.y, width: b.width, height: b.height}; };
  return {label: box(g.querySelector('.wf-label')), detail: box(g.querySelector('.wf-detail')),
          text: g.querySelector('.wf-detail').textContent};
})"""


@pytest.mark.parametrize(("width", "scheme"), [(1280, "light"), (1024, "dark")])
def test_the_timelines_latency_text_never_lands_on_the_row_labels(
    browser: Browser, hall: Hall, width: int, scheme: str
) -> None:
    page = _signed_in(browser, hall, width=width, height=800, color_scheme=scheme)
    _open(page, hall.weather)

    rows: list[dict[str, Any]] = page.evaluate(WATERFALL_BOXES)

    assert len(rows) == 4
    labels = [row["label"] for row in rows]
    for row in rows:
        detail = row["detail"]
        assert detail["x"] >= LABEL_WIDTH, f"{row['text']!r} starts at {detail['x']:.0f}, among the labels"
        assert detail["x"] + detail["width"] <= WIDTH, f"{row['text']!r} runs past the drawing"
        assert not any(_overlap(detail, label) for label in labels), row["text"]
    page.context.close()


def test_a_long_call_id_wraps_inside_its_column(browser: Browser, hall: Hall) -> None:
    page = _signed_in(browser, hall, width=1024, height=768, color_scheme="dark")
    _open(page, hall.weather)

    boxes: list[list[float]] = page.evaluate(
        """() => [...document.querySelectorAll('.call-id code')].map(code => {
          const own = code.getBoundingClientRect(), column = code.closest('.call').getBoundingClientRect();
          return [own.right, column.right];
        })"""
    )

    assert boxes
    for right, column in boxes:
        assert right <= column + 0.5, f"the call id ends at {right:.0f} px, past its column's {column:.0f}"
    page.context.close()


def test_each_search_in_box_sits_on_its_labels_line(browser: Browser, hall: Hall) -> None:
    page = _signed_in(browser, hall, width=1280, height=800)

    boxes: list[dict[str, Any]] = page.evaluate(
        """() => [...document.querySelectorAll('.field-scope input[type=checkbox]')].map(box => {
          const label = box.closest('label'), range = document.createRange();
          range.selectNodeContents(label);
          range.setStartAfter(box);
          const line = range.getClientRects()[0], own = box.getBoundingClientRect();
          return {text: label.textContent.trim(), box: {top: own.top, bottom: own.bottom, right: own.right},
                  line: {top: line.top, bottom: line.bottom, left: line.left}};
        })"""
    )

    assert len(boxes) == 5
    for option in boxes:
        middle = (option["box"]["top"] + option["box"]["bottom"]) / 2
        assert option["line"]["top"] <= middle <= option["line"]["bottom"], (
            f"{option['text']}: not on its line"
        )
        assert option["box"]["right"] <= option["line"]["left"] + 1, f"{option['text']}: not before its label"
    page.context.close()


# A projector's screens.
SIZES = [(1024, 768), (1280, 720), (1366, 768), (1920, 1080)]


@pytest.mark.parametrize(("width", "height"), SIZES[:3])
def test_the_field_notes_summaries_wrap_rather_than_hide_their_count(
    browser: Browser, hall: Hall, width: int, height: int
) -> None:
    page = _signed_in(browser, hall, width=width, height=height)
    for url in (hall.weather, hall.providers):
        _open(page, url)

        summaries: list[dict[str, Any]] = page.evaluate(
            """() => [...document.querySelectorAll('.teach-fields > summary')].map(s => (
              {text: s.textContent, scroll: s.scrollWidth, client: s.clientWidth}))"""
        )

        assert summaries
        for summary in summaries:
            assert re.search(r"\(\d+ fields?, ", summary["text"]), summary["text"]
            assert summary["scroll"] <= summary["client"], f"{width} px: {summary['text']!r} is cut"
    page.context.close()


# What text on a projector must be at least (CSS px) to be read in a hall.
READABLE_PX = 12

# Every chart's texts and bars: each text's size on screen (its font size times the drawing's
# scale), and its box in the drawing's units; each bar's box.
CHART_GEOMETRY = """() => [...document.querySelectorAll('#compare-charts svg.bar-chart')].map(svg => {
  const scale = svg.getScreenCTM().a;
  const box = (e) => { const b = e.getBBox(); return {x: b.x, y: b.y, width: b.width, height: b.height}; };
  const text = (e) => ({text: e.textContent, box: box(e), px: parseFloat(getComputedStyle(e).fontSize) * scale});
  return {
    measure: svg.closest('figure').dataset.measure,
    view: svg.viewBox.baseVal.width,
    labels: [...svg.querySelectorAll('.cc-label')].map(text),
    values: [...svg.querySelectorAll('.cc-value')].map(text),
    bars: [...svg.querySelectorAll('rect')].map(box),
  };
})"""


def _assert_readable(chart: dict[str, Any], where: str) -> None:
    for text in chart["labels"] + chart["values"]:
        assert text["px"] >= READABLE_PX, f"{where}: {text['text']!r} is {text['px']:.1f} px"
        box = text["box"]
        assert box["x"] >= 0 and box["x"] + box["width"] <= chart["view"], f"{where}: {text['text']!r} is cut"
    for label in chart["labels"]:
        for bar in chart["bars"]:
            assert not _overlap(label["box"], bar), f"{where}: a bar covers {label['text']!r}"
        for value in chart["values"]:
            assert not _overlap(label["box"], value["box"]), (
                f"{where}: {value['text']!r} on {label['text']!r}"
            )
    shown = [label["text"] for label in chart["labels"]]
    assert len(set(shown)) == len(shown), f"{where}: two runs read alike: {shown}"


@pytest.mark.parametrize(("width", "height"), SIZES)
def test_compares_charts_are_readable_on_a_projector_and_tell_the_runs_apart(
    browser: Browser, hall: Hall, width: int, height: int
) -> None:
    page = _signed_in(browser, hall, width=width, height=height)
    for url, runs in ((hall.paradigms, 6), (hall.providers, len(PROVIDERS))):
        _open(page, url)

        charts: list[dict[str, Any]] = page.evaluate(CHART_GEOMETRY)

        assert len(charts) == 6
        for chart in charts:
            where = f"{width}x{height} {chart['measure']}"
            assert len(chart["labels"]) == runs, where
            _assert_readable(chart, where)
        assert _overflow(page) == 0
    # Compare providers: what tells the runs apart (the wire format's profile) is on screen.
    tokens = next(chart for chart in charts if chart["measure"] == "tokens_in")
    for provider, label in zip(PROVIDERS, tokens["labels"], strict=True):
        assert f"demo {provider}" in label["text"]
    page.context.close()


def test_the_cost_charts_no_price_text_stays_off_the_labels(browser: Browser, hall: Hall) -> None:
    page = _signed_in(browser, hall, width=1024, height=768)
    _open(page, hall.paradigms)

    charts: list[dict[str, Any]] = page.evaluate(CHART_GEOMETRY)

    cost = next(chart for chart in charts if chart["measure"] == "cost")
    assert {value["text"] for value in cost["values"]} == {"no price or no usage"}
    for value in cost["values"]:
        for label in cost["labels"]:
            assert not _overlap(value["box"], label["box"]), f"{value['text']!r} on {label['text']!r}"
    page.context.close()
