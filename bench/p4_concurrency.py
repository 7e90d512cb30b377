"""P4 concurrency (and P7 memory): 200 turns at once on one worker host.

The fake model sleeps 1 s per call and makes 3 calls per turn (2 ``calculate`` calls, then the
answer), so a perfect host finishes all 200 turns in 3 s. One Celery worker process runs them
on its thread pool (``-P threads -c 200``, env ``BENCH_P4_CONCURRENCY``), against PostgreSQL,
Redis and the bundled stdio MCP server, as deployed. All 200 turns are queued, then dispatched in
one go; the wall time runs from the first dispatch to the last turn's ``finished_at``.
Every turn must store exactly its exchanges: 3 model calls, 2 ``tools/call``, 1 ``tools/list``.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import Count, Max
from django.utils import timezone

from bench import fixtures, p7_memory, profiling
from bench.context import Context
from bench.environment import REPO_ROOT
from bench.fake_model import FakeModel
from bench.processes import CeleryWorker, RssSampler, cpu_seconds, demo_server_pids, rss_bytes
from bench.stats import Result, judged, not_run
from conversations.execution import turn_dispatch
from conversations.models import Exchange, Turn

ID, NAME, UNIT, TARGET, LIMIT = (
    "P4",
    "concurrency",
    "×",
    "≤ 1.5× of 3 s; exchanges stored ÷ expected = 1.0",
    1.5,
)
TURNS = 200
CALLS = 3
LATENCY = float(os.environ.get("BENCH_P4_LATENCY", "1.0"))
IDEAL_SECONDS = CALLS * LATENCY
TIMEOUT = 120.0
FINISHED = [Turn.Status.DONE, Turn.Status.FAILED, Turn.Status.INTERRUPTED]
EXPECTED = {"llm": CALLS, "tools/call": CALLS - 1, "tools/list": 1}
QUESTION = "Work out the running totals with the calculator, one call at a time."


def _queue(count: int, owner: Any, profile: Any, server: Any) -> list[int]:
    with transaction.atomic():
        return [
            fixtures.queued_turn(owner=owner, profile=profile, server=server, question=QUESTION)[1].pk
            for _ in range(count)
        ]


class Watch:
    """What the load looked like from outside: turns running at once, database connections."""

    def __init__(self) -> None:
        self.max_running = 0
        self.max_connections = 0

    def look(self, ids: list[int]) -> bool:
        """Record one look; True while some turn is unfinished."""
        counts = dict(
            Turn.objects.filter(pk__in=ids).values_list("status").annotate(n=Count("id")).order_by()
        )
        self.max_running = max(self.max_running, counts.get(Turn.Status.RUNNING, 0))
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
            self.max_connections = max(self.max_connections, int(cursor.fetchone()[0]))
        return sum(n for status, n in counts.items() if status not in FINISHED) > 0


def _load(ids: list[int], watch: Watch | None = None) -> tuple[datetime, bool]:
    """Dispatch every turn at once; returns when the first went out and whether all finished."""
    watch = watch or Watch()
    started = timezone.now()
    for turn_id in ids:
        turn_dispatch(turn_id)
    deadline = time.monotonic() + TIMEOUT
    while watch.look(ids):
        if time.monotonic() > deadline:
            return started, False
        time.sleep(0.1)
    return started, True


def _stored(ids: list[int]) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for row in Exchange.objects.filter(turn_id__in=ids).values("channel", "label").annotate(n=Count("id")):
        key = "llm" if row["channel"] == Exchange.Channel.LLM else row["label"]
        counts[key] += row["n"]
    return dict(counts)


def _profile(ctx: Context, pid: int, ids: list[int], ratio: float) -> dict[str, Any]:
    """One more (unmeasured) load with py-spy sampling the worker for most of it."""
    seconds = max(3, min(30, int(ratio * IDEAL_SECONDS * 0.8)))
    out = ctx.results_dir / "p4-worker-profile.txt"
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(profiling.record, pid, seconds, out)
        time.sleep(0.5)  # py-spy attaches
        _load(ids)
        summary = future.result()
    if "profile" in summary and out.exists():
        summary["profile"] = str(out.relative_to(REPO_ROOT))
    return summary


def run(ctx: Context) -> list[Result]:
    reason = ctx.services.missing("postgres", "redis")
    if reason:
        why = f"needs PostgreSQL and Redis (a Celery worker host): {reason}"
        return [not_run(id=ID, name=NAME, unit=UNIT, target=TARGET, reason=why), p7_memory.skipped(why)]
    repeats = ctx.repeats(full=3, quick=1)
    concurrency = int(os.environ.get("BENCH_P4_CONCURRENCY", TURNS))
    owner = fixtures.user("bench-p4")
    fixtures.purge(owner)
    server = fixtures.demo_server()
    walls: list[float] = []
    ratios: list[float] = []
    peaks_tree: list[int] = []
    peaks_own: list[int] = []
    problems: list[str] = []
    statuses: Counter[str] = Counter()
    stored_all: list[dict[str, int]] = []
    server_pids: set[int] = set()
    cpu: list[float] = []
    seen: list[dict[str, int]] = []
    profile_summary: dict[str, Any] = {}
    with FakeModel(steps=CALLS, latency=LATENCY) as model:
        profile = fixtures.fake_profile(model.base_url)
        with CeleryWorker(concurrency=concurrency, name="bench-p4") as worker:
            warm = _queue(1, owner, profile, server)
            _load(warm)
            time.sleep(1)
            idle = rss_bytes(worker.pid) + sum(rss_bytes(p) for p in demo_server_pids(worker.pid))
            for index in range(repeats):
                ids = _queue(TURNS, owner, profile, server)
                cpu_before = cpu_seconds(worker.pid)
                model.stats()
                watch = Watch()
                with RssSampler(worker.pid) as sampler:
                    started, complete = _load(ids, watch)
                cpu.append(cpu_seconds(worker.pid) - cpu_before)
                seen.append(
                    {
                        "max_turns_running": watch.max_running,
                        "max_db_connections": watch.max_connections,
                        "max_model_requests_in_flight": model.stats()["max_in_flight"],
                    }
                )
                turns = Turn.objects.filter(pk__in=ids)
                statuses.update(turns.values_list("status", flat=True))
                last = turns.aggregate(m=Max("finished_at"))["m"]
                wall = (last - started).total_seconds() if complete and last else TIMEOUT
                if not complete:
                    problems.append(f"repeat {index + 1}: not all turns finished within {TIMEOUT:.0f} s")
                errors = Counter(turns.exclude(status=Turn.Status.DONE).values_list("error", flat=True))
                problems.extend(f"{n} turn(s): {error[:200]}" for error, n in errors.most_common(3))
                stored = _stored(ids)
                stored_all.append(stored)
                expected = sum(EXPECTED.values()) * TURNS
                ratios.append(sum(stored.get(key, 0) for key in EXPECTED) / expected)
                walls.append(wall / IDEAL_SECONDS)
                peaks_tree.append(max(sampler.tree, default=0))
                peaks_own.append(max(sampler.own, default=0))
                server_pids |= demo_server_pids(worker.pid)
                ctx.log(
                    f"P4 {index + 1}/{repeats}: {TURNS} turns in {wall:.2f} s ({wall / IDEAL_SECONDS:.2f}×), "
                    f"worker CPU {cpu[-1]:.1f} s, exchanges {ratios[-1]:.4f} of expected, "
                    f"peak RSS {peaks_tree[-1] / p7_memory.MB:.0f} MB"
                )
            if ctx.profile and walls and min(walls) > LIMIT:
                profile_summary = _profile(ctx, worker.pid, _queue(TURNS, owner, profile, server), min(walls))
    exact = all(ratio == 1.0 for ratio in ratios)
    result = judged(
        id=ID,
        name=NAME,
        unit=UNIT,
        target=TARGET,
        limit=LIMIT,
        samples=walls,
        details={
            "turns": TURNS,
            "model_calls_per_turn": CALLS,
            "model_latency_s": LATENCY,
            "worker": f"1 process, celery -P threads -c {concurrency}",
            "wall_seconds": [round(w * IDEAL_SECONDS, 2) for w in walls],
            "exchanges_stored_over_expected": ratios,
            "exchanges_by_label": stored_all,
            "expected_per_turn": EXPECTED,
            "turn_statuses": dict(statuses),
            "problems": problems[:10],
            "stdio_server_processes_in_worker": len(server_pids),
            "concurrency_seen": seen,
            "worker_cpu_seconds": [round(c, 1) for c in cpu],
            "worker_cpu_share_of_wall": [
                round(c / (w * IDEAL_SECONDS), 2) for c, w in zip(cpu, walls, strict=True)
            ],
            "worker_profile": profile_summary,
            "summary": f"exchanges stored ÷ expected: {', '.join(f'{r:.4f}' for r in ratios)}",
        },
    )
    if not exact:
        result.status = "fail"
    memory = p7_memory.result(
        peaks_tree=peaks_tree, peaks_own=peaks_own, idle_tree=idle, concurrency=concurrency
    )
    fixtures.purge(owner)
    return [result, memory]
