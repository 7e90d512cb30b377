"""P3 pooling: how many stdio server processes 100 turns on one server spawn (target: 1).

The turns run one after another through ``turn_run`` (what a worker thread runs) with the demo
model and the bundled stdio server, each calling ``calculate``. The pooled session is closed
first, so the count starts cold. Two independent counts: the gateway's own spawn counter, and
the distinct process ids of ``servers.demo_server`` children of this process seen after each turn.
"""

from __future__ import annotations

import os
import time

from bench import fixtures
from bench.context import Context
from bench.processes import demo_server_pids
from bench.stats import Result, judged, summary
from conversations.models import Exchange, Turn
from conversations.runner import turn_run
from servers import gateway

ID, NAME, UNIT, TARGET, LIMIT = "P3", "pooling", "processes", "1 process per 100 turns", 1
QUESTION = "What is 12 * (3 + 4)?"


def _block(turns: int, owner: object, profile: object, server: object) -> tuple[int, int, list[float], int]:
    """Run ``turns`` turns from a cold pool; returns (spawns, distinct pids, turn seconds, failed)."""
    gateway.close_server(server.pk)  # type: ignore[attr-defined]
    before = gateway.spawn_count(server.pk)  # type: ignore[attr-defined]
    pids: set[int] = set()
    seconds: list[float] = []
    failed = 0
    for _ in range(turns):
        _, turn = fixtures.queued_turn(owner=owner, profile=profile, server=server, question=QUESTION)  # type: ignore[arg-type]
        started = time.perf_counter()
        turn_run(turn_id=turn.pk)
        seconds.append(time.perf_counter() - started)
        pids |= demo_server_pids(os.getpid())
        turn.refresh_from_db()
        failed += turn.status != Turn.Status.DONE
    spawns = gateway.spawn_count(server.pk) - before  # type: ignore[attr-defined]
    return spawns, len(pids), seconds, failed


def run(ctx: Context) -> list[Result]:
    turns = 30 if ctx.quick else 100
    repeats = ctx.repeats(full=2, quick=1)
    owner = fixtures.user("bench-p3")
    fixtures.purge(owner)
    profile = fixtures.demo_profile()
    server = fixtures.demo_server()
    spawns: list[float] = []
    distinct: list[int] = []
    turn_seconds: list[float] = []
    failed = 0
    for index in range(repeats):
        count, pids, seconds, bad = _block(turns, owner, profile, server)
        spawns.append(count)
        distinct.append(pids)
        turn_seconds.extend(seconds)
        failed += bad
        ctx.log(f"P3 {index + 1}/{repeats}: {turns} turns, {count} spawn(s), {pids} distinct server pid(s)")
    calls = Exchange.objects.filter(turn__conversation__owner_id=owner.pk, label="tools/call").count()
    result = judged(
        id=ID,
        name=NAME,
        unit=UNIT,
        target=TARGET if turns == 100 else f"1 process per {turns} turns",
        limit=LIMIT,
        samples=spawns,
        statistic="max",
        details={
            "turns_per_repeat": turns,
            "distinct_server_pids_per_repeat": distinct,
            "tools_call_exchanges": calls,
            "turns_failed": failed,
            "turn_ms": summary([s * 1000 for s in turn_seconds]),
            "summary": f"{turns} turns per repeat, {calls} tools/call in all",
        },
    )
    if failed or any(d != LIMIT for d in distinct):
        result.status = "fail"
    fixtures.purge(owner)
    return [result]
