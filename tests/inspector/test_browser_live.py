"""A real browser while a reply streams in: "waiting for the model…" and the streaming display
never show together, and the display stays inside its column however long a word the model
streams (the server as `make run` starts it; the demo model streaming slowly, on a phone)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.inspector.test_browser import PASSWORD, InspectorServer
from tests.inspector.test_browser_streaming import CREATE_PROFILE, PROFILE
from tests.inspector.test_browser_teaching import _manage, browser

pytestmark = pytest.mark.browser

__all__ = ["browser"]

CITY = "Llanfairpwllgwyngyllgogerychwyrndrobwllllantysiliogogogoch" + "x" * 30
QUESTION = f"[demo:drip=0.3] What will the weather be like in {CITY} tomorrow?"

# Every moment the page showed both, or a streaming display wider than its cell, recorded by the
# page itself on each change.
WATCH = """
window.__both = 0; window.__overflow = 0; window.__seen = 0;
new MutationObserver(function () {
  document.querySelectorAll(".partial-stream").forEach(function (display) {
    window.__seen += 1;
    var row = display.closest("section.step");
    var waiting = Array.prototype.some.call(row.querySelectorAll(".placeholder"), function (node) {
      return node.offsetParent !== null && node.textContent.indexOf("waiting for the model") !== -1;
    });
    if (waiting) { window.__both += 1; }
    var cell = display.parentElement;
    var right = cell.getBoundingClientRect().right + 1;
    display.querySelectorAll("pre, .partial-head, li").forEach(function (node) {
      if (node.getBoundingClientRect().right > right || node.scrollWidth > node.clientWidth + 1) {
        window.__overflow += 1;
      }
    });
  });
}).observe(document, { subtree: true, childList: true, characterData: true });
"""


@pytest.fixture
def streaming_server(tmp_path: Path) -> Iterator[InspectorServer]:
    server = InspectorServer(tmp_path)
    server.set_up()
    _manage(server, "shell", "-c", CREATE_PROFILE)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _signed_in(browser: Browser, server: InspectorServer, width: int, height: int) -> Page:
    page = browser.new_context(viewport={"width": width, "height": height}).new_page()
    page.add_init_script(WATCH)
    page.goto(f"{server.base}/accounts/login/")
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", PASSWORD)
    page.click("form.stacked-form button[type=submit]")
    page.wait_for_url(f"{server.base}/")
    return page


def test_while_streaming_waiting_and_streaming_never_show_together_and_nothing_overflows(
    browser: Browser, streaming_server: InspectorServer
) -> None:
    # One streamed turn, watched on a phone (the columns stacked) and at 1280 px (side by side).
    phone = _signed_in(browser, streaming_server, 390, 844)
    wide = _signed_in(browser, streaming_server, 1280, 800)
    phone.select_option("form#new-conversation select[name=model_profile]", label=f"{PROFILE} · demo (demo)")
    phone.fill("textarea[name=question]", QUESTION)
    phone.locator("form#new-conversation [type=submit]").click()
    phone.wait_for_url("**/c/*/")
    wide.goto(phone.url)

    for page in (phone, wide):
        expect(page.locator(".partial-stream").first).to_be_visible(timeout=30_000)
    for page in (phone, wide):
        expect(page.locator("[id^=turn-status-]")).to_have_attribute("data-status", "done", timeout=90_000)
        assert page.evaluate("window.__seen") > 0
        assert page.evaluate("window.__both") == 0
        assert page.evaluate("window.__overflow") == 0
        page.context.close()
