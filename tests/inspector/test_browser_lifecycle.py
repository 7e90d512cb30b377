"""A real browser against the real server on the embedded default: the Cancel button stops a turn
stuck in a slow model call, and a turn left running by a killed server is marked interrupted
when the server starts again. Either way the conversation takes the next question. An eval run
the killed server was driving is driven on to its end by the next one."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.inspector.test_browser import PASSWORD, WEATHER, InspectorServer
from tests.inspector.test_browser import page as page  # noqa: F401 — the Chromium page fixture

pytestmark = pytest.mark.browser

SLOW = f"{WEATHER} [demo:slow=30]"


@pytest.fixture
def inspector_server(tmp_path: Path) -> Iterator[InspectorServer]:
    server = InspectorServer(tmp_path)
    server.set_up()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _ask_slowly(server: InspectorServer, page: Page) -> None:
    """Sign in, ask a question the demo model takes 30 s over, and wait until it is being answered."""
    page.goto(f"{server.base}/")
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit], input[type=submit]")
    page.fill("textarea[name=question]", SLOW)
    page.locator("form#new-conversation [type=submit]").click()
    page.wait_for_url("**/c/*/")
    expect(page.locator(".turn-status .badge")).to_have_text("Running", timeout=30_000)
    # The model call is in flight: its row is on the page.
    expect(page.locator(".rows > [id^=step-]")).to_have_count(2, timeout=30_000)


def _statuses(server: InspectorServer) -> list[str]:
    with sqlite3.connect(server.var_dir / "inspector.sqlite3") as db:
        return [row[0] for row in db.execute("SELECT status FROM conversations_turn ORDER BY id")]


def _ask_again(page: Page) -> None:
    follow_up = page.locator("form#follow-up")
    expect(follow_up.locator("button[type=submit]")).to_be_enabled()
    follow_up.locator("textarea[name=question]").fill(WEATHER)
    follow_up.locator("button[type=submit]").click()
    expect(page.locator(".turn-status .badge").last).to_have_text("Done", timeout=30_000)


def test_the_cancel_button_stops_a_turn_stuck_in_a_slow_model_call(
    inspector_server: InspectorServer, page: Page
) -> None:
    _ask_slowly(inspector_server, page)

    page.locator("form.cancel-form button[type=submit]").click()

    # Within 10 s the page shows the turn cancelled, live, with who cancelled it.
    status = page.locator(".turn-status").first
    expect(status.locator(".badge")).to_have_text("Cancelled", timeout=10_000)
    expect(status).to_contain_text("cancelled by admin")
    expect(page.locator(".rows > [id^=step-]").last).to_contain_text("cancelled by admin")
    expect(page.locator("form.cancel-form")).to_have_count(0)
    assert _statuses(inspector_server) == ["cancelled"]

    _ask_again(page)
    assert _statuses(inspector_server) == ["cancelled", "done"]


def test_a_turn_left_running_by_a_killed_server_is_interrupted_at_the_next_start(
    inspector_server: InspectorServer, page: Page
) -> None:
    _ask_slowly(inspector_server, page)
    assert inspector_server.process is not None

    inspector_server.process.kill()
    inspector_server.process.wait()
    inspector_server.process = None
    assert _statuses(inspector_server) == ["running"]
    inspector_server.start()

    page.reload()
    status = page.locator(".turn-status").first
    expect(status.locator(".badge")).to_have_text("Interrupted")
    expect(status).to_contain_text("is gone")
    assert _statuses(inspector_server) == ["interrupted"]
    rows = page.locator(".rows > [id^=step-]")
    expect(rows).to_have_count(3)  # the connect and the model call it recorded, and why it ended
    expect(rows.last).to_contain_text("the turn was interrupted")

    _ask_again(page)
    assert _statuses(inspector_server) == ["interrupted", "done"]


EVAL_SUITE = (
    "name: resumed\nmodels: [demo]\nparadigms: [native]\nservers: [demo]\ncases:\n"
    "  - {question: 'What is 2 + 2?', expect: [{tool: demo/calculate}]}\n"
    "  - {question: 'What is 3 + 3? [demo:slow=6]', expect: [{tool: demo/calculate}]}\n"
    "  - {question: Hello there, expect: []}\n"
)


def _eval_run(server: InspectorServer) -> tuple[str, int, int]:
    with sqlite3.connect(server.var_dir / "inspector.sqlite3") as db:
        row = db.execute("SELECT status, finished, passed FROM evals_evalrun").fetchone()
    return row[0], row[1], row[2]


def test_an_eval_run_left_running_by_a_killed_server_is_driven_on_at_the_next_start(
    inspector_server: InspectorServer, page: Page
) -> None:
    page.goto(f"{inspector_server.base}/evals/")
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit], input[type=submit]")
    page.fill("#new-suite textarea[name=document]", EVAL_SUITE)
    page.locator("#new-suite [type=submit]").click()
    page.fill("#run-suite input[name=concurrency]", "1")
    page.locator("#run-suite [type=submit]").click()
    page.wait_for_url("**/evals/runs/*/")
    # The first case has ended and the slow second one is being asked.
    expect(page.locator("#eval-progress-label")).to_contain_text("1 of 3 case runs", timeout=30_000)
    expect(page.locator("#eval-progress-label")).to_contain_text("1 running", timeout=30_000)
    assert inspector_server.process is not None

    inspector_server.process.kill()
    inspector_server.process.wait()
    inspector_server.process = None
    assert _eval_run(inspector_server) == ("running", 1, 1)
    inspector_server.start()

    page.reload()
    expect(page.locator("#live-status")).to_have_text("run finished", timeout=60_000)
    assert _eval_run(inspector_server) == ("done", 3, 3)
    # The case whose turn the dead server was running was asked again; that turn stays recorded.
    assert _statuses(inspector_server) == ["done", "interrupted", "done", "done"]
