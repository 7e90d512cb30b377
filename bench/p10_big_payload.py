"""P10 big payload memory: resident memory a 10 MB tool result leaves behind, per paradigm.

In this process (what a worker thread runs: ``turn_run``, the demo model served in-process, a
pooled stdio server), per paradigm: a turn with an empty tool result first (so the session,
caches and code are warm), the resident set size, then a turn whose tool result is 10 MB
(``blob`` of ``tests.fixtures.broken_server``), a garbage collection and the resident set size
again. The figure judged is the largest growth over the paradigms (target ≤ 50 MB); the peak
during the turn is reported beside it, sampled every 20 ms.

In the same run, the processes as deployed (``bench.p10_served``): the embedded web process
(daphne with the in-process runner, as ``make run`` serves it) and, with Redis, a Celery worker
behind daphne. Each is asked, through the page's own form and with its websocket open, a 0 MB
turn in every paradigm (before: its RSS once idle), then a 10 MB turn in every paradigm, each
turn's page read once it ended (after: its RSS once idle). Their growth is judged with the
in-process rows.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from pathlib import Path

from django.db import connections
from django.db.models.functions import Length

from bench import fixtures, p10_served
from bench.context import Context
from bench.processes import RssSampler, rss_bytes
from bench.stats import Result, judged
from conversations.models import Exchange, Turn
from conversations.runner import turn_run
from conversations.services import conversation_start
from servers import gateway
from servers.models import McpServer

ID, NAME, UNIT, TARGET, LIMIT = (
    "P10",
    "big payload memory",
    "MB",
    "≤ 50 MB left after a 10 MB tool result",
    50.0,
)
MB = 1024 * 1024
MEGABYTES = 10
REPO_ROOT = Path(__file__).resolve().parent.parent


def _server() -> McpServer:
    server, _ = McpServer.objects.update_or_create(
        name="bench-big-payload",
        defaults={
            "transport": "stdio",
            "command": sys.executable,
            "args": ["-m", "tests.fixtures.broken_server"],
            "cwd": str(REPO_ROOT),
            "call_timeout": 120,
            "allow_non_staff_spawn": True,
        },
    )
    return server


def _turn(
    owner: object, profile: object, server: McpServer, paradigm: str, megabytes: int
) -> tuple[str, int]:
    """Run one blob turn; returns its status and the size of its stored tools/call response."""
    _, turn = conversation_start(
        owner=owner,  # type: ignore[arg-type]
        model_profile=profile,  # type: ignore[arg-type]
        question=f"Give me a blob of {megabytes} megabytes",
        servers=[server],
        paradigm=paradigm,
        dispatch=False,
    )
    turn_run(turn_id=turn.pk)
    status = Turn.objects.filter(pk=turn.pk).values_list("status", flat=True).get()
    # The length is taken in SQL: reading the body back here would add its own copy to the figure.
    stored = (
        Exchange.objects.filter(turn_id=turn.pk, label="tools/call")
        .annotate(size=Length("response_body"))
        .values_list("size", flat=True)
    )
    return status, max(stored, default=0)


def _without_pooled_connections() -> int:
    """RSS once PostgreSQL's connection pool is closed (0 on SQLite, which has none)."""
    connection = connections["default"]
    if connection.vendor != "postgresql":
        return 0
    connection.close()
    connection.close_pool()  # type: ignore[attr-defined]
    gc.collect()
    return rss_bytes(os.getpid())


def run(ctx: Context) -> list[Result]:
    paradigms = (
        ["native", "prompt_xml"]
        if ctx.quick
        else ["native", "prompt_xml", "prompt_json", "structured", "intent"]
    )
    owner = fixtures.user("bench-p10")
    fixtures.purge(owner)
    profile = fixtures.demo_profile()
    server = _server()
    growth: list[float] = []
    rows: dict[str, dict[str, float | int | str]] = {}
    for paradigm in paradigms:
        _turn(owner, profile, server, paradigm, 0)
        gc.collect()
        before = rss_bytes(os.getpid())
        started = time.perf_counter()
        with RssSampler(os.getpid(), interval=0.02) as sampler:
            status, stored = _turn(owner, profile, server, paradigm, MEGABYTES)
        seconds = time.perf_counter() - started
        peak = max(sampler.own, default=0)
        gc.collect()
        after = rss_bytes(os.getpid())
        growth.append((after - before) / MB)
        pooled = _without_pooled_connections()
        rows[paradigm] = {
            "before_mb": round(before / MB, 1),
            "after_mb": round(after / MB, 1),
            "peak_mb": round(peak / MB, 1),
            "left_mb": round((after - before) / MB, 1),
            # libpq keeps each connection's buffers at the largest message it carried: what the
            # database connection pool holds of what is left.
            "left_mb_after_closing_the_pool": round((pooled - before) / MB, 1) if pooled else "",
            "turn_s": round(seconds, 2),
            "status": status,
            "tools_call_stored_chars": stored,
        }
        ctx.log(f"P10 {paradigm}: {rows[paradigm]}")
    gateway.close_server(server.pk)
    fixtures.purge(owner)
    served = p10_served.measure(ctx, owner, profile, server, paradigms)
    for name, row in served.items():
        if isinstance(row.get("left_mb"), float):
            growth.append(float(row["left_mb"]))
        ctx.log(f"P10 {name}: {row}")
    fixtures.purge(owner)
    return [
        judged(
            id=ID,
            name=NAME,
            unit=UNIT,
            target=TARGET,
            limit=LIMIT,
            samples=growth,
            statistic="max",
            details={
                "judged_on": "RSS after 10 MB tool-result turns minus RSS before them: in-process (each paradigm, after gc), the embedded web process and the Celery worker (all paradigms, once idle); the worst",
                "paradigms": rows,
                "served": served,
                "summary": f"{len(paradigms)} paradigms, one {MEGABYTES} MB tool result each: in-process worst "
                f"{max(growth[: len(paradigms)]):.0f} MB; "
                + "; ".join(p10_served.summary(name, row) for name, row in served.items()),
            },
        )
    ]
