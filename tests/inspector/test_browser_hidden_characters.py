"""In a real browser, a question and the argument filled from it that hold a right-to-left
override read as sent: the override is a visible marker, not a reordering of the text."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.inspector.test_browser import PASSWORD, InspectorServer
from tests.inspector.test_browser import inspector_server as inspector_server  # noqa: F401 — fixture
from tests.inspector.test_browser import page as page  # noqa: F401 — the Chromium page fixture

pytestmark = pytest.mark.browser

QUESTION = "What will the weather be like in Bei\u202ejing\u202c tomorrow?"
SHOWN = "Bei⟨U+202E⟩jing⟨U+202C⟩ tomorrow"


def test_an_override_in_the_question_is_shown_as_a_marker_and_reorders_nothing(
    inspector_server: InspectorServer, page: Page
) -> None:
    page.goto(f"{inspector_server.base}/")
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit], input[type=submit]")
    page.fill("textarea[name=question]", QUESTION)
    page.locator("form#new-conversation [type=submit]").click()
    page.wait_for_url("**/c/*/")

    question = page.locator(".turn .question .prose").first
    expect(question).to_contain_text(SHOWN)
    shown = question.inner_text()
    assert "\u202e" not in shown and "\u202c" not in shown
    marker = question.locator(".hidden-char").first
    expect(marker).to_have_attribute("title", "U+202E RIGHT-TO-LEFT OVERRIDE")
    expect(page.locator(".turn .hidden-chars-note").first).to_contain_text(
        "invisible or bidirectional characters"
    )
    # Whatever the model did with the text, no override acts anywhere on the page.
    expect(page.locator("#chain-badge")).to_contain_text("sealed turn", timeout=30_000)
    body = page.locator("main").inner_text()
    assert "\u202e" not in body and "\u202c" not in body
    assert "gnij" not in body
