"""A load of concurrent turns on a worker host: what P4 (concurrency) and P9 (scale-out) share.

The fake model sleeps ``latency`` s per call and makes ``CALLS`` calls per turn (2 ``calculate``
calls, then the answer), so a perfect host finishes any number of turns in ``CALLS × latency``.
The host runs the worker as deployed: Celery worker processes (``celery -P threads``) sharing the
threads, each with its own pooled stdio MCP server, against PostgreSQL and Redis. All the turns
are queued, then dispatched in one go; the wall time runs from the first dispatch to the last
turn's ``finished_at``. Every turn must store exactly its exchanges (``EXPECTED``).

The floor on the same load is the bare loop (``bench.bare_loop``): one process per worker
process, each running its share of the turns at once on one MCP session.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import Count, Max
from django.utils import timezone

from bench import fixtures, profiling
from bench.context import Context
from bench.environment import REPO_ROOT
from bench.fake_model import FakeModel
from bench.p1_step_overhead import BareLoop
from bench.processes import CeleryWorker, RssSampler, cpu_seconds, demo_server_pids, rss_bytes
from conversations.execution import turn_dispatch
from conversations.models import Exchange, Turn

CALLS = 3
FINISHED = [Turn.Status.DONE, Turn.Status.FAILED, Turn.Status.INTERRUPTED, Turn.Status.CANCELLED]
EXPECTED = {"llm": CALLS, "tools/call": CALLS - 1, "tools/list": 1}
QUESTION = "Work out the running totals with the calculator, one call at a time."
MB = 1024 * 1024
WARM_TURNS_PER_PROCESS = 3


def queue(count: int, owner: Any, profile: Any, server: Any) -> list[int]:
    """``count`` queued (not dispatched) turns, each the first of a new conversation."""
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
        return any(n for status, n in counts.items() if status not in FINISHED)


def load(ids: list[int], timeout: float, watch: Watch | None = None) -> tuple[datetime, bool]:
    """Dispatch every turn at once; returns when the first went out and whether all finished."""
    watch = watch or Watch()
    started = timezone.now()
    for turn_id in ids:
        turn_dispatch(turn_id)
    deadline = time.monotonic() + timeout
    while watch.look(ids):
        if time.monotonic() > deadline:
            return started, False
        time.sleep(0.1)
    return started, True


def stored(ids: list[int]) -> dict[str, int]:
    """The exchanges the turns stored, by label (``llm`` for every model call)."""
    counts: Counter[str] = Counter()
    for row in Exchange.objects.filter(turn_id__in=ids).values("channel", "label").annotate(n=Count("id")):
        key = "llm" if row["channel"] == Exchange.Channel.LLM else row["label"]
        counts[key] += row["n"]
    return dict(counts)


@dataclass
class HostLoad:
    """What the repeats of one host configuration measured (walls ÷ the ideal time)."""

    walls: list[float] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    peaks_tree: list[int] = field(default_factory=list)
    peaks_own: list[int] = field(default_factory=list)
    peaks_tree_pss: list[int] = field(default_factory=list)
    peaks_tree_at_pss: list[int] = field(default_factory=list)
    seen: list[dict[str, int]] = field(default_factory=list)
    stored: list[dict[str, int]] = field(default_factory=list)
    statuses: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    server_pids: set[int] = field(default_factory=set)
    idle: int = 0
    profile: dict[str, Any] = field(default_factory=dict)
    # Starting the worker processes and warming them up (unmeasured): seconds, warm-up rounds.
    start_s: float = 0.0
    warm_rounds: int = 0


@dataclass
class Host:
    """One configuration of the worker host and its load."""

    processes: int
    total_threads: int
    turns: int
    latency: float
    timeout: float
    # Names the worker processes and the log lines.
    tag: str = "P4"
    # Extra environment of the worker processes (the database pool's size, say).
    env: dict[str, str] = field(default_factory=dict)

    @property
    def ideal_seconds(self) -> float:
        return CALLS * self.latency

    @property
    def label(self) -> str:
        return f"{self.processes} process{'es' if self.processes > 1 else ''}"


def tree_rss(pids: list[int]) -> int:
    """Resident memory of these processes and their stdio servers."""
    return sum(rss_bytes(pid) + sum(rss_bytes(p) for p in demo_server_pids(pid)) for pid in pids)


def _warm(host: Host, workers: list[CeleryWorker], owner: Any, profile: Any, server: Any) -> int:
    """Turns until every worker process has run one (and so spawned its pooled stdio server);
    returns the rounds it took. Each round offers a few turns per process, so a round seldom
    leaves one out (which process takes a turn is the broker's choice)."""
    for rounds in range(1, 20 * len(workers) + 1):
        load(queue(WARM_TURNS_PER_PROCESS * len(workers), owner, profile, server), host.timeout)
        if all(demo_server_pids(worker.pid) for worker in workers):
            return rounds
    raise RuntimeError("not every worker process took a turn while warming up")


def _profile(
    host: Host, out_name: str, ctx: Context, pid: int, ids: list[int], ratio: float
) -> dict[str, Any]:
    """One more (unmeasured) load with py-spy sampling one worker for most of it."""
    seconds = max(3, min(30, int(ratio * host.ideal_seconds * 0.8)))
    out = ctx.results_dir / out_name
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(profiling.record, pid, seconds, out)
        time.sleep(0.5)  # py-spy attaches
        load(ids, host.timeout)
        summary = future.result()
    if "profile" in summary and out.exists():
        summary["profile"] = str(out.relative_to(REPO_ROOT))
    return summary


def measure(
    ctx: Context,
    host: Host,
    *,
    repeats: int,
    owner: Any,
    model: FakeModel,
    profile: Any,
    server: Any,
    profile_when: Callable[[HostLoad], str | None] | None = None,
) -> HostLoad:
    """``repeats`` loads of ``host.turns`` turns on ``host.processes`` worker processes sharing
    ``host.total_threads`` threads. ``profile_when`` names the profile file to take one more
    (unmeasured) load's worker profile into, given what was measured (None: no profile)."""
    measured = HostLoad()
    starting = time.monotonic()
    with ExitStack() as stack:
        workers = [
            stack.enter_context(
                CeleryWorker(
                    concurrency=max(1, host.total_threads // host.processes),
                    name=f"bench-{host.tag.lower()}-{index}",
                    env=host.env,
                )
            )
            for index in range(host.processes)
        ]
        pids = [worker.pid for worker in workers]
        measured.warm_rounds = _warm(host, workers, owner, profile, server)
        measured.start_s = time.monotonic() - starting
        time.sleep(1)
        measured.idle = tree_rss(pids)
        for index in range(repeats):
            ids = queue(host.turns, owner, profile, server)
            cpu_before = sum(cpu_seconds(pid) for pid in pids)
            model.stats()
            watch = Watch()
            with ExitStack() as sampling:
                samplers = [sampling.enter_context(RssSampler(pid)) for pid in pids]
                started, complete = load(ids, host.timeout, watch)
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
            wall = (last - started).total_seconds() if complete and last else host.timeout
            if not complete:
                measured.problems.append(
                    f"repeat {index + 1}: not all turns finished within {host.timeout:.0f} s"
                )
            errors = Counter(turns.exclude(status=Turn.Status.DONE).values_list("error", flat=True))
            measured.problems.extend(f"{n} turn(s): {error[:200]}" for error, n in errors.most_common(3))
            counts = stored(ids)
            measured.stored.append(counts)
            expected = sum(EXPECTED.values()) * host.turns
            measured.ratios.append(sum(counts.get(key, 0) for key in EXPECTED) / expected)
            measured.walls.append(wall / host.ideal_seconds)
            # The host's memory at each moment: every worker's tree, sampled together.
            measured.peaks_tree.append(
                max(map(sum, zip(*(sampler.tree for sampler in samplers), strict=False)), default=0)
            )
            measured.peaks_own.append(
                max(map(sum, zip(*(sampler.own for sampler in samplers), strict=False)), default=0)
            )
            measured.peaks_tree_pss.append(
                max(map(sum, zip(*(sampler.tree_pss for sampler in samplers), strict=False)), default=0)
            )
            measured.peaks_tree_at_pss.append(
                max(map(sum, zip(*(sampler.tree_at_pss for sampler in samplers), strict=False)), default=0)
            )
            for pid in pids:
                measured.server_pids |= demo_server_pids(pid)
            ctx.log(
                f"{host.tag} {host.label} {index + 1}/{repeats}: {host.turns} turns in {wall:.2f} s "
                f"({wall / host.ideal_seconds:.2f}×), worker CPU {measured.cpu[-1]:.1f} s, "
                f"exchanges {measured.ratios[-1]:.4f} of expected, "
                f"peak RSS {measured.peaks_tree[-1] / MB:.0f} MB"
            )
        out_name = profile_when(measured) if profile_when is not None and measured.walls else None
        if out_name:
            measured.profile = _profile(
                host,
                out_name,
                ctx,
                pids[0],
                queue(host.turns, owner, profile, server),
                min(measured.walls),
            )
    return measured


def shares(turns: int, processes: int) -> list[int]:
    """``turns`` split as evenly as they go over ``processes``."""
    return [turns // processes + (1 if index < turns % processes else 0) for index in range(processes)]


def bare(host: Host, repeats: int, base_url: str) -> list[float]:
    """The bare loop on the same load: ``host.processes`` processes sharing the turns, each
    running its share at once; wall ÷ the ideal time per repeat (after one small warm-up load)."""
    split = shares(host.turns, host.processes)
    loops: list[BareLoop] = []
    try:
        loops.extend(BareLoop(base_url) for _ in split)
        walls: list[float] = []
        for index in range(repeats + 1):
            started = time.perf_counter()
            for loop, share in zip(loops, split, strict=True):
                loop.start(share if index else 2)
            replies = [loop.finished() for loop in loops]
            wall = time.perf_counter() - started
            for reply, share in zip(replies, split, strict=True):
                count = share if index else 2
                if reply["model_calls"] != CALLS * count or reply["tool_calls"] != (CALLS - 1) * count:
                    raise RuntimeError(f"the bare loop ran {reply}, not {count} turns of {CALLS} model calls")
            if index:
                walls.append(wall / host.ideal_seconds)
        return walls
    finally:
        for loop in loops:
            loop.close()
