"""A real browser against the real server on the embedded default, as `make run` starts it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect, sync_playwright

REPO_ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PASSWORD = "browser-test-password"
WEATHER = "What will the weather be like in Beijing tomorrow?"

pytestmark = pytest.mark.browser


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def inspector_server(tmp_path: Path) -> Iterator[str]:
    """``make run``'s steps in a scratch directory: migrate, set up, serve with daphne."""
    port = _free_port()
    env = {key: value for key, value in os.environ.items() if key not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(
        VAR_DIR=str(tmp_path),
        ADMIN_PASSWORD=PASSWORD,
        PORT=str(port),
        # The model thinks a little, so rows visibly arrive after the page has loaded.
        DEMO_MODEL_LATENCY_SECONDS="0.4",
    )
    manage = [sys.executable, "manage.py"]
    subprocess.run([*manage, "migrate", "--noinput"], cwd=REPO_ROOT, env=env, check=True, capture_output=True)
    subprocess.run(
        [*manage, "setup_local", "--port", str(port)], cwd=REPO_ROOT, env=env, check=True, capture_output=True
    )
    log = (tmp_path / "server.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "inspector.asgi:application"],
        cwd=REPO_ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"{base}/accounts/login/", timeout=1)
            break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                pytest.fail(f"the server did not start: {(tmp_path / 'server.log').read_text()}")
            time.sleep(0.1)
    try:
        yield base
    finally:
        server.terminate()
        server.wait(timeout=15)
        log.close()


@pytest.fixture
def page() -> Iterator[Page]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"Chromium is not installed at {CHROMIUM} (apt-get install chromium)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1600, "height": 1000})
        yield context.new_page()
        browser.close()


def _row_texts(page: Page) -> list[str]:
    return [row.inner_text() for row in page.locator(".rows > [id^=step-]").all()]


def test_a_user_asks_the_weather_question_and_watches_the_steps_arrive_live(
    inspector_server: str, page: Page
) -> None:
    page.goto(f"{inspector_server}/")
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit], input[type=submit]")
    page.fill("textarea[name=question]", WEATHER)
    page.locator("form#new-conversation [type=submit]").click()
    page.wait_for_url("**/c/*/")
    page.evaluate("window.__loadedOnce = true")

    expect(page.locator("[id^=turn-status-]")).to_contain_text("Beijing", timeout=30_000)
    rows = _row_texts(page)

    # The rows came over the websocket: the page was never reloaded.
    assert page.evaluate("window.__loadedOnce") is True
    assert len(rows) == 3
    assert "tools/call" in rows[1] and "get_weather_forecast" in rows[1]
    assert '"tools"' in rows[1]

    page.reload()
    expect(page.locator("[id^=turn-status-]")).to_contain_text("Beijing")
    assert _row_texts(page) == rows
    page.screenshot(
        path=str(Path(os.environ.get("VAR_DIR", REPO_ROOT / "var")) / "browser-weather.png"), full_page=True
    )
