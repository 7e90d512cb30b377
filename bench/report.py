"""The report: ``bench/results/latest.json`` (everything) and ``latest.md`` (the table).

A full run writes ``latest.*``; ``--quick`` writes ``quick.*`` (so it never replaces the full
numbers); ``--only`` updates its measures inside ``latest.*`` and leaves the others as they were
(each result says when, and at which commit, it was measured). A full or ``--only`` run also
rewrites the latest table in ``docs/performance.md``, between its two marker comments.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.context import RESULTS_DIR
from bench.environment import REPO_ROOT, Services
from bench.stats import Result

PERFORMANCE_DOC = REPO_ROOT / "docs" / "performance.md"
# The table docs/performance.md shows lies between these two lines; the rest is prose.
TABLE_BEGIN = "<!-- bench:latest:begin (written by `make bench`: bench/report.py) -->"
TABLE_END = "<!-- bench:latest:end -->"
ORDER = [
    "P1",
    "P2",
    "P2f",
    "P3",
    "P4",
    "P5",
    "P6",
    "P7",
    "P8",
    "P9",
    "P10",
    "P11",
    "P12",
    "P13.llm",
    "P13.streams",
    "P13.mcp",
    "P14",
]
LIBRARIES = ("django", "channels", "channels-redis", "celery", "daphne", "openai", "mcp", "psycopg")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def _git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def machine(services: Services) -> dict[str, Any]:
    """Where the numbers came from."""
    versions = {}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "postgres": services.postgres_version or None,
        "redis": services.redis_version or None,
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": bool(_git("status", "--porcelain")),
        "libraries": versions,
    }


def environment_line(services: Services) -> str:
    database = (
        f"PostgreSQL {services.postgres_version}" if services.postgres else "SQLite (Postgres: not available)"
    )
    layer = f"Redis {services.redis_version}" if services.redis else "in-memory layer (Redis: not available)"
    return f"bench on {_cpu_model()}, {os.cpu_count()} cores; {database}; {layer}"


def _number(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit == "×":
        return f"{value:.2f}×"
    if unit == "ms":
        return f"{value:.0f} ms" if value >= 10 else f"{value:.1f} ms"
    if unit == "MB":
        return f"{value:.0f} MB"
    if unit == "s":
        return f"{value:.1f} s"
    if float(value).is_integer():
        return f"{int(value)} {unit}".strip()
    return f"{value:.3f} {unit}".strip()


def _spread(result: Result) -> str:
    s = result.spread
    if not s:
        return ""
    if s.get("n", 0) <= 1:
        return "1 sample"
    return (
        f"min {_number(float(s['min']), result.unit)} · IQR {_number(float(s['q1']), result.unit)}–"
        f"{_number(float(s['q3']), result.unit)} · max {_number(float(s['max']), result.unit)} (n={s['n']})"
    )


STATUS_MARK = {"pass": "✅ pass", "fail": "❌ miss", "not run": "— not run", "error": "⚠ error"}


def line(result: Result) -> str:
    """One console line for a result."""
    if result.status in {"not run", "error"}:
        return f"{result.id} {result.name}: {result.status}: {result.reason}"
    at_least = "≥ " if result.details.get("capped") else ""
    return (
        f"{result.id} {result.name}: {result.statistic} {at_least}{_number(result.value, result.unit)} "
        f"(target {result.target}) {STATUS_MARK[result.status]}{_missed(result)}  [{_spread(result)}]"
    )


def _missed(result: Result) -> str:
    """The target's other conditions that were missed, when the statistic itself was met."""
    missed = result.details.get("missed")
    return f" (missed: {'; '.join(missed)})" if missed else ""


def markdown_table(results: list[Result]) -> str:
    rows = [
        "| measure | target | result | spread | status | notes |",
        "|---|---|---|---|---|---|",
    ]
    for result in sorted(results, key=lambda r: ORDER.index(r.id) if r.id in ORDER else 99):
        value = "" if result.value is None else f"{result.statistic} {_number(result.value, result.unit)}"
        if value and result.details.get("capped"):
            value = f"{result.statistic} ≥ {_number(result.value, result.unit)} (bound hit)"
        note = result.reason or str(result.details.get("summary", ""))
        rows.append(
            f"| {result.id} {result.name} | {result.target} | {value} | {_spread(result)} | "
            f"{STATUS_MARK[result.status]}{_missed(result)} | {note.replace('|', '/')} |"
        )
    return "\n".join(rows)


