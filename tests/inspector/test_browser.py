"""A real browser against the real server on the embedded default, as `make run` starts it."""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect, sync_playwright

from conversations.selectors import CALLS_BATCH, CALLS_HEAD, CALLS_TAIL
from inspector import views
from tests.support import free_port

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


class InspectorServer:
    """``make run``'s steps in a scratch directory: migrate, set up (``set_up``), serve with daphne."""

    def __init__(self, var_dir: Path) -> None:
        self.var_dir = var_dir
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.env = {
            key: value for key, value in os.environ.items() if key not in {"DATABASE_URL", "REDIS_URL"}
        }
        self.env.update(
            VAR_DIR=str(var_dir),
            ADMIN_PASSWORD=PASSWORD,
            PORT=str(self.port),
            # The model thinks a little, so rows visibly arrive after the page has loaded.
            DEMO_MODEL_LATENCY_SECONDS="0.4",
        )
        self.process: subprocess.Popen[bytes] | None = None

    def set_up(self) -> None:
        """``make run``'s ``migrate`` and ``setup_local``: run once per test process (``_made``)
        and copied, so every server starts from the same fresh state without paying for them."""
        shutil.copytree(_made(), self.var_dir, dirs_exist_ok=True)

    def run_set_up(self) -> None:
        for command in (["migrate", "--noinput"], ["setup_local", "--port", str(self.port)]):
            subprocess.run(
                [sys.executable, "manage.py", *command],
                cwd=REPO_ROOT,
                env=self.env,
                check=True,
                capture_output=True,
            )

    def start(self) -> None:
        log = (self.var_dir / "server.log").open("a")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "daphne",
                "-b",
                "127.0.0.1",
                "-p",
                str(self.port),
                "inspector.asgi:application",
            ],
            cwd=REPO_ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{self.base}/accounts/login/", timeout=1)
                return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.process.kill()
                    pytest.fail(f"the server did not start: {(self.var_dir / 'server.log').read_text()}")
                time.sleep(0.1)

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=15)
            self.process = None


@functools.cache
def _made() -> Path:
    """A ``VAR_DIR`` that ``migrate`` and ``setup_local`` ran in (the database, the keys, the
    static files), made on the first call of the process and removed at its exit."""
    made = Path(tempfile.mkdtemp(prefix="inspector-set-up-"))
    atexit.register(shutil.rmtree, made, True)
    InspectorServer(made).run_set_up()
    return made


@pytest.fixture
def inspector_server(tmp_path: Path) -> Iterator[InspectorServer]:
    server = InspectorServer(tmp_path)
    server.set_up()
    server.start()
    try:
        yield server
    finally:
        server.stop()


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
    inspector_server: InspectorServer, page: Page
) -> None:
    page.goto(f"{inspector_server.base}/")
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

    # The answer's prompt differs from the decision's: the line diff loads when it is opened.
    diff = page.locator("details.prompt-diff").last
    expect(diff.locator(".diff-body")).to_contain_text("loads when this is opened")
    diff.locator("summary").click()
    expect(diff.locator(".diff-body .dl.add").first).to_be_visible()
    expect(diff.locator(".diff-totals")).to_contain_text("+")
    expect(page.locator("#chain-badge")).to_contain_text("record intact")

    # After a restart of the whole server the conversation is still there, identical.
    inspector_server.stop()
    inspector_server.start()
    page.reload()
    expect(page.locator("[id^=turn-status-]")).to_contain_text("Beijing")
    assert _row_texts(page) == rows
    page.screenshot(path=str(inspector_server.var_dir / "browser-weather.png"), full_page=True)


def test_a_comparison_page_fills_in_live_as_its_runs_finish(
    inspector_server: InspectorServer, page: Page
) -> None:
    page.goto(f"{inspector_server.base}/compare/")
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit], input[type=submit]")
    page.fill("textarea[name=question]", WEATHER)
    runs = page.locator("input[name=paradigms]:checked").count()  # the demo model, every paradigm
    assert runs >= 2
    page.locator("form#new-comparison [type=submit]").click()
    page.wait_for_url("**/compare/*/")
    page.evaluate("window.__loadedOnce = true")

    expect(page.locator("#compare-columns")).to_have_attribute("data-finished", "true", timeout=60_000)

    # The columns were swapped in by the page itself: it was never reloaded.
    assert page.evaluate("window.__loadedOnce") is True
    expect(page.locator("#live-status")).to_have_text("all runs finished")
    expect(page.locator(".run-head")).to_have_count(runs)
    for cell in page.locator("td.answered").all():
        expect(cell).to_contain_text("yes")
    assert all("Beijing" in cell.inner_text() for cell in page.locator("td.answer").all())
    page.screenshot(path=str(inspector_server.var_dir / "browser-compare.png"), full_page=True)


