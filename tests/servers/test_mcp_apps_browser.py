"""MCP Apps in a real browser: a tool's UI framed sandboxed on its call's page, talking to the host
page over postMessage, against our own app server (``tests/servers/app_server.py``), a hostile
app, and the ext-apps project's vanilla JS example server from npm (``tests/mcp_servers``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from playwright.sync_api import Dialog, Page, expect

from inspector import teaching
from tests.inspector.test_browser import PASSWORD, REPO_ROOT, InspectorServer
from tests.inspector.test_browser import page as page  # noqa: F401 — the Chromium page fixture

# The example's directory; MCP_APPS_EXAMPLE_DIR points a trial run at another install of it.
EXAMPLE = Path(
    os.environ.get("MCP_APPS_EXAMPLE_DIR")
    or REPO_ROOT / "tests/mcp_servers/node_modules/@modelcontextprotocol/server-basic-vanillajs"
)

pytestmark = pytest.mark.browser


def _add(server: InspectorServer, name: str, *command: str) -> None:
    subprocess.run(
        [sys.executable, "manage.py", "server", "add", name, "--", *command],
        cwd=REPO_ROOT,
        env=server.env,
        check=True,
        capture_output=True,
    )


@pytest.fixture(scope="module")
def inspector_with_apps(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InspectorServer]:
    server = InspectorServer(tmp_path_factory.mktemp("apps"))
    server.set_up()
    _add(server, "apps", sys.executable, str(REPO_ROOT / "tests/servers/app_server.py"))
    node = shutil.which("node")
    if node is not None and (EXAMPLE / "dist/index.js").exists():
        _add(server, "basic", node, str(EXAMPLE / "dist/index.js"), "--stdio")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _dialogs(page: Page) -> list[str]:
    """The messages of every alert, confirm or prompt the page (or a frame in it) opens."""
    seen: list[str] = []

    def dismiss(dialog: Dialog) -> None:
        seen.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", dismiss)
    return seen


def _log_in(page: Page, base: str) -> None:
    page.goto(f"{base}/servers/")
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit], input[type=submit]")
    page.wait_for_url("**/servers/")


def _call(page: Page, base: str, server: str, tool: str, arguments: str) -> None:
    page.goto(f"{base}/servers/{server}/")
    page.locator("#list-tools").click()
    expect(page.locator("a.tool-name", has_text=tool).first).to_be_visible(timeout=30_000)
    page.goto(f"{base}/servers/{server}/tools/{tool}?{urlencode({'arguments': arguments})}")
    page.locator("#call").click()
    page.wait_for_url("**/servers/op/*/")
    expect(page.locator("#op-status")).to_have_text("ok", timeout=30_000)


def _transcript_shows(
    page: Page, base: str, server: str, labels: list[str], count: tuple[str, int] | None = None
) -> list[dict[str, Any]]:
    """The app messages of the server's transcript (its JSON export), once it holds every label
    (and ``count``: that many rows of a label): the page posts them as they pass, so the last
    may still be on their way."""
    rows: list[dict[str, Any]] = []
    for _ in range(60):
        rows = page.request.get(f"{base}/servers/{server}/transcript.json?method=→").json()["messages"]
        labelled = [row["label"] for row in rows]
        if set(labels) <= set(labelled) and (count is None or labelled.count(count[0]) >= count[1]):
            return rows
        page.wait_for_timeout(250)
    pytest.fail(f"the transcript never showed {labels} {count}: {[row['label'] for row in rows]}")


def _unexplained(rows: list[dict[str, Any]]) -> set[str]:
    """The field names of the recorded app ↔ host messages that teaching mode has no note for."""
    return {
        field.name
        for row in rows
        for body in (row.get("request") or "", row.get("response") or "")
        for field in teaching.field_notes(body if isinstance(body, str) else json.dumps(body), "mcp")
        if field.note is None
    }


def test_an_app_renders_sandboxed_calls_a_tool_through_the_host_resizes_and_its_traffic_is_recorded(
    inspector_with_apps: InspectorServer, page: Page
) -> None:
    base = inspector_with_apps.base
    dialogs = _dialogs(page)
    _log_in(page, base)
    _call(page, base, "apps", "counter", '{"start": 7}')

    iframe = page.locator("#mcp-app-iframe")
    expect(iframe).to_have_attribute("sandbox", "allow-scripts")
    app = page.frame_locator("#mcp-app-iframe")
    expect(app.locator("#input")).to_have_text('input: {"start":7}', timeout=20_000)
    expect(app.locator("#result")).to_have_text("result: counter at 7")
    expect(app.locator("#called")).to_have_text("called: counter at 42", timeout=20_000)
    expect(app.locator("#called")).to_have_attribute("data-refused", "apps listed no tool named 'not-a-tool'")
    # Without same-origin the app reaches neither this page's cookies nor its DOM.
    expect(app.locator("#cookie")).to_have_text("cookie blocked: SecurityError")
    expect(app.locator("#parent")).to_have_text("parent blocked: SecurityError")
    expect(iframe).to_have_attribute("data-height", "321")
    assert iframe.evaluate("frame => frame.getBoundingClientRect().height") == pytest.approx(321, abs=3)
    # The app's message is shown as text, never as markup.
    expect(page.locator("#mcp-app-notes")).to_contain_text("<b>counter says hi</b>")
    expect(page.locator("#mcp-app-notes a", has_text="the call").first).to_be_visible()

    rows = _transcript_shows(
        page,
        base,
        "apps",
        [
            "app → host ui/initialize",
            "host → app result",
            "app → host ui/notifications/initialized",
            "host → app ui/notifications/tool-input",
            "host → app ui/notifications/tool-result",
            "app → host tools/call",
            "app → host ui/message",
            "app → host ui/notifications/size-changed",
            "host → app error",
        ],
    )
    [result] = [
        row for row in rows if row["label"] == "host → app result" and "counter at 42" in str(row["response"])
    ]
    assert result["direction"] == "local"
    # Teaching mode explains every field of the messages, the host's and the app's.
    assert _unexplained(rows) == set()
    page.goto(f"{base}/servers/apps/transcript?method=app")
    expect(page.locator(".msg .badge.app-traffic").first).to_be_visible()
    assert dialogs == []


def _increments(page: Page, base: str) -> int:
    """How many ``increment`` calls the apps server's transcript holds (each an operation)."""
    rows = page.request.get(f"{base}/servers/apps/transcript.json?method=tools/call").json()["messages"]
    return sum(
        1 for row in rows if row["label"] == "tools/call" and "increment" in json.dumps(row["request"])
    )


