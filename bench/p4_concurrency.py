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

from bench import fixtures, host_load, p7_memory
from bench.context import Context
from bench.fake_model import FakeModel
from bench.host_load import CALLS, EXPECTED, Host, HostLoad
from bench.stats import Result, also_within, judged, not_run, summary

ID, NAME, UNIT, TARGET, LIMIT = (
    "P4",
    "concurrency",
    "×",
    "≤ 1.5× of 3 s, ≤ 1.15× of the bare loop; exchanges stored ÷ expected = 1.0",
    1.5,
)
# The second condition: the product's median wall ÷ the bare loop's on the same load and host.
BARE_LIMIT = 1.15
TURNS = 200
LATENCY = float(os.environ.get("BENCH_P4_LATENCY", "1.0"))
IDEAL_SECONDS = CALLS * LATENCY
TIMEOUT = 120.0


def _profile_on_miss(measured: HostLoad) -> str | None:
    """A worker profile when even the best repeat missed the target."""
    return "p4-worker-profile.txt" if min(measured.walls) > LIMIT else None


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
            host_load.measure,
            ctx,
            repeats=repeats,
            owner=owner,
            model=model,
            profile=fixtures.fake_profile(model.base_url),
            server=server,
            profile_when=_profile_on_miss,
        )
        configuration = functools.partial(
            Host, total_threads=total_threads, turns=TURNS, latency=LATENCY, timeout=TIMEOUT
        )
        host = measure(configuration(processes=processes))
        single = measure(configuration(processes=1)) if processes > 1 else host
        bare = host_load.bare(configuration(processes=processes), repeats, model.base_url)
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
    also_within(
        result,
        what="÷ bare loop",
        value=summary(host.walls)["median"] / summary(bare)["median"],
        limit=BARE_LIMIT,
    )
    memory = p7_memory.result(
        peaks_tree=host.peaks_tree,
        peaks_own=host.peaks_own,
        peaks_tree_pss=host.peaks_tree_pss,
        peaks_tree_at_pss=host.peaks_tree_at_pss,
        idle_tree=host.idle,
        concurrency=total_threads,
        processes=processes,
    )
    fixtures.purge(owner)
    return [result, memory]
