"""P14 huge turn: the page of one turn whose model reply asked for 10,000 tool calls — first paint
in Chromium and bytes of HTML, beside a 10-call turn's page measured in the same run.

Such a turn is what a hostile model leaves with the call limits raised
(``AGENT_MAX_CALLS_PER_REPLY``), or what an imported trace or an old record holds. Its rows are
made straight in the database (``bench.huge_turn``: the decision, 10,000 tool steps with their
``tools/call`` exchanges, the answer); the two conversations are kept between runs (user
``bench-p13``). Server time and first paint are taken as P6 takes them (``bench.p6_big_conversation``):
a logged-in GET from daphne until the whole body has arrived, then Chromium's
``first-contentful-paint``, each page closed once its websocket has caught up. The huge page's
first paint is judged; the baseline gives the ratio.
"""

from __future__ import annotations

import time
from typing import Any

import httpx2

from bench import fixtures
from bench.context import Context
from bench.huge_turn import huge_turn_build
from bench.p6_big_conversation import SERVER_TIMEOUT, _paint_times, _server_times
from bench.processes import WebServer
from bench.stats import Result, judged, summary
from conversations.models import Conversation, Step
from conversations.services import demo_profile_ensure

ID, NAME, UNIT, TARGET, LIMIT = (
    "P14",
    "huge turn",
    "ms",
    "≤ 1 s (first paint, one reply of 10,000 tool calls)",
    1000.0,
)
OWNER = "bench-p13"
CALLS = 10_000
BASELINE_CALLS = 10


def _conversation(owner: Any, calls: int) -> tuple[Conversation, bool]:
    """The kept conversation of one turn of ``calls`` tool calls (made when missing)."""
    title = f"bench P14: one reply of {calls} tool calls"
    existing = Conversation.objects.filter(owner_id=owner.pk, title=title).first()
    if (
        existing is not None
        and Step.objects.filter(turn__conversation=existing, kind="tool").count() == calls
    ):
        return existing, True
    if existing is not None:
        existing.delete()
    conversation = Conversation.objects.create(
        owner=owner, model_profile=demo_profile_ensure(), title=title, paradigm="native", tool_choice="auto"
    )
    huge_turn_build(conversation=conversation, calls=calls)
    return conversation, False


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


def _page(web: WebServer, http: httpx2.Client, conversation: Conversation, repeats: int) -> dict[str, Any]:
    path = f"/c/{conversation.public_id}/"
    server_ms, size, capped = _server_times(http, path, repeats)
    paint_ms, browser = (
        (list(server_ms), {"capped": True}) if capped else _paint_times(web.base, http, path, repeats)
    )
    return {
        "server_ms": server_ms,
        "paint_ms": paint_ms,
        "page_bytes": size,
        "capped": capped or bool(browser.get("capped")),
    }


def run(ctx: Context) -> list[Result]:
    repeats = ctx.repeats(full=5, quick=2)
    owner = fixtures.user(OWNER)
    started = time.monotonic()
    huge, huge_kept = _conversation(owner, CALLS)
    baseline, baseline_kept = _conversation(owner, BASELINE_CALLS)
    made_seconds = round(time.monotonic() - started, 1)
    with WebServer(name="bench-p13-web") as web:
        http = _login(web.base)
        # The baseline first, then the huge page, from the same server in the same run.
        base_page = _page(web, http, baseline, repeats)
        huge_page = _page(web, http, huge, repeats)
    huge_paint = summary(huge_page["paint_ms"])["median"]
    base_paint = summary(base_page["paint_ms"])["median"]
    ratio = huge_paint / base_paint if base_paint else None
    ctx.log(
        f"P14 first paint: {huge_paint:.0f} ms for {CALLS:,} calls ({huge_page['page_bytes'] / 1e3:.0f} kB), "
        f"{base_paint:.0f} ms for {BASELINE_CALLS} ({base_page['page_bytes'] / 1e3:.0f} kB)"
    )
    details: dict[str, Any] = {
        "turn": {
            "calls": CALLS,
            "kept": huge_kept,
            "baseline_kept": baseline_kept,
            "made_seconds": made_seconds,
        },
        "server_ms": summary(huge_page["server_ms"]),
        "page_bytes": huge_page["page_bytes"],
        "baseline": {
            "calls": BASELINE_CALLS,
            "first_paint_ms": summary(base_page["paint_ms"]),
            "server_ms": summary(base_page["server_ms"]),
            "page_bytes": base_page["page_bytes"],
        },
        "paint_ratio": round(ratio, 2) if ratio else None,
        "summary": (
            f"server {summary(huge_page['server_ms'])['median']:.0f} ms, {huge_page['page_bytes'] / 1e3:.0f} kB of HTML; "
            f"a {BASELINE_CALLS}-call turn: paint {base_paint:.0f} ms, server "
            f"{summary(base_page['server_ms'])['median']:.0f} ms, {base_page['page_bytes'] / 1e3:.0f} kB "
            f"(paint ratio {ratio:.2f}×)"
            if ratio
            else ""
        ),
    }
    if huge_page["capped"] or base_page["capped"]:
        details["capped"] = "at least: a run hit its bound and was stopped there"
    return [
        judged(
            id=ID,
            name=NAME,
            unit=UNIT,
            target=TARGET,
            limit=LIMIT,
            samples=huge_page["paint_ms"],
            details=details,
        )
    ]
