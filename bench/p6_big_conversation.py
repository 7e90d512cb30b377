"""P6 big conversation: the page of a 10,000-step conversation — server time and first paint.

The conversation is made once and kept (user ``bench-p6``): 500 turns of 20 steps (19
``calculate`` calls, then an answer), so 10,000 steps (model decisions, each with its tool call
on the same row; plus one connect row per turn). Its first ``REAL_TURNS`` turns are run by the
product against the fake model; every request body carries the conversation so far, as it does
with a real model, so later steps are large. Running 500 turns that way would take long (each
body carries up to 10,000 messages): the remaining turns are copies of those, made in SQL
(``INSERT … SELECT``) — the same rows with new keys, turn numbers and times, so their bodies are
those of turns 1 to ``REAL_TURNS``, not larger.

Server time: a logged-in GET of the page from daphne, until the whole body has arrived. The page
renders the rows of its newest turns (``inspector.views.PAGE_ROWS``), lists the newest older
turns folded (``inspector.views.FOLDED_TURNS``) and offers the turns before those on request;
``rows_in_dom`` and ``turns_in_dom`` say how many rows and turn blocks the browser got.
First paint: Chromium (Playwright) navigates to the page; ``first-contentful-paint`` is read from
the Performance timeline (milliseconds from navigation start, so it includes the server time).
Each page is closed only once its websocket has caught up (the page marks the catch-up's end),
so a sample's page does not share the server with the one before it: that work runs in the
same daphne thread as the next page's request (``caught_up_ms`` says when it ended).
The first paint is judged. Runs that exceed the bounds below are recorded at the bound and
flagged, never dropped.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import httpx2
from django.db import connection, transaction

from bench import audit_data, fixtures
from bench.context import Context
from bench.environment import REPO_ROOT
from bench.fake_model import FakeModel
from bench.processes import WebServer
from bench.stats import Result, judged, summary
from conversations.models import Conversation, Step, Turn
from conversations.runner import turn_run
from conversations.services import turn_start
from inspector.fragments import render_row

ID, NAME, UNIT, TARGET, LIMIT = (
    "P6",
    "big conversation",
    "ms",
    "≤ 500 ms (first paint, 10,000 steps; server time inside it)",
    500.0,
)
OWNER = "bench-p6"
TITLE = "bench P6: 10,000 steps"
TURNS = 500
# Turns run through the product; the rest are SQL copies of these, in order.
REAL_TURNS = 50
STEPS_PER_TURN = 20
QUESTION = "Work out the running totals with the calculator, one call at a time."
# Bounds: a page slower than this is recorded at the bound ("at least"), flagged, not waited for.
SERVER_TIMEOUT = 60.0
BROWSER_TIMEOUT_MS = 60_000
BUDGET_SECONDS = 60.0
# Rows rendered one by one (every Nth) to estimate and profile the page when it is too slow.
ROW_SAMPLE_EVERY = 50
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


def _decisions(conversation: Conversation) -> int:
    return Step.objects.filter(
        turn__conversation=conversation, kind__in=[Step.Kind.DECIDE, Step.Kind.ANSWER]
    ).count()


def _conversation(ctx: Context) -> tuple[Conversation, dict[str, Any]]:
    """The 10,000-step conversation, generated when missing or incomplete."""
    owner = fixtures.user(OWNER)
    existing = Conversation.objects.filter(owner_id=owner.pk, title=TITLE).first()
    wanted = TURNS * STEPS_PER_TURN
    if (
        existing is not None
        and _decisions(existing) == wanted
        and not existing.turns.exclude(status=Turn.Status.DONE).exists()
    ):
        return existing, {"reused": True}
    if (
        existing is not None
        and existing.turns.count() == REAL_TURNS
        and _decisions(existing) == REAL_TURNS * STEPS_PER_TURN
        and not existing.turns.exclude(status=Turn.Status.DONE).exists()
    ):
        # The turns run by the product are there (an earlier run stopped before copying them).
        started = time.monotonic()
        copy_turns(existing, REAL_TURNS, TURNS)
        return existing, {
            "reused": "the turns run earlier",
            "turns_run": REAL_TURNS,
            "turns_copied_in_sql": TURNS - REAL_TURNS,
            "generated_seconds": round(time.monotonic() - started, 1),
        }
    fixtures.purge(owner)
    started = time.monotonic()
    server = fixtures.demo_server()
    with FakeModel(steps=STEPS_PER_TURN) as model:
        profile = fixtures.fake_profile(model.base_url)
        conversation, turn = fixtures.queued_turn(
            owner=owner, profile=profile, server=server, question=QUESTION
        )
        Conversation.objects.filter(pk=conversation.pk).update(title=TITLE)
        for index in range(REAL_TURNS):
            if index:
                turn = turn_start(conversation=conversation, question=QUESTION, dispatch=False)
            turn_run(turn_id=turn.pk)
            turn.refresh_from_db()
            if turn.status != Turn.Status.DONE:
                raise RuntimeError(f"P6 generation: turn {index + 1} ended {turn.status}: {turn.error}")
            if (index + 1) % 10 == 0:
                ctx.log(f"P6 generating: {index + 1}/{REAL_TURNS} turns ({time.monotonic() - started:.0f} s)")
    ran = time.monotonic() - started
    copy_turns(conversation, REAL_TURNS, TURNS)
    ctx.log(
        f"P6 generating: turns {REAL_TURNS + 1}-{TURNS} copied in SQL ({time.monotonic() - started - ran:.0f} s)"
    )
    conversation.refresh_from_db()
    return conversation, {
        "reused": False,
        "turns_run": REAL_TURNS,
        "turns_copied_in_sql": TURNS - REAL_TURNS,
        "generated_seconds": round(time.monotonic() - started, 1),
    }


def _columns(table: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s ORDER BY ordinal_position",
            [table],
        )
        return [name for (name,) in cursor.fetchall()]


def _insert_copy(table: str, overrides: dict[str, str], source: str) -> None:
    """INSERT INTO table SELECT (override, else the source row's column) FROM source."""
    columns = _columns(table)
    select = ", ".join(overrides.get(name, f"t.{name}") for name in columns)
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {table} ({', '.join(columns)}) SELECT {select} FROM {source}")


def copy_turns(conversation: Conversation, real: int, total: int) -> None:
    """Turns ``real + 1`` to ``total`` of ``conversation``: copies of turns 1 to ``real`` in turn
    (turn n copies turn (n - 1) % real + 1), with their steps and exchanges, in SQL.

    Keys are new; a copy keeps its source's rows otherwise, its times moved after the turn
    before it (a turn every minute).
    """
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL synchronous_commit TO off")
        cursor.execute(
            f"""CREATE TEMP TABLE p6_map ON COMMIT DROP AS
            SELECT n, src.id AS source_id, nextval(pg_get_serial_sequence('conversations_turn', 'id')) AS id,
                   (n - src.seq) * interval '1 minute' AS shift
            FROM generate_series({real + 1}, {total}) AS n
            JOIN conversations_turn src ON src.conversation_id = %s AND src.seq = (n - 1) %% {real} + 1""",
            [conversation.pk],
        )
        _insert_copy(
            "conversations_turn",
            {
                "id": "m.id",
                "seq": "m.n",
                "created_at": "t.created_at + m.shift",
                "started_at": "t.started_at + m.shift",
                "finished_at": "t.finished_at + m.shift",
                "updated_at": "t.updated_at + m.shift",
                "heartbeat_at": "t.heartbeat_at + m.shift",
            },
            "p6_map m JOIN conversations_turn t ON t.id = m.source_id",
        )
        cursor.execute(
            """CREATE TEMP TABLE p6_steps ON COMMIT DROP AS
            SELECT t.id AS source_id, m.id AS turn_id, m.shift,
                   nextval(pg_get_serial_sequence('conversations_step', 'id')) AS id
            FROM p6_map m JOIN conversations_step t ON t.turn_id = m.source_id"""
        )
        cursor.execute("CREATE INDEX ON p6_steps (source_id, turn_id)")
        _insert_copy(
            "conversations_step",
            {
                "id": "s.id",
                "turn_id": "s.turn_id",
                "parent_id": "(SELECT p.id FROM p6_steps p WHERE p.source_id = t.parent_id AND p.turn_id = s.turn_id)",
                "started_at": "t.started_at + s.shift",
                "finished_at": "t.finished_at + s.shift",
                "updated_at": "t.updated_at + s.shift",
            },
            "p6_steps s JOIN conversations_step t ON t.id = s.source_id",
        )
        _insert_copy(
            "conversations_exchange",
            {
                "id": "nextval(pg_get_serial_sequence('conversations_exchange', 'id'))",
                "turn_id": "m.id",
                "step_id": "(SELECT p.id FROM p6_steps p WHERE p.source_id = t.step_id AND p.turn_id = m.id)",
                "started_at": "t.started_at + m.shift",
            },
            "p6_map m JOIN conversations_exchange t ON t.turn_id = m.source_id",
        )


def _login(base: str) -> httpx2.Client:
    client = httpx2.Client(base_url=base, follow_redirects=False, timeout=SERVER_TIMEOUT)
    client.get("/accounts/login/")
    client.post(
        "/accounts/login/",
        data={
            "username": OWNER,
            "password": fixtures.PASSWORD,
            "csrfmiddlewaretoken": client.cookies["csrftoken"],
        },
        headers={"Referer": f"{base}/accounts/login/"},
    )
    if "sessionid" not in client.cookies:
        raise RuntimeError("could not log in to the bench server")
    return client


def _server_times(http: httpx2.Client, path: str, repeats: int) -> tuple[list[float], int, bool]:
    """(ms per GET, page bytes, whether a GET hit the bound)."""
    times: list[float] = []
    size = 0
    spent = 0.0
    capped = False
    while len(times) < repeats and (spent < BUDGET_SECONDS or len(times) < 1):
        started = time.perf_counter()
        try:
            response = http.get(path)
            size = len(response.content)
            if response.status_code != 200:
                raise RuntimeError(f"the page answered HTTP {response.status_code}")
            elapsed = time.perf_counter() - started
        except httpx2.TimeoutException:
            elapsed, capped = SERVER_TIMEOUT, True
        spent += elapsed
        times.append(elapsed * 1000)
        if capped:
            break
    return times, size, capped


PAINT_JS = """() => new Promise(resolve => {
  const found = () => performance.getEntriesByName('first-contentful-paint')[0];
  if (found()) return resolve(found().startTime);
  new PerformanceObserver(list => {
    const entry = list.getEntriesByName('first-contentful-paint')[0];
    if (entry) resolve(entry.startTime);
  }).observe({type: 'paint', buffered: true});
})"""


STYLESHEETS_END_JS = """() => Math.max(0, ...performance.getEntriesByType('resource')
  .filter(entry => entry.initiatorType === 'link').map(entry => entry.responseEnd))"""


def _paint_times(
    base: str, http: httpx2.Client, path: str, repeats: int
) -> tuple[list[float], dict[str, Any]]:
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        raise RuntimeError(f"Chromium is not installed at {CHROMIUM} (apt-get install chromium)")
    times: list[float] = []
    extra: dict[str, Any] = {
        "load_event_ms": [],
        # Where the time to first paint goes: the HTML's first and last byte, the DOM parsed, and
        # the render-blocking stylesheets' end (milliseconds from navigation start).
        "response_start_ms": [],
        "response_end_ms": [],
        "dom_interactive_ms": [],
        "stylesheets_end_ms": [],
        # When the page's websocket had caught up (its answer ended), from navigation start.
        "caught_up_ms": [],
        "rows_in_dom": None,
        "turns_in_dom": None,
        "capped": False,
    }
    spent = 0.0
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1600, "height": 1000})
            context.add_cookies(
                [{"name": name, "value": value, "url": base} for name, value in http.cookies.items()]
            )
            while len(times) < repeats and (spent < BUDGET_SECONDS or not times):
                page = context.new_page()
                started = time.perf_counter()
                try:
                    page.goto(f"{base}{path}", wait_until="commit", timeout=BROWSER_TIMEOUT_MS)
                    paint = float(page.evaluate(PAINT_JS))
                    page.wait_for_load_state("load", timeout=BROWSER_TIMEOUT_MS)
                    timing = page.evaluate("() => performance.getEntriesByType('navigation')[0].toJSON()")
                    extra["load_event_ms"].append(float(timing["loadEventStart"]))
                    extra["response_start_ms"].append(float(timing["responseStart"]))
                    extra["response_end_ms"].append(float(timing["responseEnd"]))
                    extra["dom_interactive_ms"].append(float(timing["domInteractive"]))
                    extra["stylesheets_end_ms"].append(float(page.evaluate(STYLESHEETS_END_JS)))
                    page.wait_for_selector(
                        "#live-status[data-caught-up]", state="attached", timeout=BROWSER_TIMEOUT_MS
                    )
                    extra["caught_up_ms"].append(float(page.evaluate("() => performance.now()")))
                    extra["rows_in_dom"] = page.locator(".rows > [id^=step-]").count()
                    extra["turns_in_dom"] = page.locator("#turns > section.turn").count()
                except PlaywrightError:
                    paint = float(BROWSER_TIMEOUT_MS)
                    extra["capped"] = True
                spent += time.perf_counter() - started
                times.append(paint)
                page.close()
                if extra["capped"]:
                    break
        finally:
            browser.close()
    return times, extra


