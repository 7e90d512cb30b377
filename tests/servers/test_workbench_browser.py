"""The workbench in a real browser against the real server, with a real third-party MCP server.

The server is ``@modelcontextprotocol/server-everything`` from npm (``tests/mcp_servers``),
registered with ``manage.py server add`` as a user would, then driven from Chromium: list its
tools, fill a tool's generated form, call it, and read the paired JSON-RPC — again after the
server process has been restarted.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.inspector.test_browser import PASSWORD, REPO_ROOT, InspectorServer
from tests.inspector.test_browser import page as page  # noqa: F401 — the Chromium page fixture

EVERYTHING = (
    REPO_ROOT / "tests/mcp_servers/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
)

pytestmark = pytest.mark.browser


@pytest.fixture
def inspector_with_everything(tmp_path: Path) -> Iterator[InspectorServer]:
    node = shutil.which("node")
    if node is None or not EVERYTHING.exists():
        pytest.fail("server-everything is not installed: run `make test` (npm ci in tests/mcp_servers)")
    server = InspectorServer(tmp_path)
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


def _log_in(page: Page, base: str) -> None:
    page.goto(f"{base}/servers/")
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit], input[type=submit]")
    page.wait_for_url("**/servers/")


def test_a_developer_lists_a_third_party_servers_tools_fills_a_form_calls_and_sees_the_paired_json_rpc(
    inspector_with_everything: InspectorServer, page: Page
) -> None:
    base = inspector_with_everything.base
    _log_in(page, base)

    page.get_by_role("link", name="everything").first.click()
    page.locator("#list-tools").click()
    tool_link = page.locator("a.tool-name", has_text="get-sum")
    expect(tool_link).to_be_visible(timeout=30_000)
    tool_link.click()

    # The form is generated from the inputSchema: a field per argument, written into the JSON.
    form = page.locator("#schema-form")
    form.locator(".sf-field[data-name='a'] input").fill("19")
    form.locator(".sf-field[data-name='b'] input").fill("23")
    assert json.loads(page.locator("#id_arguments").input_value()) == {"a": 19, "b": 23}
    page.locator("#call").click()

    page.wait_for_url("**/servers/op/*/")
    expect(page.locator("#op-status")).to_have_text("ok", timeout=30_000)
    expect(page.locator(".blocks")).to_contain_text("42")
    call = page.locator("article.msg", has=page.locator(".msg-label", has_text="tools/call"))
    expect(call).to_have_count(1)
    request, response = call.locator(".msg-body").all()
    assert '"get-sum"' in request.inner_text() and '"method"' in request.inner_text()
    assert '"result"' in response.inner_text() and "42" in response.inner_text()
    pair_id = call.locator(".msg-id").inner_text()
    operation_url = page.url

    # The record is durable: a restarted server shows the same messages, paired the same way.
    inspector_with_everything.stop()
    inspector_with_everything.start()
    page.goto(operation_url)
    again = page.locator("article.msg", has=page.locator(".msg-label", has_text="tools/call"))
    expect(again).to_have_count(1)
    assert again.locator(".msg-id").inner_text() == pair_id
    assert "42" in again.locator(".msg-body").nth(1).inner_text()
    page.goto(f"{base}/servers/everything/transcript?method=tools/call")
    expect(page.locator("article.msg .msg-label", has_text="tools/call")).to_have_count(1)
