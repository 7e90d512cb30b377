"""A real browser on Compare: what each run sent and what came back side by side, the line diff
of two runs' prompts chosen on the page, and the charts drawn by the server — at 1440 px and on a
phone, with no page scrolling sideways (one server for the module, the comparison asked with
`manage.py ask --compare`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from playwright.sync_api import Browser, expect

from tests.inspector.test_browser import WEATHER, InspectorServer
from tests.inspector.test_browser_teaching import Setting, _manage, _overflow, _signed_in, browser

pytestmark = pytest.mark.browser

__all__ = ["browser"]

# Every paradigm but auto (which is one of them, chosen at run time).
PARADIGMS = ("native", "prompt_xml", "prompt_json", "structured", "intent")


@dataclass
class Compared:
    server: InspectorServer
    url: str


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Compared]:
    server = InspectorServer(tmp_path_factory.mktemp("compare"))
    server.set_up()
    document = json.loads(_manage(server, "ask", WEATHER, "--compare", ",".join(PARADIGMS), "--json"))
    server.start()
    try:
        yield Compared(server, f"{server.base}/compare/{document['comparison']}/")
    finally:
        server.stop()


def _setting(compared: Compared) -> Setting:
    return Setting(compared.server, compared.url, 0)


@pytest.mark.parametrize("width", [1440, 390])
def test_compare_shows_each_prompt_beside_its_reply_diffs_two_and_draws_the_charts(
    browser: Browser, compared: Compared, width: int
) -> None:
    page = _signed_in(browser, _setting(compared), width=width)
    page.goto(compared.url)

    runs = page.locator(".compare-sent .sent-run")
    expect(runs).to_have_count(len(PARADIGMS))
    first = runs.nth(0)
    expect(first.locator(".sent-prompt pre")).to_contain_text(WEATHER)
    expect(first.locator(".sent-reply pre")).to_contain_text('"choices"')
    prompt_box = first.locator(".sent-prompt").bounding_box()
    reply_box = first.locator(".sent-reply").bounding_box()
    assert prompt_box is not None and reply_box is not None
    if width >= 1000:  # side by side where there is room, one above the other on a phone
        assert reply_box["x"] > prompt_box["x"] + prompt_box["width"] - 1
        assert abs(reply_box["y"] - prompt_box["y"]) < 2
    else:
        assert reply_box["y"] >= prompt_box["y"] + prompt_box["height"] - 1

    # Pick two runs: the diff of prompt_xml's prompt against native's adds its tool text.
    xml = str(PARADIGMS.index("prompt_xml") + 1)
    page.select_option(".sent-diff-pick select[name=a]", "1")
    page.select_option(".sent-diff-pick select[name=b]", xml)
    page.locator(".sent-diff-pick button").click()
    page.wait_for_url(f"**a=1&b={xml}*")
    expect(page.locator(".sent-diff pre.diff .dl.add").first).to_be_visible()
    expect(page.locator(".sent-diff .diff-summary")).to_contain_text(f"run {xml} against run 1")

    charts = page.locator("#compare-charts .compare-chart")
    expect(charts).to_have_count(6)
    tokens = page.locator('.compare-chart[data-measure="prompt_tokens"] svg rect')
    expect(tokens).to_have_count(len(PARADIGMS))
    expect(tokens.first).to_be_visible()
    expect(page.locator('.compare-chart[data-measure="cost"]')).to_contain_text("no price or no usage")
    assert _overflow(page) == 0
    page.context.close()
