"""P4 concurrency (and P7 memory): 200 turns at once on one worker host.

The fake model sleeps 1 s per call and makes 3 calls per turn (2 ``calculate`` calls, then the
answer), so a perfect host finishes all 200 turns in 3 s. The host runs the worker as deployed:
one Celery worker process per core (env ``BENCH_P4_WORKERS``; each ``-P threads`` with its share
of the 200 threads, env ``BENCH_P4_CONCURRENCY`` for the total), each with its own pooled stdio
MCP server, against PostgreSQL and Redis. One interpreter runs Python on one core at a time, so a
single process cannot use the host; its result is reported beside the host's (``1 process``).
All 200 turns are queued, then dispatched in one go; the wall time runs from the first dispatch
to the last turn's ``finished_at``. Every turn must store exactly its exchanges: 3 model calls,
2 ``tools/call``, 1 ``tools/list``.

The floor is measured in the same run on the same host: the bare loop (``bench.bare_loop``), one
process per worker process, each running its share of the 200 turns at once on one MCP session,
against the same fake model. The target is judged on the product's ratio to 3 s, as defined; the
bare loop's ratio and the product's ratio to it are reported beside it.
"""

from __future__ import annotations

import functools
import os
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import Count, Max
from django.utils import timezone

from bench import fixtures, p7_memory, profiling
from bench.context import Context
from bench.environment import REPO_ROOT
from bench.fake_model import FakeModel
from bench.p1_step_overhead import BareLoop
from bench.processes import CeleryWorker, RssSampler, cpu_seconds, demo_server_pids, rss_bytes
from bench.stats import Result, judged, not_run, summary
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
FINISHED = [Turn.Status.DONE, Turn.Status.FAILED, Turn.Status.INTERRUPTED, Turn.Status.CANCELLED]
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


@dataclass
class _Load:
    """What the repeats of one host configuration measured."""

    walls: list[float] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    peaks_tree: list[int] = field(default_factory=list)
    peaks_own: list[int] = field(default_factory=list)
    seen: list[dict[str, int]] = field(default_factory=list)
    stored: list[dict[str, int]] = field(default_factory=list)
    statuses: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    server_pids: set[int] = field(default_factory=set)
    idle: int = 0
    profile: dict[str, Any] = field(default_factory=dict)


def _tree_rss(pids: list[int]) -> int:
    return sum(rss_bytes(pid) + sum(rss_bytes(p) for p in demo_server_pids(pid)) for pid in pids)


def _warm(workers: list[CeleryWorker], owner: Any, profile: Any, server: Any) -> None:
    """Turns until every worker process has run one (and so spawned its pooled stdio server)."""
    for _ in range(20 * len(workers)):
        if all(demo_server_pids(worker.pid) for worker in workers):
            return
        _load(_queue(len(workers), owner, profile, server))
    raise RuntimeError("not every worker process took a turn while warming up")


