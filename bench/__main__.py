"""``python -m bench [--quick] [--only P1,P3] [--repeat N]``: run the measures, write the report.

The environment is prepared before Django is imported (the settings read it once): the bench's
own Postgres database and Redis index when they answer, else the embedded default.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
import traceback
from collections.abc import Callable

from bench import environment

# id → (module, the ids it reports). P7 is measured during P4's load, so they run together.
MEASURES: dict[str, tuple[str, tuple[str, ...]]] = {
    "P1": ("bench.p1_step_overhead", ("P1",)),
    "P2": ("bench.p2_first_step", ("P2", "P2f")),
    "P3": ("bench.p3_pooling", ("P3",)),
    "P4": ("bench.p4_concurrency", ("P4", "P7")),
    "P5": ("bench.p5_audit_scale", ("P5",)),
    "P6": ("bench.p6_big_conversation", ("P6",)),
    "P8": ("bench.p8_recording", ("P8",)),
    "P9": ("bench.p9_scale_out", ("P9",)),
    "P10": ("bench.p10_big_payload", ("P10",)),
    "P11": ("bench.p11_streaming", ("P11",)),
    "P12": ("bench.p12_class", ("P12",)),
    "P13": ("bench.p13_proxies", ("P13.llm", "P13.streams", "P13.mcp")),
    "P14": ("bench.p14_huge_turn", ("P14",)),
}
ALIASES = {"P7": "P4"}
QUICK = ("P1", "P3")
KNOWN = f"P1-P{max(int(key[1:]) for key in [*MEASURES, *ALIASES])}"


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=f"Performance benchmarks ({KNOWN}).")
    parser.add_argument("--quick", action="store_true", help="P1 and P3 only, fewer repeats (< 2 minutes)")
    parser.add_argument("--only", default="", help="comma-separated measure ids, e.g. P1,P3")
    parser.add_argument("--repeat", type=int, default=None, help="repeats per measure (overrides the mode)")
    parser.add_argument("--strict", action="store_true", help="exit 2 when a target is missed")
    parser.add_argument("--no-profile", action="store_true", help="skip the profiles taken on misses")
    return parser.parse_args(argv)


def _selected(args: argparse.Namespace) -> list[str]:
    if args.only:
        wanted = [ALIASES.get(item.strip().upper(), item.strip().upper()) for item in args.only.split(",")]
        unknown = [item for item in wanted if item not in MEASURES]
        if unknown:
            sys.exit(f"unknown measure(s): {', '.join(unknown)}; known: {KNOWN}")
        return list(dict.fromkeys(wanted))
    return list(QUICK if args.quick else MEASURES)


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    selected = _selected(args)
    started = time.monotonic()
    services = environment.prepare()
    environment.migrate()
    environment.flush_redis(services)

    import django

    django.setup()
    from bench import report
    from bench.context import Context
    from bench.stats import Result

    ctx = Context(services=services, quick=args.quick, repeat=args.repeat, profile=not args.no_profile)
    ctx.results_dir.mkdir(parents=True, exist_ok=True)
    print(report.environment_line(services), flush=True)
    if services.postgres:
        # The database as a serving one is kept: its planner statistics current (a server with
        # autovacuum off, as this one may be, would plan the measures' reads on stale ones).
        from bench import audit_data

        audit_data.vacuum()
    results: list[Result] = []
    for key in selected:
        module_name, ids = MEASURES[key]
        print(f"{'/'.join(ids)} …", flush=True)
        t0 = time.monotonic()
        load_before = os.getloadavg()[0]
        try:
            run: Callable[[Context], list[Result]] = importlib.import_module(module_name).run
            produced = run(ctx)
        except Exception as exc:  # noqa: BLE001 — one broken measure must not hide the others
            traceback.print_exc()
            produced = [
                Result(
                    id=i, name="", unit="", target="", status="error", reason=f"{type(exc).__name__}: {exc}"
                )
                for i in ids
            ]
        for result in produced:
            result.details.setdefault("measure_seconds", round(time.monotonic() - t0, 1))
            # Other processes on the machine skew timings: say how busy it was.
            result.details.setdefault(
                "load_average_1min", [round(load_before, 2), round(os.getloadavg()[0], 2)]
            )
            print(report.line(result), flush=True)
        results.extend(produced)
    elapsed = time.monotonic() - started
    written = report.write(
        results, services=services, quick=args.quick, elapsed=elapsed, argv=argv or sys.argv[1:]
    )
    print()
    print(report.markdown_table(results))
    print(f"\n{len(results)} measure(s) in {elapsed:.0f} s; wrote {', '.join(str(p) for p in written)}")
    missed = [r.id for r in results if r.status == "fail"]
    if args.strict and missed:
        return 2
    return 0 if all(r.status in {"pass", "fail", "not run"} for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
