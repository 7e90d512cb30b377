"""Protocol features followed live in Chromium against server-everything: while an elicitation
question waits, the wire already shows the pending ``tools/call`` and the server's pending
``elicitation/create``; the log level set from the Logging panel makes the server's log lines
show; a resource subscription shows each update as it arrives, without a reload, until the user
unsubscribes."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from tests.inspector.test_browser import REPO_ROOT, InspectorServer
from tests.inspector.test_browser import page as page  # noqa: F401 — the Chromium page fixture
from tests.servers.test_workbench_browser import EVERYTHING, _log_in

pytestmark = [pytest.mark.browser, pytest.mark.slow]
DOCUMENT = "demo://resource/static/document/architecture.md"


@pytest.fixture(scope="module")
def inspector_with_everything(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InspectorServer]:
    """One running inspector with server-everything registered, shared by this module's tests."""
    node = shutil.which("node")
    if node is None or not EVERYTHING.exists():
        pytest.fail("server-everything is not installed: run `make test` (npm ci in tests/mcp_servers)")
    server = InspectorServer(tmp_path_factory.mktemp("protocol"))
    server.set_up()
    subprocess.run(
        [sys.executable, "manage.py", "server", "add", "everything", "--", node, str(EVERYTHING), "stdio"],
        cwd=REPO_ROOT,
        env=server.env,
        check=True,
        capture_output=True,
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _call_tool(page: Page, base: str, tool: str) -> None:  # noqa: F811
    page.goto(f"{base}/servers/everything/")
    page.locator("#list-tools").click()
    link = page.locator("a.tool-name", has_text=tool)
    expect(link).to_be_visible(timeout=30_000)
    link.click()
    page.locator("#call").click()
    page.wait_for_url("**/servers/op/*/")


def test_the_pending_call_and_the_servers_question_are_on_the_wire_while_the_question_waits(
    inspector_with_everything: InspectorServer,
    page: Page,  # noqa: F811
) -> None:
    base = inspector_with_everything.base
    _log_in(page, base)
    _call_tool(page, base, "trigger-elicitation-request")

    expect(page.locator(".elicit-fields")).to_be_visible(timeout=30_000)
    wire = page.locator("#wire")
    call = wire.locator("article.msg", has=page.locator(".msg-label", has_text="tools/call"))
    question = wire.locator("article.msg", has=page.locator(".msg-label", has_text="elicitation/create"))
    expect(call.locator(".badge", has_text="pending")).to_be_visible(timeout=10_000)
    expect(question.locator(".badge", has_text="pending")).to_be_visible()
    expect(question).to_contain_text("requestedSchema")
    expect(page.locator("#op-status")).to_contain_text("running")

    # Typing an answer keeps the form, and the wire keeps following.
    page.locator(".elicit-fields input[data-name='name']").fill("Ada")
    page.locator(".elicit-form button[value=accept]").click()
    expect(page.locator("#op-status")).to_have_text("ok", timeout=30_000)
    expect(call.locator(".badge", has_text="ok")).to_be_visible()
    expect(question.locator(".badge", has_text="ok")).to_be_visible()
    expect(wire.locator(".badge", has_text="pending")).to_have_count(0)


def test_a_subscription_shows_updates_as_they_arrive_until_unsubscribed(
    inspector_with_everything: InspectorServer,
    page: Page,  # noqa: F811
) -> None:
    base = inspector_with_everything.base
    _log_in(page, base)
    # The level is set from the server page's Logging panel: the server's log lines then show.
    page.goto(f"{base}/servers/everything/")
    page.locator("#log-level").select_option("debug")
    page.locator("#logging button[type=submit]").click()
    page.wait_for_url("**/servers/op/*/")
    expect(page.locator("#op-status")).to_have_text("ok", timeout=30_000)
    expect(page.locator("#wire")).to_contain_text("logging/setLevel")

    page.goto(f"{base}/servers/everything/")
    expect(page.locator("#logging")).to_contain_text("Level debug")
    page.locator("#resources form[action$='/list/resources'] button").click()
    row = page.locator("#resources tr", has_text=DOCUMENT)
    expect(row).to_be_visible(timeout=30_000)
    row.locator("button.subscribe").click()
    page.wait_for_url("**/servers/op/*/")
    subscription_url = page.url
    expect(page.locator("#subscription")).to_contain_text(DOCUMENT)
    expect(page.locator("#wire")).to_contain_text("resources/subscribe", timeout=30_000)

    # server-everything sends updates once a tool on the same session switches them on.
    other = page.context.new_page()
    _call_tool(other, base, "toggle-subscriber-updates")
    expect(other.locator("#op-status")).to_have_text("ok", timeout=30_000)
    other.goto(f"{base}/servers/everything/")
    expect(other.locator("#resources tr", has_text=DOCUMENT).locator("button.unsubscribe")).to_be_visible()
    other.close()

    expect(page.locator(".log-messages")).to_contain_text("Received Subscribe Resource request")
    page.evaluate("window.__stayed = true")
    expect(page.locator("#update-count")).to_have_text("1 update", timeout=15_000)
    expect(page.locator("#update-count")).to_have_text("2 updates", timeout=15_000)
    assert page.evaluate("window.__stayed === true")  # no reload: the page followed it live
    assert page.url == subscription_url

    page.locator("#cancel").click()
    expect(page.locator("#op-status")).to_have_text("ok", timeout=30_000)
    expect(page.locator("#wire")).to_contain_text("resources/unsubscribe")
    expect(page.locator("#subscription")).to_contain_text("Was subscribed")
