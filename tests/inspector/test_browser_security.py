"""Every main page works under the Content-Security-Policy, in a real browser, with no violation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect, sync_playwright

from tests.inspector.test_browser import CHROMIUM, CHROMIUM_ARGS, PASSWORD, WEATHER, InspectorServer
from tests.inspector.test_browser import inspector_server as inspector_server  # noqa: F401 — the fixture

pytestmark = pytest.mark.browser

# Runs before any page script and is not subject to the page's policy (it comes from the browser).
RECORD_VIOLATIONS = """
window.__violations = [];
document.addEventListener("securitypolicyviolation", (event) => {
  window.__violations.push(`${event.violatedDirective} blocked ${event.blockedURI || "inline"} in ${event.sourceFile}:${event.lineNumber}`);
});
"""


class Violations:
    """What the browser reported against the policy: events on the page and console errors."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.console: list[str] = []
        page.on(
            "console",
            lambda message: (
                self.console.append(message.text) if "Content Security Policy" in message.text else None
            ),
        )

    def on_this_page(self) -> list[str]:
        return [*self.page.evaluate("window.__violations"), *self.console]


@pytest.fixture
def page() -> Iterator[Page]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"Chromium is not installed at {CHROMIUM} (apt-get install chromium)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1600, "height": 1000})
        context.add_init_script(RECORD_VIOLATIONS)
        yield context.new_page()
        browser.close()


def test_every_main_page_works_under_the_policy_with_no_violation(
    inspector_server: InspectorServer, page: Page
) -> None:
    base = inspector_server.base
    violations = Violations(page)
    seen: dict[str, list[str]] = {}

    def visit(name: str, url: str | None = None) -> None:
        if url is not None:
            page.goto(url)
        page.wait_for_load_state("networkidle")
        seen[name] = violations.on_this_page()
        violations.console.clear()

    response = page.goto(f"{base}/accounts/login/")
    assert response is not None and "script-src 'self'" in response.headers["content-security-policy"]
    visit("login")
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit], input[type=submit]")
    page.wait_for_url(f"{base}/")
    visit("conversation list")

    # A conversation whose turn streams its rows over the websocket, then the same page reloaded.
    page.fill("textarea[name=question]", WEATHER)
    page.locator("form#new-conversation [type=submit]").click()
    page.wait_for_url("**/c/*/")
    page.evaluate("window.__loadedOnce = true")
    expect(page.locator("[id^=turn-status-]")).to_contain_text("Beijing", timeout=30_000)
    assert page.evaluate("window.__loadedOnce") is True  # the rows came live, not by a reload
    expect(page.locator(".rows > [id^=step-]")).to_have_count(3)
    visit("conversation, live")
    page.reload()
    expect(page.locator(".rows > [id^=step-]")).to_have_count(3)
    visit("conversation, reloaded")

    # A comparison that fills in live.
    page.goto(f"{base}/compare/")
    visit("comparison list")
    page.fill("textarea[name=question]", WEATHER)
    page.locator("form#new-comparison [type=submit]").click()
    page.wait_for_url("**/compare/*/")
    expect(page.locator("#compare-columns")).to_have_attribute("data-finished", "true", timeout=60_000)
    visit("comparison")

    # The workbench: the servers, a server, a tool's generated form, the call's operation page.
    visit("servers", f"{base}/servers/")
    visit("server", f"{base}/servers/demo/")
    page.locator("#list-tools").click()
    tool_link = page.locator("a.tool-name", has_text="get_weather_forecast")
    expect(tool_link).to_be_visible(timeout=30_000)
    tool_link.click()
    page.wait_for_url("**/tools/get_weather_forecast")
    expect(page.locator("#schema-form .sf-field").first).to_be_visible()  # built by the page's script
    visit("tool")
    page.locator("#schema-form .sf-field[data-name='city'] input").fill("Beijing")
    page.locator("#call").click()
    page.wait_for_url("**/servers/op/*/")
    expect(page.locator("#op-status")).to_have_text("ok", timeout=30_000)
    visit("operation")

    visit("token", f"{base}/accounts/token")
    visit("admin", f"{base}/admin/")
    visit("admin list", f"{base}/admin/auth/user/")
    page.locator("#result_list tbody th a").first.click()
    page.wait_for_url("**/change/")
    visit("admin form")

    assert {name: found for name, found in seen.items() if found} == {}
    assert len(seen) == 14
    # The detector works: an inline script is blocked and reported.
    page.evaluate(
        "() => { const s = document.createElement('script'); s.textContent = 'window.__inline = true';"
        " document.head.append(s); }"
    )
    page.wait_for_function("window.__violations.length > 0")
    assert page.evaluate("window.__inline === undefined")
    assert "script-src" in violations.on_this_page()[0]
