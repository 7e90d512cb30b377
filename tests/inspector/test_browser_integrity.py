"""The record's badge in a real browser: it follows each turn's seal live, and a forged record is
named and one click away."""

from __future__ import annotations

import subprocess
import sys

import pytest
from playwright.sync_api import Page, expect

from tests.inspector.test_browser import PASSWORD, REPO_ROOT, WEATHER, InspectorServer
from tests.inspector.test_browser import inspector_server as inspector_server  # noqa: F401 — fixture
from tests.inspector.test_browser import page as page  # noqa: F401 — the Chromium page fixture

pytestmark = pytest.mark.browser

FORGE_ARGUMENTS = """
from conversations.models import Conversation, Step
conversation = Conversation.objects.get(public_id="{public_id}")
tool = Step.objects.filter(turn__conversation=conversation, kind="tool").order_by("turn__seq", "seq").first()
Step.objects.filter(pk=tool.pk).update(arguments={{"city": "Atlantis"}})
print(tool.pk)
"""


def _log_in_and_ask(server: InspectorServer, page: Page) -> None:
    page.goto(f"{server.base}/")
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit], input[type=submit]")
    page.fill("textarea[name=question]", WEATHER)
    page.locator("form#new-conversation [type=submit]").click()
    page.wait_for_url("**/c/*/")


# Every text the badge shows, in order, recorded by the page itself.
RECORD_BADGE = """
window.__badges = [];
new MutationObserver(function () {
  var badge = document.getElementById("chain-badge");
  var text = badge ? badge.textContent : "";
  if (text && window.__badges[window.__badges.length - 1] !== text) {
    window.__badges.push(text);
  }
}).observe(document, { subtree: true, childList: true, characterData: true });
"""


def test_the_badge_is_updated_live_as_each_turn_is_sealed(
    inspector_server: InspectorServer, page: Page
) -> None:
    page.add_init_script(RECORD_BADGE)
    _log_in_and_ask(inspector_server, page)
    badge = page.locator("#chain-badge")
    expect(badge).to_contain_text("keyed, 1 sealed turn", timeout=30_000)

    page.fill("form#follow-up textarea[name=question]", "What about the weather in Paris tomorrow?")
    with page.expect_navigation():
        page.locator("form#follow-up [type=submit]").click()
    page.evaluate("window.__loadedOnce = true")
    expect(badge).to_contain_text("keyed, 2 sealed turns", timeout=30_000)

    # Verified while the second turn ran, then again when it ended, without a reload.
    assert page.evaluate("window.__loadedOnce") is True
    shown = page.evaluate("window.__badges")
    sealed = [text for text in shown if "sealed turn" in text]
    assert "1 sealed turn" in sealed[0] and "2 sealed turns" in sealed[-1], shown
    assert all(text.startswith("✓ record intact") for text in sealed)


def test_a_forged_tool_call_is_named_by_the_badge_which_leads_to_its_row(
    inspector_server: InspectorServer, page: Page
) -> None:
    _log_in_and_ask(inspector_server, page)
    expect(page.locator("#chain-badge")).to_contain_text("1 sealed turn", timeout=30_000)
    public_id = page.url.rstrip("/").split("/")[-1]
    forged = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", FORGE_ARGUMENTS.format(public_id=public_id)],
        cwd=REPO_ROOT,
        env=inspector_server.env,
        check=True,
        capture_output=True,
        text=True,
    )
    tool_id = forged.stdout.strip().splitlines()[-1]

    page.reload()
    badge = page.locator("#chain-badge")
    expect(badge).to_contain_text("record BROKEN at turn 1, step", timeout=30_000)
    expect(badge).to_contain_text("the step does not match its seal")
    badge.click()

    page.wait_for_url(f"**#tool-step-{tool_id}")
    expect(page.locator(f"#tool-step-{tool_id}")).to_be_in_viewport()