def test_a_turn_that_finished_live_is_replayed_and_the_replay_shows_no_differences(
    inspector_server: InspectorServer, page: Page
) -> None:
    page.goto(f"{inspector_server.base}/")
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit], input[type=submit]")
    page.fill("textarea[name=question]", WEATHER)
    page.locator("form#new-conversation [type=submit]").click()
    page.wait_for_url("**/c/*/")
    original = page.url
    expect(page.locator("[id^=turn-status-]")).to_contain_text("Beijing", timeout=30_000)

    # The replay button came over the websocket, rendered without a request: no CSRF token of
    # its own; the page lends it one.
    button = page.locator("form.replay-form button")
    assert page.locator("form.replay-form input[name=csrfmiddlewaretoken]").count() == 0
    with page.expect_navigation():
        button.click()

    assert page.url != original
    expect(page.locator("#replay-diff")).to_contain_text("Differences from the original turn")
    expect(page.locator("[id^=turn-status-]")).to_contain_text("Beijing", timeout=30_000)
    # Without a reload: the differences and the record's badge follow the replay's end.
    page.evaluate("window.__notReloaded = true")
    expect(page.locator("#replay-diff .replay-head")).to_contain_text("identical")
    expect(page.locator("#chain-badge")).to_contain_text("record intact")
    assert page.evaluate("window.__notReloaded === true")
    page.screenshot(path=str(inspector_server.var_dir / "browser-replay.png"), full_page=True)


def _open_made_conversation(inspector_server: InspectorServer, page: Page, script: str) -> None:
    """Make a conversation with ``script`` (run by ``manage.py shell``; it prints the public id)
    and open its page in ``page``, logged in as the admin."""
    made = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", script],
        cwd=REPO_ROOT,
        env=inspector_server.env,
        check=True,
        capture_output=True,
        text=True,
    )
    public_id = made.stdout.strip().splitlines()[-1]
    page.goto(f"{inspector_server.base}/c/{public_id}/")
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit], input[type=submit]")
    page.wait_for_url(f"**/c/{public_id}/")


LONG_TURN_SCRIPT = """
from django.contrib.auth.models import User
from tests.factories import ConversationFactory, ExchangeFactory, StepFactory, TurnFactory
conversation = ConversationFactory(owner=User.objects.get(username="admin"), title="a long turn")
turn = TurnFactory(conversation=conversation, question="Add up twelve numbers.")
for n in range(12):
    ExchangeFactory(step=StepFactory(turn=turn, title=f"call number {n + 1}"))
print(conversation.public_id)
"""


def test_a_long_turn_shows_its_last_rows_and_the_earlier_ones_load_in_place(
    inspector_server: InspectorServer, page: Page
) -> None:
    _open_made_conversation(inspector_server, page, LONG_TURN_SCRIPT)

    shown = views.TURN_ROWS
    titles = page.locator(".rows > [id^=step-] .step-title")
    expect(titles).to_have_count(shown)
    assert f"call number {13 - shown}" in titles.first.inner_text()
    control = page.locator(".earlier-steps")
    expect(control).to_contain_text(f"{12 - shown} earlier steps of this turn are not shown")

    control.get_by_role("button", name=f"Show {12 - shown} earlier steps").click()

    expect(titles).to_have_count(12)
    expect(control).to_have_count(0)
    texts = [title.inner_text() for title in titles.all()]
    assert [next(word for word in text.split() if word.isdigit()) for text in texts] == [
        str(n) for n in range(1, 13)
    ]


def test_opening_a_page_catches_up_without_resending_the_rows_it_already_shows(
    inspector_server: InspectorServer, page: Page
) -> None:
    # Every row of the made conversation changed within the catch-up's overlap, so without the
    # page's view the socket re-sent them all, and the turn: the rows shown and those left out.
    sent: list[dict[str, Any]] = []
    received: list[dict[str, Any]] = []
    page.on(
        "websocket",
        lambda socket: (
            socket.on("framesent", lambda frame: sent.append(json.loads(frame))),
            socket.on("framereceived", lambda frame: received.append(json.loads(frame))),
        ),
    )

    _open_made_conversation(inspector_server, page, LONG_TURN_SCRIPT)

    # The page marks the end of the catch-up's answer, which the server ends with caught_up.
    expect(page.locator("#live-status")).to_have_attribute("data-caught-up", "1")
    catch_up = [m for m in sent if m.get("type") == "catch_up"]
    assert len(catch_up) == 1
    assert len(catch_up[0]["view"]["turns"]) == 1
    (shown,) = catch_up[0]["view"]["turns"].values()
    assert len(shown["held"]) == views.TURN_ROWS and shown["status_at"]
    # The page holds the turn's status and its rows at their versions: nothing is sent again.
    assert received == [{"type": "caught_up", "turns": 0, "rows": 0}]
    expect(page.locator(".rows > [id^=step-]")).to_have_count(views.TURN_ROWS)


