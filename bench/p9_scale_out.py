"""P9 scale-out: P4's load at 2, 4 and 8 worker processes on this host, and 1,000 turns at once.

The same load as P4 (``bench.host_load``: the fake model sleeps 1 s per call, 3 calls per turn,
so a perfect host finishes any number of turns in 3 s; every turn must store its exchanges),
run at each configuration of ``configurations()``: 200 turns on 2, 4 and 8 worker processes,
then 1,000 turns on 2 (one per core here) and on 8. Each worker process gets ``threads ÷ processes`` of as many threads as
there are turns, and a database pool of at most ``POOL_CONNECTIONS ÷ processes`` connections (the
host's worker processes share Postgres's ``max_connections`` with everything else on it).

Per configuration: the wall time ÷ the ideal 3 s, the worker processes' CPU seconds per turn,
the exchanges stored ÷ expected, and the bare loop on the same load (one bare-loop process per
worker process) at 200 turns, where it is cheap beside the product (at 1,000 turns it takes about
a minute per configuration on two cores: ``BENCH_P9_BARE_ALL=1`` runs it there too). Where a host stops scaling shows as a wall that no
longer falls (or rises) as processes are added: past one process per core the processes only
share the same cores, and each adds its own Celery loop, connections and stdio server.

Reported, not judged: the status is a pass when every configuration stored every exchange.
One repeat per configuration (``--repeat`` for more), and no 1,000-turn load on 4 processes: on
two loaded cores each 1,000-turn configuration takes 2–5 minutes (starting and warming up the
worker processes included), and the measure is kept near ten minutes.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from bench import fixtures, host_load
from bench.context import Context
from bench.fake_model import FakeModel
from bench.host_load import CALLS, Host
from bench.stats import Result, not_run, summary

ID, NAME, UNIT, TARGET = (
    "P9",
    "scale-out",
    "×",
    "reported: wall ÷ 3 s at 2, 4, 8 worker processes × 200, 1,000 turns; every exchange stored",
)
LATENCY = float(os.environ.get("BENCH_P9_LATENCY", "1.0"))
PROCESSES = (2, 4, 8)
TURNS = (200, 1000)
# The process counts the larger load runs on: as deployed (one per core here) and the most.
PROCESSES_AT_MOST_TURNS = (2, 8)
BARE_ALL = os.environ.get("BENCH_P9_BARE_ALL") == "1"
# The worker processes' database pools together, at most (Postgres allows 100 by default).
POOL_CONNECTIONS = 64


@dataclass(frozen=True)
class Configuration:
    processes: int
    turns: int

    @property
    def pool(self) -> int:
        """Each worker process's database pool: at most 20 (the default), the host's share below."""
        return max(2, min(20, POOL_CONNECTIONS // self.processes))

    @property
    def timeout(self) -> float:
        """How long a load may take before it counts as unfinished: generous, as it grows with
        the turns on a small host."""
        return max(120.0, 0.2 * self.turns)


def configurations(quick: bool = False) -> list[Configuration]:
    """The configurations in the order they run: every process count at 200 turns, then 2 and 8
    processes at 1,000 (quick: 2 and 4 processes, 200 turns)."""
    small = [Configuration(processes, TURNS[0]) for processes in PROCESSES]
    if quick:
        return small[:2]
    return [*small, *(Configuration(processes, TURNS[1]) for processes in PROCESSES_AT_MOST_TURNS)]


@dataclass
class Row:
    """What one configuration measured (medians over its repeats)."""

    configuration: Configuration
    wall_s: float
    ideal_ratio: float
    cpu_per_turn_s: float
    stored_ratio: float
    bare_ratio: float | None
    problems: list[str]
    start_s: float = 0.0

    def as_json(self) -> dict[str, object]:
        return {
            "workers": self.configuration.processes,
            "turns": self.configuration.turns,
            "wall_s": round(self.wall_s, 2),
            "wall_over_ideal": round(self.ideal_ratio, 2),
            "worker_cpu_s_per_turn": round(self.cpu_per_turn_s, 4),
            "exchanges_stored_over_expected": self.stored_ratio,
            "bare_wall_over_ideal": None if self.bare_ratio is None else round(self.bare_ratio, 2),
            "product_over_bare": None
            if not self.bare_ratio
            else round(self.ideal_ratio / self.bare_ratio, 2),
            "pool_per_worker": self.configuration.pool,
            "start_and_warm_s": round(self.start_s, 1),
            "problems": self.problems[:5],
        }


def scaling_stops(rows: list[Row], gain: float = 0.95) -> dict[int, int]:
    """Per turn count, the most processes that still paid: the count after which adding processes
    no longer cut the wall time to ``gain`` of what it was (or below)."""
    best: dict[int, int] = {}
    for turns in dict.fromkeys(row.configuration.turns for row in rows):
        ordered = sorted(
            (row for row in rows if row.configuration.turns == turns),
            key=lambda row: row.configuration.processes,
        )
        stop = ordered[0].configuration.processes
        for before, after in zip(ordered, ordered[1:], strict=False):
            if after.wall_s > gain * before.wall_s:
                break
            stop = after.configuration.processes
        best[turns] = stop
    return best


def _row(configuration: Configuration, load: host_load.HostLoad, bare: list[float]) -> Row:
    ideal = CALLS * LATENCY
    walls = float(summary(load.walls)["median"])
    return Row(
        configuration=configuration,
        wall_s=walls * ideal,
        ideal_ratio=walls,
        cpu_per_turn_s=float(summary(load.cpu)["median"]) / configuration.turns,
        stored_ratio=min(load.ratios),
        bare_ratio=float(summary(bare)["median"]) if bare else None,
        problems=load.problems,
        start_s=load.start_s,
    )


def run(ctx: Context) -> list[Result]:
    reason = ctx.services.missing("postgres", "redis")
    if reason:
        why = f"needs PostgreSQL and Redis (a Celery worker host): {reason}"
        return [not_run(id=ID, name=NAME, unit=UNIT, target=TARGET, reason=why)]
    repeats = ctx.repeats(full=1, quick=1)
    owner = fixtures.user("bench-p9")
    fixtures.purge(owner)
    server = fixtures.demo_server()
    rows: list[Row] = []
    with FakeModel(steps=CALLS, latency=LATENCY) as model:
        profile = fixtures.fake_profile(model.base_url)
        for configuration in configurations(ctx.quick):
            host = Host(
                processes=configuration.processes,
                total_threads=configuration.turns,
                turns=configuration.turns,
                latency=LATENCY,
                timeout=configuration.timeout,
                tag="P9",
                env={"DATABASE_POOL_MAX_SIZE": str(configuration.pool)},
            )
            started = time.monotonic()
            load = host_load.measure(
                ctx, host, repeats=repeats, owner=owner, model=model, profile=profile, server=server
            )
            cheap = BARE_ALL or configuration.turns == TURNS[0]
            bare = host_load.bare(host, repeats, model.base_url) if cheap else []
            rows.append(_row(configuration, load, bare))
            ctx.log(
                f"P9 {configuration.processes} workers × {configuration.turns} turns: "
                f"{rows[-1].ideal_ratio:.2f}× of 3 s, {rows[-1].cpu_per_turn_s * 1000:.0f} ms worker CPU "
                f"per turn, bare {f'{rows[-1].bare_ratio:.2f}×' if rows[-1].bare_ratio else 'not run'} "
                f"(warm-up {load.warm_rounds} round(s); "
                f"{time.monotonic() - started:.0f} s in all)"
            )
            fixtures.purge(owner)
    stops = scaling_stops(rows)
    complete = all(row.stored_ratio == 1.0 for row in rows)
    table = "; ".join(
        f"{row.configuration.processes}w×{row.configuration.turns}: {row.wall_s:.1f} s "
        f"({row.ideal_ratio:.2f}×{f', bare {row.bare_ratio:.2f}×' if row.bare_ratio else ''}), "
        f"{row.cpu_per_turn_s * 1000:.0f} ms CPU/turn"
        for row in rows
    )
    cores = os.cpu_count() or 1
    most = max(row.configuration.processes for row in rows)
    where = ", ".join(
        f"{turns} turns: {stop} processes" if stop < most else f"{turns} turns: still paying at {most}"
        for turns, stop in stops.items()
    )
    return [
        Result(
            id=ID,
            name=NAME,
            unit=UNIT,
            target=TARGET,
            status="pass" if complete else "fail",
            value=max(row.ideal_ratio for row in rows),
            statistic="worst",
            samples=[row.ideal_ratio for row in rows],
            spread={},
            reason="" if complete else "some configuration did not store every exchange",
            details={
                "configurations": [row.as_json() for row in rows],
                "repeats_per_configuration": repeats,
                "cores": cores,
                "model_latency_s": LATENCY,
                "scaling_stops_after": stops,
                "summary": (
                    f"{table}. Adding processes stops paying (wall within 5%) after {where}, on {cores} cores"
                ),
            },
        )
    ]