def test_an_app_viewed_again_shows_what_was_recorded_and_re_runs_its_calls_only_when_asked(
    inspector_with_apps: InspectorServer, page: Page
) -> None:
    base = inspector_with_apps.base
    _log_in(page, base)
    sized = "app → host ui/notifications/size-changed"
    before = [row["label"] for row in _transcript_shows(page, base, "apps", [])].count(sized)
    _call(page, base, "apps", "counter", '{"start": 3}')
    app = page.frame_locator("#mcp-app-iframe")
    expect(app.locator("#called")).to_have_text("called: counter at 42", timeout=20_000)
    expect(page.locator("#mcp-app-rerun")).to_have_count(0)
    # The first view's messages are recorded (the size request is the app's last).
    _transcript_shows(page, base, "apps", [sized], count=(sized, before + 1))
    calls = _increments(page, base)

    page.reload()

    # The record, not a new call: the same answers, and no new operation.
    expect(app.locator("#called")).to_have_text("called: counter at 42", timeout=20_000)
    expect(app.locator("#called")).to_have_attribute("data-refused", "apps listed no tool named 'not-a-tool'")
    expect(page.locator("#mcp-app-status")).to_contain_text("replaying what was recorded")
    expect(page.locator("#mcp-app-notes")).to_contain_text("answered with the recorded result (not re-run)")
    assert _increments(page, base) == calls
    # A replay records nothing again.
    labels = [row["label"] for row in _transcript_shows(page, base, "apps", [sized])]
    assert labels.count(sized) == before + 1

    page.locator("#mcp-app-rerun").click()

    expect(page.locator("#mcp-app-rerun")).to_have_count(0)
    expect(page.locator("#mcp-app-notes a", has_text="the call").first).to_be_visible(timeout=20_000)
    expect(app.locator("#called")).to_have_text("called: counter at 42", timeout=20_000)
    assert _increments(page, base) == calls + 1
    _transcript_shows(page, base, "apps", [sized], count=(sized, before + 2))