def test_a_page_whose_websocket_is_refused_catches_up_over_http_with_its_view(
    inspector_server: InspectorServer, page: Page
) -> None:
    # A proxy that refuses websocket upgrades: every socket the page opens is closed at once,
    # so the page catches up over plain HTTP between its retries. Every row of the made
    # conversation changed within the catch-up's window; with the page's view nothing comes back.
    page.route_web_socket("**/ws/**", lambda socket: socket.close())

    with page.expect_response(lambda response: "/rows?" in response.url, timeout=30_000) as caught:
        _open_made_conversation(inspector_server, page, LONG_TURN_SCRIPT)

    request_url = caught.value.url
    assert "view=" in request_url
    view = json.loads(urllib.parse.parse_qs(urllib.parse.urlsplit(request_url).query)["view"][0])
    (shown,) = view["turns"].values()
    assert len(shown["held"]) == views.TURN_ROWS and shown["status_at"]
    assert caught.value.json() == {"messages": []}
    expect(page.locator(".rows > [id^=step-]")).to_have_count(views.TURN_ROWS)


MANY_TURNS_SCRIPT = """
from django.contrib.auth.models import User
from tests.factories import ConversationFactory, ExchangeFactory, StepFactory, TurnFactory
conversation = ConversationFactory(owner=User.objects.get(username="admin"), title="many turns")
for n in range(74):
    ExchangeFactory(step=StepFactory(turn=TurnFactory(conversation=conversation, question=f"question {n + 1}")))
newest = TurnFactory(conversation=conversation, question="the newest")
for n in range(31):
    ExchangeFactory(step=StepFactory(turn=newest))
print(conversation.public_id)
"""


def test_a_long_conversation_lists_its_newest_turns_and_the_earlier_ones_load_in_order(
    inspector_server: InspectorServer, page: Page
) -> None:
    _open_made_conversation(inspector_server, page, MANY_TURNS_SCRIPT)

    # The newest turn holds more rows than the page renders, so it alone is shown; the folded
    # turns before it are listed up to FOLDED_TURNS, and the rest wait behind one control.
    turns = page.locator("#turns > section.turn")
    expect(turns).to_have_count(1 + views.FOLDED_TURNS)
    unlisted = 74 - views.FOLDED_TURNS
    control = page.locator(".earlier-turns")
    expect(control).to_contain_text(f"{unlisted} earlier turns are not listed")

    control.get_by_role("button", name=f"Show the {views.EARLIER_TURNS} before these").click()

    expect(turns).to_have_count(1 + views.FOLDED_TURNS + views.EARLIER_TURNS)
    left = unlisted - views.EARLIER_TURNS
    expect(control).to_contain_text(f"{left} earlier turns are not listed")
    control.get_by_role("button", name="Show them").click()

    expect(turns).to_have_count(75)
    expect(control).to_have_count(0)
    seqs = [int(seq) for seq in turns.evaluate_all("sections => sections.map(s => s.dataset.seq)")]
    assert seqs == list(range(1, 76))
    expect(page.locator("#turns > section.turn-folded")).to_have_count(74)


HUGE_CALLS = 10_000
HUGE_TURN_SCRIPT = f"""
from django.contrib.auth.models import User
from bench.huge_turn import huge_turn_build
from tests.factories import ConversationFactory
conversation = ConversationFactory(owner=User.objects.get(username="admin"), title="a huge reply")
huge_turn_build(conversation=conversation, calls={HUGE_CALLS})
print(conversation.public_id)
"""


def test_a_reply_of_ten_thousand_calls_paints_and_loads_the_calls_between_in_place(
    inspector_server: InspectorServer, page: Page
) -> None:
    _open_made_conversation(inspector_server, page, HUGE_TURN_SCRIPT)

    shown = CALLS_HEAD + CALLS_TAIL
    tools = page.locator(".area-rpc .tool-call")
    expect(tools).to_have_count(shown)
    expect(page.locator("[id^=turn-status-]")).to_contain_text("Sunny")
    assert len(page.content().encode()) < 1_000_000
    assert page.evaluate("performance.getEntriesByName('first-contentful-paint').length") == 1
    control = page.locator('.more-calls[data-part="tools"]')
    expect(control.locator(".calls-left")).to_have_text(str(HUGE_CALLS - shown))

    control.get_by_role("button", name=f"Show {CALLS_BATCH} more").click()

    expect(tools).to_have_count(shown + CALLS_BATCH)
    expect(control.locator(".calls-left")).to_have_text(str(HUGE_CALLS - shown - CALLS_BATCH))
    # In order: the loaded calls sit between the first and the last ones.
    names = [text.split("Forecast ")[1].split(":")[0] for text in tools.all_inner_texts()]
    assert [int(name) for name in names] == [
        *range(CALLS_HEAD + CALLS_BATCH),
        *range(HUGE_CALLS - CALLS_TAIL, HUGE_CALLS),
    ]

    parsed = page.locator('.more-calls[data-part="parsed"]')
    parsed.get_by_role("button", name=f"Show {CALLS_BATCH} more").click()
    expect(page.locator(".area-parsed .call")).to_have_count(shown + CALLS_BATCH)