def _measure(
    ctx: Context,
    *,
    processes: int,
    total_threads: int,
    repeats: int,
    owner: Any,
    model: FakeModel,
    profile: Any,
    server: Any,
) -> _Load:
    """``repeats`` loads of 200 turns on ``processes`` worker processes sharing ``total_threads``."""
    measured = _Load()
    label = f"{processes} process{'es' if processes > 1 else ''}"
    with ExitStack() as stack:
        workers = [
            stack.enter_context(
                CeleryWorker(concurrency=max(1, total_threads // processes), name=f"bench-p4-{index}")
            )
            for index in range(processes)
        ]
        pids = [worker.pid for worker in workers]
        _warm(workers, owner, profile, server)
        time.sleep(1)
        measured.idle = _tree_rss(pids)
        for index in range(repeats):
            ids = _queue(TURNS, owner, profile, server)
            cpu_before = sum(cpu_seconds(pid) for pid in pids)
            model.stats()
            watch = Watch()
            with ExitStack() as sampling:
                samplers = [sampling.enter_context(RssSampler(pid)) for pid in pids]
                started, complete = _load(ids, watch)
            measured.cpu.append(sum(cpu_seconds(pid) for pid in pids) - cpu_before)
            measured.seen.append(
                {
                    "max_turns_running": watch.max_running,
                    "max_db_connections": watch.max_connections,
                    "max_model_requests_in_flight": model.stats()["max_in_flight"],
                }
            )
            turns = Turn.objects.filter(pk__in=ids)
            measured.statuses.update(turns.values_list("status", flat=True))
            last = turns.aggregate(m=Max("finished_at"))["m"]
            wall = (last - started).total_seconds() if complete and last else TIMEOUT
            if not complete:
                measured.problems.append(f"repeat {index + 1}: not all turns finished within {TIMEOUT:.0f} s")
            errors = Counter(turns.exclude(status=Turn.Status.DONE).values_list("error", flat=True))
            measured.problems.extend(f"{n} turn(s): {error[:200]}" for error, n in errors.most_common(3))
            stored = _stored(ids)
            measured.stored.append(stored)
            expected = sum(EXPECTED.values()) * TURNS
            measured.ratios.append(sum(stored.get(key, 0) for key in EXPECTED) / expected)
            measured.walls.append(wall / IDEAL_SECONDS)
            # The host's memory at each moment: every worker's tree, sampled together.
            measured.peaks_tree.append(
                max(map(sum, zip(*(sampler.tree for sampler in samplers), strict=False)), default=0)
            )
            measured.peaks_own.append(
                max(map(sum, zip(*(sampler.own for sampler in samplers), strict=False)), default=0)
            )
            for pid in pids:
                measured.server_pids |= demo_server_pids(pid)
            ctx.log(
                f"P4 {label} {index + 1}/{repeats}: {TURNS} turns in {wall:.2f} s ({wall / IDEAL_SECONDS:.2f}×), "
                f"worker CPU {measured.cpu[-1]:.1f} s, exchanges {measured.ratios[-1]:.4f} of expected, "
                f"peak RSS {measured.peaks_tree[-1] / p7_memory.MB:.0f} MB"
            )
        if ctx.profile and measured.walls and min(measured.walls) > LIMIT:
            measured.profile = _profile(
                ctx, pids[0], _queue(TURNS, owner, profile, server), min(measured.walls)
            )
    return measured


def _bare(processes: int, repeats: int, base_url: str) -> list[float]:
    """The bare loop on the same load: ``processes`` processes sharing the 200 turns, each running
    its share at once; wall ÷ 3 s per repeat (after one small warm-up load)."""
    shares = [TURNS // processes + (1 if index < TURNS % processes else 0) for index in range(processes)]
    loops: list[BareLoop] = []
    try:
        loops.extend(BareLoop(base_url) for _ in shares)
        walls: list[float] = []
        for index in range(repeats + 1):
            started = time.perf_counter()
            for loop, share in zip(loops, shares, strict=True):
                loop.start(share if index else 2)
            replies = [loop.finished() for loop in loops]
            wall = time.perf_counter() - started
            for reply, share in zip(replies, shares, strict=True):
                count = share if index else 2
                if reply["model_calls"] != CALLS * count or reply["tool_calls"] != (CALLS - 1) * count:
                    raise RuntimeError(f"the bare loop ran {reply}, not {count} turns of {CALLS} model calls")
            if index:
                walls.append(wall / IDEAL_SECONDS)
        return walls
    finally:
        for loop in loops:
            loop.close()


def run(ctx: Context) -> list[Result]:
    reason = ctx.services.missing("postgres", "redis")
    if reason:
        why = f"needs PostgreSQL and Redis (a Celery worker host): {reason}"
        return [not_run(id=ID, name=NAME, unit=UNIT, target=TARGET, reason=why), p7_memory.skipped(why)]
    repeats = ctx.repeats(full=3, quick=1)
    total_threads = int(os.environ.get("BENCH_P4_CONCURRENCY", TURNS))
    processes = int(os.environ.get("BENCH_P4_WORKERS", os.cpu_count() or 1))
    owner = fixtures.user("bench-p4")
    fixtures.purge(owner)
    server = fixtures.demo_server()
    with FakeModel(steps=CALLS, latency=LATENCY) as model:
        measure = functools.partial(
            _measure,
            ctx,
            total_threads=total_threads,
            repeats=repeats,
            owner=owner,
            model=model,
            profile=fixtures.fake_profile(model.base_url),
            server=server,
        )
        host = measure(processes=processes)
        single = measure(processes=1) if processes > 1 else host
        bare = _bare(processes, repeats, model.base_url)
        ctx.log(f"P4 bare loop, {processes} process(es): {', '.join(f'{b:.2f}×' for b in bare)}")
    exact = all(ratio == 1.0 for ratio in host.ratios + single.ratios)
    threads = max(1, total_threads // processes)
    result = judged(
        id=ID,
        name=NAME,
        unit=UNIT,
        target=TARGET,
        limit=LIMIT,
        samples=host.walls,
        details={
            "turns": TURNS,
            "model_calls_per_turn": CALLS,
            "model_latency_s": LATENCY,
            "worker": f"{processes} process(es) (one per core), celery -P threads -c {threads} each",
            "wall_seconds": [round(w * IDEAL_SECONDS, 2) for w in host.walls],
            "exchanges_stored_over_expected": host.ratios,
            "exchanges_by_label": host.stored,
            "expected_per_turn": EXPECTED,
            "turn_statuses": dict(host.statuses),
            "problems": host.problems[:10],
            "stdio_server_processes_on_host": len(host.server_pids),
            "concurrency_seen": host.seen,
            "worker_cpu_seconds": [round(c, 1) for c in host.cpu],
            "worker_cpu_share_of_wall": [
                round(c / (w * IDEAL_SECONDS), 2) for c, w in zip(host.cpu, host.walls, strict=True)
            ],
            "bare_loop": {
                "what": f"{processes} bare-loop process(es), each running its share of the {TURNS} turns at once",
                "ratio": summary(bare),
                "wall_seconds": [round(b * IDEAL_SECONDS, 2) for b in bare],
                "product_over_bare": round(summary(host.walls)["median"] / summary(bare)["median"], 2),
            },
            "single_process": {
                "worker": f"1 process, celery -P threads -c {total_threads}",
                "ratio": summary(single.walls),
                "wall_seconds": [round(w * IDEAL_SECONDS, 2) for w in single.walls],
                "exchanges_stored_over_expected": single.ratios,
                "worker_cpu_seconds": [round(c, 1) for c in single.cpu],
                "problems": single.problems[:10],
            },
            "worker_profile": host.profile,
            "summary": (
                f"{processes} worker process(es); bare loop on the same host: median "
                f"{summary(bare)['median']:.2f}× (the product {summary(host.walls)['median'] / summary(bare)['median']:.2f}× "
                f"of it); 1 process: median {summary(single.walls)['median']:.2f}×; "
                f"exchanges stored ÷ expected: {', '.join(f'{r:.4f}' for r in host.ratios)}"
            ),
        },
    )
    if not exact:
        result.status = "fail"
    memory = p7_memory.result(
        peaks_tree=host.peaks_tree,
        peaks_own=host.peaks_own,
        idle_tree=host.idle,
        concurrency=total_threads,
        processes=processes,
    )
    fixtures.purge(owner)
    return [result, memory]