def test_a_hostile_app_flooding_the_host_with_huge_and_malformed_messages_does_not_break_the_page(
    inspector_with_apps: InspectorServer, page: Page
) -> None:
    base = inspector_with_apps.base
    dialogs = _dialogs(page)
    _log_in(page, base)
    _call(page, base, "apps", "hostile", "{}")

    app = page.frame_locator("#mcp-app-iframe")
    expect(app.locator("#done")).to_have_text("sent", timeout=20_000)
    expect(page.locator("#mcp-app-iframe")).to_have_attribute("data-height", "3000", timeout=20_000)
    expect(page.locator("#mcp-app-notes")).to_contain_text("not http(s): refused")
    expect(page.locator("#mcp-app-notes")).to_contain_text("<script>alert(1)</script>")
    expect(page.locator("#mcp-app-status")).to_have_text("The app is loaded.")

    rows = _transcript_shows(
        page,
        base,
        "apps",
        ["app → host not JSON-RPC", "app → host cyclic (not kept whole)", "host → app error"],
        count=("app → host notifications/message", 300),
    )
    [huge] = [row for row in rows if row["label"].startswith("app → host xxxx")]
    assert huge["label"].endswith("(not kept whole)")
    assert "cut by the host page" in huge["request"] and len(huge["request"]) < 70_000
    notifications = [row for row in rows if row["label"] == "app → host notifications/message"]
    assert len(notifications) == 300
    assert dialogs == []


@pytest.mark.slow
def test_the_ext_apps_vanilla_js_example_runs_in_the_host(
    inspector_with_apps: InspectorServer, page: Page
) -> None:
    if shutil.which("node") is None or not (EXAMPLE / "dist/index.js").exists():
        pytest.fail(
            "@modelcontextprotocol/server-basic-vanillajs is not installed: run `make test` (npm ci in tests/mcp_servers)"
        )
    base = inspector_with_apps.base
    _log_in(page, base)
    _call(page, base, "basic", "get-time", "{}")

    app = page.frame_locator("#mcp-app-iframe")
    time_shown = app.locator("#server-time")
    expect(time_shown).to_have_text(re.compile(r"^\d{4}-\d\d-\d\dT"), timeout=30_000)
    app.locator("#get-time-btn").click()
    expect(page.locator("#mcp-app-notes")).to_contain_text(
        "The app called the tool get-time.", timeout=30_000
    )
    app.locator("#send-message-btn").click()
    expect(page.locator("#mcp-app-notes")).to_contain_text("This is message text.")
    app.locator("#open-link-btn").click()
    expect(page.locator("#mcp-app-notes a", has_text="https://modelcontextprotocol.io/")).to_be_visible()
    expect(page.locator("#mcp-app-iframe")).to_have_attribute("data-height", re.compile(r"^\d+$"))

    rows = _transcript_shows(
        page, base, "basic", ["app → host ui/initialize", "app → host tools/call", "app → host ui/open-link"]
    )
    # The ext-apps SDK's own messages: teaching mode explains every field of them too.
    assert _unexplained(rows) == set()


def test_a_conversations_tool_step_opens_its_app_with_the_calls_result(
    inspector_with_apps: InspectorServer, page: Page
) -> None:
    base = inspector_with_apps.base
    asked = subprocess.run(
        [sys.executable, "manage.py", "ask", "Show the counter", "--server", "apps", "--json"],
        cwd=REPO_ROOT,
        env=inspector_with_apps.env,
        check=True,
        capture_output=True,
        text=True,
    )
    conversation = json.loads(asked.stdout)["conversation"]["id"]
    _log_in(page, base)
    page.goto(f"{base}/c/{conversation}/")

    page.get_by_role("button", name="Open its app").click()
    page.wait_for_url("**/servers/op/*/")

    app = page.frame_locator("#mcp-app-iframe")
    expect(app.locator("#result")).to_have_text("result: counter at 1", timeout=20_000)
    expect(app.locator("#called")).to_have_text("called: counter at 42", timeout=20_000)
    expect(page.locator("#mcp-app-iframe")).to_have_attribute("data-height", "321")