def _breakdown_note(browser: dict[str, Any]) -> str:
    """In the browser: HTML first and last byte, stylesheets loaded, DOM parsed (medians)."""
    keys = ("response_start_ms", "response_end_ms", "stylesheets_end_ms", "dom_interactive_ms")
    if not all(browser.get(key) for key in keys):
        return ""
    start, end, css, dom = (summary(browser[key])["median"] for key in keys)
    return f"; in Chromium: first byte {start:.0f}, last byte {end:.0f}, stylesheets {css:.0f}, DOM parsed {dom:.0f} ms"


def _row_costs(ctx: Context, conversation: Conversation) -> dict[str, Any]:
    """Render every Nth row as the websocket would (same fragment as the page), under pyinstrument.

    The mean per row times the number of rows estimates the page's server time; the profile
    shows where that time goes.
    """
    rows = list(
        Step.objects.filter(turn__conversation=conversation, parent__isnull=True)
        .order_by("turn__seq", "seq")
        .values_list("pk", "turn__seq")
    )
    sample = rows[::ROW_SAMPLE_EVERY]
    try:
        from pyinstrument import Profiler
    except ImportError:
        Profiler = None  # noqa: N806 — the class, when installed
    profiler = Profiler(interval=0.001) if Profiler is not None and ctx.profile else None
    times: list[tuple[int, float, int]] = []
    if profiler is not None:
        profiler.start()
    for step_id, turn_seq in sample:
        started = time.perf_counter()
        message = render_row(conversation=conversation, step_id=step_id)
        times.append(
            (turn_seq, (time.perf_counter() - started) * 1000, len(message["html"]) if message else 0)
        )
    out: dict[str, Any] = {}
    if profiler is not None:
        profiler.stop()
        path = ctx.results_dir / "p6-rows-profile.txt"
        path.write_text(profiler.output_text(unicode=True, color=False))
        out["profile"] = str(path.relative_to(REPO_ROOT))
    mean = sum(ms for _, ms, _ in times) / len(times)
    out.update(
        {
            "rows_sampled": len(times),
            "row_ms_by_turn": [[turn, round(ms, 1), size] for turn, ms, size in times],
            "estimated_page_server_ms": round(mean * len(rows)),
            "estimated_page_bytes": int(sum(size for _, _, size in times) / len(times) * len(rows)),
        }
    )
    return out


