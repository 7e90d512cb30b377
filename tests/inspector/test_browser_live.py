"""A real browser while a reply streams in: "waiting for the model…" and the streaming display
never show together, and the display stays inside its column however long a word the model
streams (the server as `make run` starts it; the demo model streaming slowly, on a phone); and a
class following one conversation live, each on their own page."""

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


def _signed_in(
    browser: Browser,
    server: InspectorServer,
    width: int,
    height: int,
    *,
    username: str = "admin",
    script: str = WATCH,
) -> Page:
    page = browser.new_context(viewport={"width": width, "height": height}).new_page()
    page.add_init_script(script)
    page.goto(f"{server.base}/accounts/login/")
    page.fill("input[name=username]", username)
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


CLASS = (
    "from django.contrib.auth.models import User; "
    "from conversations.models import Team, UserPreference; "
    "team = Team.objects.create(name='class'); "
    "team.members.add(User.objects.get(username='admin')); "
    "[team.members.add(User.objects.create_user(name, password={password!r})) for name in ('bob', 'carol')]; "
    "UserPreference.objects.create(user=User.objects.get(username='carol'), teaching=True)"
)
# Rows the page was given after it loaded: what the socket brought.
ROWS_ADDED = """
window.__added = 0;
new MutationObserver(function (changes) {
  changes.forEach(function (change) {
    change.addedNodes.forEach(function (node) {
      if (node.nodeType === 1 && node.matches("section.step")) { window.__added += 1; }
    });
  });
}).observe(document, { subtree: true, childList: true });
"""


def _as(browser: Browser, server: InspectorServer, username: str) -> Page:
    return _signed_in(browser, server, 1280, 800, username=username, script=ROWS_ADDED)


def test_a_class_follows_the_lecturers_turn_live_each_page_with_its_own_teaching_setting(
    browser: Browser, streaming_server: InspectorServer
) -> None:
    # The lecturer asks; two team mates watch from their own pages, one with teaching on. The
    # server renders each row once for the pages with the same setting (consumers.SharedRenders).
    _manage(streaming_server, "shell", "-c", CLASS.format(password=PASSWORD))
    lecturer = _as(browser, streaming_server, "admin")
    lecturer.select_option(
        "form#new-conversation select[name=model_profile]", label=f"{PROFILE} · demo (demo)"
    )
    lecturer.fill("textarea[name=question]", QUESTION)
    lecturer.locator("form#new-conversation [type=submit]").click()
    lecturer.wait_for_url("**/c/*/")
    bob = _as(browser, streaming_server, "bob")
    carol = _as(browser, streaming_server, "carol")
    for student in (bob, carol):
        student.goto(lecturer.url)

    pages = (lecturer, bob, carol)
    for page in pages:
        expect(page.locator("[id^=turn-status-]")).to_have_attribute("data-status", "done", timeout=90_000)
    rows = [page.locator("section.step").evaluate_all("nodes => nodes.map(n => n.id)") for page in pages]
    assert rows[0] and rows[1] == rows[0] and rows[2] == rows[0]
    for student in (bob, carol):
        assert student.evaluate("window.__added") > 0  # rows came over the socket, not only with the page
    assert bob.locator(".teach-step").count() == 0
    assert carol.locator(".teach-step").count() == len(rows[0])
    for page in pages:
        page.context.close()