def _machine_markdown(info: dict[str, Any]) -> str:
    dirty = " (with uncommitted changes)" if info.get("git_dirty") else ""
    return (
        f"Machine: {info['cpu']}, {info['cores']} cores, {info['memory_gib']} GiB RAM; {info['os']}; "
        f"Python {info['python']}; PostgreSQL {info['postgres'] or '— (not available)'}; "
        f"Redis {info['redis'] or '— (not available)'}; commit `{info['git_commit'][:12]}`{dirty}."
    )


def write(
    results: list[Result],
    *,
    services: Services,
    quick: bool,
    elapsed: float,
    argv: list[str],
    performance_doc: Path = PERFORMANCE_DOC,
) -> list[Path]:
    """Write the JSON and the markdown (and, but for ``--quick``, the table in
    ``performance_doc``); returns the paths written."""
    now = datetime.now(UTC).isoformat(timespec="seconds")
    info = machine(services)
    stem = "quick" if quick else "latest"
    json_path = RESULTS_DIR / f"{stem}.json"
    partial = any(arg.startswith("--only") for arg in argv) and not quick
    previous: dict[str, Any] = {}
    if partial and json_path.exists():
        previous = {r["id"]: r for r in json.loads(json_path.read_text()).get("results", [])}
    for result in results:
        result.details.setdefault("measured_at", now)
        result.details.setdefault("git_commit", info["git_commit"])
        previous[result.id] = result.as_json()
    merged = sorted(previous.values(), key=lambda r: ORDER.index(r["id"]) if r["id"] in ORDER else 99)
    document = {
        "generated_at": now,
        "mode": "quick" if quick else ("partial" if partial else "full"),
        "argv": argv,
        "elapsed_seconds": round(elapsed, 1),
        "machine": info,
        "results": merged,
    }
    json_path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    table = markdown_table([Result(**r) for r in merged])
    md_path = RESULTS_DIR / f"{stem}.md"
    heading = f"# Benchmarks ({document['mode']} run, {now})\n\n{_machine_markdown(info)}"
    after = ""
    if partial and md_path.exists():
        heading, table, after = _kept_from(md_path.read_text(), table, {r["id"] for r in merged}, now)
    legend = (
        "Medians unless stated; spread is min · interquartile range · max over the repeats. "
        f"Details, samples and profiles: `bench/results/{stem}.json`."
    )
    md_path.write_text(f"{heading}\n\n{table}\n\n{legend}\n{after}")
    written = [_shown(json_path), _shown(md_path)]
    if not quick and performance_doc.exists():
        run_line = heading.removeprefix("# Benchmarks ").strip()
        performance_table_write(performance_doc, f"Latest {run_line}\n\n{table}\n\n{legend}")
        written.append(_shown(performance_doc))
    return written


def _shown(path: Path) -> Path:
    try:
        return path.relative_to(REPO_ROOT)
    except ValueError:
        return path


def performance_table_write(path: Path, table: str) -> None:
    """Replace what lies between the two marker lines of ``path`` with ``table``; the rest of the
    document is left as it is. A document without both markers, in order, is an error (a
    silently skipped table would go stale)."""
    text = path.read_text(encoding="utf-8")
    begin, end = text.find(TABLE_BEGIN), text.find(TABLE_END)
    if begin < 0 or end < begin:
        raise ValueError(f"{path} has no {TABLE_BEGIN!r} ... {TABLE_END!r} pair to write the table between")
    start = begin + len(TABLE_BEGIN)
    path.write_text(f"{text[:start]}\n{table.strip()}\n{text[end:]}", encoding="utf-8")


def _kept_from(old: str, table: str, measured: set[str], now: str) -> tuple[str, str, str]:
    """What a partial run keeps of the markdown it updates (``latest.json`` is not committed, so
    it may know fewer measures than the table): the heading, the rows of measures it did not
    run, and every section after the table; its own rows replace theirs."""
    lines = old.splitlines()
    rows = [line for line in lines if line.startswith("| P")]
    kept = [row for row in rows if row.split()[1] not in measured]
    new_rows = [line for line in table.splitlines() if line.startswith("| P")]
    merged_rows = sorted(
        [*kept, *new_rows], key=lambda row: ORDER.index(row.split()[1]) if row.split()[1] in ORDER else 99
    )
    header = table.splitlines()[:2]
    first_row = next((i for i, line in enumerate(lines) if line.startswith("| measure")), len(lines))
    heading = (
        "\n".join(lines[:first_row]).rstrip() + f"\n\n(Rows of {', '.join(sorted(measured))} updated {now}.)"
    )
    medians = next(
        (i for i, line in enumerate(lines) if line.startswith("Medians unless stated")), len(lines) - 1
    )
    after = "\n".join(lines[medians + 1 :])
    return (
        heading,
        "\n".join([*header, *merged_rows]),
        ("\n" + after.rstrip() + "\n") if after.strip() else "",
    )