def run(ctx: Context) -> list[Result]:
    repeats = ctx.repeats(full=5, quick=2)
    conversation, made = _conversation(ctx)
    if made.get("reused") is not True and ctx.services.postgres:
        audit_data.vacuum()  # as autovacuum would, after the 10,000 new steps
    decisions = _decisions(conversation)
    rows = Step.objects.filter(turn__conversation=conversation, parent__isnull=True).count()
    path = f"/c/{conversation.public_id}/"
    with WebServer(name="bench-p6-web") as web:
        http = _login(web.base)
        server_ms, size, server_capped = _server_times(http, path, repeats)
        ctx.log(
            f"P6 server: median {summary(server_ms)['median']:.0f} ms"
            + (
                f" (stopped at the {SERVER_TIMEOUT:.0f} s bound)"
                if server_capped
                else f" for {size / 1e6:.1f} MB of HTML"
            )
        )
        if server_capped:
            # Chromium cannot paint a page the server has not sent: its first paint is at least as late.
            paint_ms = list(server_ms)
            browser: dict[str, Any] = {"capped": True, "load_event_ms": [], "rows_in_dom": None}
        else:
            paint_ms, browser = _paint_times(web.base, http, path, repeats)
        ctx.log(f"P6 first paint: median {summary(paint_ms)['median']:.0f} ms")
    diagnosis = (
        _row_costs(ctx, conversation) if (server_capped or browser["capped"] or min(paint_ms) > LIMIT) else {}
    )
    details: dict[str, Any] = {
        "conversation": {"turns": TURNS, "steps": decisions, "page_rows": rows, **made},
        "server_ms": summary(server_ms),
        "server_samples_ms": server_ms,
        "server_capped_at_ms": SERVER_TIMEOUT * 1000 if server_capped else None,
        "page_bytes": size,
        "first_paint_capped": browser["capped"],
        "load_event_ms": summary(browser["load_event_ms"]) if browser["load_event_ms"] else None,
        "paint_breakdown_ms": {
            key: summary(browser[key])
            for key in (
                "response_start_ms",
                "response_end_ms",
                "stylesheets_end_ms",
                "dom_interactive_ms",
                "caught_up_ms",
            )
            if browser.get(key)
        },
        "rows_in_dom": browser["rows_in_dom"],
        "turns_in_dom": browser.get("turns_in_dom"),
        "row_rendering": diagnosis,
        "summary": (
            f"server ≥ {SERVER_TIMEOUT:.0f} s (bound hit; estimated {diagnosis.get('estimated_page_server_ms', 0) / 1000:.0f} s, "
            f"{diagnosis.get('estimated_page_bytes', 0) / 1e6:.0f} MB), first paint not reached"
            if server_capped
            else (
                f"server {summary(server_ms)['median']:.0f} ms, {size / 1e6:.1f} MB of HTML, "
                f"{browser['rows_in_dom']} of {rows} rows rendered, {browser.get('turns_in_dom')} of {TURNS} turns listed "
                "(older turns folded or listed on demand)" + _breakdown_note(browser)
            )
        ),
    }
    if server_capped or browser["capped"]:
        details["capped"] = "at least: a run hit its bound and was stopped there"
    return [
        judged(id=ID, name=NAME, unit=UNIT, target=TARGET, limit=LIMIT, samples=paint_ms, details=details)
    ]
