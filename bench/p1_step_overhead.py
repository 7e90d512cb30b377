"""P1 step overhead: a 20-step turn in the product ÷ the same 20 steps in the bare loop.

Both talk to the same fake model (20 model calls: 19 ask for ``calculate``, the last answers)
over HTTP on 127.0.0.1 and the same bundled stdio MCP server, each on a session it keeps open
across turns. The product turn is ``conversations.runner.turn_run`` — the code a Celery worker
runs — with full recording (steps, raw exchanges, spliced prompts, token counts) and publishing
to the configured channel layer. Bare and product turns alternate, so drift hits both.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from django.db import connection

from bench import fixtures, profiling
from bench.context import Context
from bench.fake_model import MODEL_NAME, REPO_ROOT, FakeModel
from bench.processes import cmdline, cpu_seconds, demo_server_pids
from bench.stats import Result, judged, summary
from conversations.models import Exchange, Step, Turn
from conversations.runner import turn_run

ID, NAME, UNIT, TARGET, LIMIT = "P1", "step overhead", "×", "≤ 1.10×", 1.10
STEPS = 20
# Simulated think time per model call (seconds); the target is defined at 0.
LATENCY = float(os.environ.get("BENCH_P1_LATENCY", "0"))
WARMUP = 2
QUESTION = "Work out the running totals with the calculator, one call at a time."


class BareLoop:
    """The bare loop's process: ``turn()`` runs one turn there and returns its wall time;
    ``start(count)`` then ``finished()`` run ``count`` turns at once (P4's floor)."""

    def __init__(self, base_url: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.bare_loop", base_url, MODEL_NAME],
            cwd=REPO_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._read()

    def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("the bare loop exited")
        return dict(json.loads(line))

    def _send(self, command: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()

    def turn(self, cpu: CpuSplit | None = None) -> float:
        before = cpu.reading("bare", self.process.pid) if cpu is not None else {}
        self._send("turn")
        reply = self._read()
        if cpu is not None:
            cpu.add("bare", before, cpu.reading("bare", self.process.pid))
        if reply["model_calls"] != STEPS or reply["tool_calls"] != STEPS - 1:
            raise RuntimeError(f"the bare loop ran {reply}, not {STEPS} model calls")
        return float(reply["seconds"])

    def start(self, count: int) -> None:
        self._send(f"concurrent {count}")

    def finished(self) -> dict[str, Any]:
        """The reply to ``start``: ``seconds``, ``turns``, ``model_calls``, ``tool_calls``."""
        return self._read()

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()


class CpuSplit:
    """CPU time per step, by process, of each side's turns: the loop's own process, its stdio
    server, the fake model and (the product's side) the database's server processes for the
    bench database. On two cores the loops are CPU-bound: where the CPU goes is the profile."""

    def __init__(self, model_pid: int) -> None:
        self.model_pid = model_pid
        self.samples: dict[str, dict[str, list[float]]] = {"bare": {}, "product": {}}

    def reading(self, side: str, loop_pid: int) -> dict[str, float]:
        parts = {
            "loop process": cpu_seconds(loop_pid),
            "stdio server": sum(cpu_seconds(pid) for pid in demo_server_pids(loop_pid)),
            "fake model": cpu_seconds(self.model_pid),
        }
        if side == "product" and connection.vendor == "postgresql":
            database = str(connection.settings_dict["NAME"])
            parts["postgres"] = sum(
                cpu_seconds(pid) for pid in _postgres_backends() if f" {database} " in cmdline(pid)
            )
        return parts

    def add(self, side: str, before: dict[str, float], after: dict[str, float]) -> None:
        for name, value in after.items():
            self.samples[side].setdefault(name, []).append((value - before[name]) * 1000 / STEPS)

    def details(self) -> dict[str, dict[str, float]]:
        """Median ms of CPU per step, by side and process, with each side's total."""
        split: dict[str, dict[str, float]] = {}
        for side, parts in self.samples.items():
            medians = {name: round(summary(values)["median"], 2) for name, values in parts.items()}
            split[side] = {**medians, "total": round(sum(medians.values()), 2)}
        return split


def _postgres_backends() -> list[int]:
    return [
        int(p.name)
        for p in Path("/proc").iterdir()
        if p.name.isdigit() and cmdline(int(p.name)).startswith("postgres: ")
    ]


def _product_turn(owner: Any, profile: Any, server: Any, cpu: CpuSplit | None = None) -> float:
    """One product turn, checked to be the same work as a bare turn; returns its wall time."""
    _, turn = fixtures.queued_turn(owner=owner, profile=profile, server=server, question=QUESTION)
    before = cpu.reading("product", os.getpid()) if cpu is not None else {}
    started = time.perf_counter()
    turn_run(turn_id=turn.pk)
    seconds = time.perf_counter() - started
    if cpu is not None:
        cpu.add("product", before, cpu.reading("product", os.getpid()))
    turn.refresh_from_db()
    decisions = Step.objects.filter(turn=turn, kind__in=[Step.Kind.DECIDE, Step.Kind.ANSWER]).count()
    tools = Step.objects.filter(turn=turn, kind=Step.Kind.TOOL).count()
    if turn.status != Turn.Status.DONE or decisions != STEPS or tools != STEPS - 1:
        raise RuntimeError(
            f"the product turn ended {turn.status} ({turn.error}) after {decisions} decisions, {tools} tool calls"
        )
    return seconds


def _profile(ctx: Context, owner: Any, profile: Any, server: Any, ms_per_step: float) -> dict[str, Any]:
    """One more product turn under pyinstrument; the text report is kept beside the results."""
    try:
        from pyinstrument import Profiler
    except ImportError:
        return {"profile": "not taken: pyinstrument is not installed (pip install -e '.[bench]')"}
    _, turn = fixtures.queued_turn(owner=owner, profile=profile, server=server, question=QUESTION)
    profiler = Profiler(interval=0.0005)
    profiler.start()
    turn_run(turn_id=turn.pk)
    profiler.stop()
    path = ctx.results_dir / "p1-profile.txt"
    path.write_text(profiler.output_text(unicode=True, color=False, show_all=False))
    (ctx.results_dir / "p1-profile.html").write_text(profiler.output_html())
    areas = profiling.areas_of_tree(profiler.last_session.root_frame())
    total = sum(areas.values()) or 1.0
    return {
        "profile": str(path.relative_to(REPO_ROOT)),
        "profile_by_area_pct": {name: round(100 * t / total, 1) for name, t in areas.items()},
        # The profiled turn runs slower; its shares are applied to the unprofiled ms per step.
        "profile_by_area_ms_per_step": {name: round(ms_per_step * t / total, 1) for name, t in areas.items()},
    }


def run(ctx: Context) -> list[Result]:
    repeats = ctx.repeats(full=15, quick=5)
    owner = fixtures.user("bench-p1")
    fixtures.purge(owner)
    server = fixtures.demo_server()
    bare_times: list[float] = []
    product_times: list[float] = []
    with FakeModel(steps=STEPS, latency=LATENCY) as model:
        profile = fixtures.fake_profile(model.base_url)
        bare = BareLoop(model.base_url)
        assert model.process is not None
        cpu = CpuSplit(model.process.pid)
        try:
            for _ in range(WARMUP):
                bare.turn()
                _product_turn(owner, profile, server)
            for index in range(repeats):
                if index % 2:
                    product_times.append(_product_turn(owner, profile, server, cpu))
                    bare_times.append(bare.turn(cpu))
                else:
                    bare_times.append(bare.turn(cpu))
                    product_times.append(_product_turn(owner, profile, server, cpu))
                ctx.log(
                    f"P1 {index + 1}/{repeats}: bare {bare_times[-1] * 1000 / STEPS:.1f} ms/step, "
                    f"product {product_times[-1] * 1000 / STEPS:.1f} ms/step"
                )
        finally:
            bare.close()
        ratios = [p / b for p, b in zip(product_times, bare_times, strict=True)]
        exchanges = Exchange.objects.filter(turn__conversation__owner_id=owner.pk)
        details: dict[str, Any] = {
            "steps_per_turn": STEPS,
            "model_latency_s": LATENCY,
            "tool_calls_per_turn": STEPS - 1,
            "bare_ms_per_step": summary([t * 1000 / STEPS for t in bare_times]),
            "product_ms_per_step": summary([t * 1000 / STEPS for t in product_times]),
            "overhead_ms_per_step": summary(
                [(p - b) * 1000 / STEPS for p, b in zip(product_times, bare_times, strict=True)]
            ),
            "exchanges_recorded_per_turn": exchanges.count() / (repeats + WARMUP),
            "cpu_ms_per_step": cpu.details(),
            "database": "postgresql" if ctx.services.postgres else "sqlite",
            "publishing": "channels-redis"
            if ctx.services.redis
            else "in-memory layer (no consumer in this process: sends are skipped)",
        }
        split = details["cpu_ms_per_step"]
        details["summary"] = (
            f"bare {details['bare_ms_per_step']['median']:.1f} ms/step, "
            f"product {details['product_ms_per_step']['median']:.1f} ms/step; CPU per step: "
            f"bare {split['bare']['total']:.1f} ms ({split['bare']['loop process']:.1f} in its process), "
            f"product {split['product']['total']:.1f} ms ({split['product']['loop process']:.1f} in its process"
            + (
                f", {split['product']['postgres']:.1f} in PostgreSQL"
                if "postgres" in split["product"]
                else ""
            )
            + ")"
        )
        result = judged(
            id=ID, name=NAME, unit=UNIT, target=TARGET, limit=LIMIT, samples=ratios, details=details
        )
        if ctx.profile and (result.status == "fail" or not ctx.quick):
            product_ms = float(details["product_ms_per_step"]["median"])
            result.details.update(_profile(ctx, owner, profile, server, product_ms))
    fixtures.purge(owner)
    return [result]
