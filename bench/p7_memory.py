"""P7 memory: the worker's resident memory at P4's load (200 turns at once).

Measured inside P4's run (``bench.p4_concurrency`` samples the worker every 100 ms); this module
turns those samples into the result. The figure judged is the worker's whole process tree — the
Celery process and the stdio MCP server it spawned — since both live on the worker host; the
Celery process alone is reported beside it.
"""

from __future__ import annotations

from bench.stats import Result, judged, not_run

ID, NAME, UNIT, TARGET, LIMIT = "P7", "memory", "MB", "≤ 600 MB", 600.0
MB = 1024 * 1024


def result(*, peaks_tree: list[int], peaks_own: list[int], idle_tree: int, concurrency: int) -> Result:
    """P7 from the per-repeat peak RSS of the worker tree (bytes)."""
    return judged(
        id=ID,
        name=NAME,
        unit=UNIT,
        target=TARGET,
        limit=LIMIT,
        samples=[peak / MB for peak in peaks_tree],
        statistic="max",
        details={
            "judged_on": "peak RSS of the worker process tree (Celery + its stdio MCP server), worst repeat",
            "celery_process_peak_mb": [round(peak / MB, 1) for peak in peaks_own],
            "idle_tree_mb_before_load": round(idle_tree / MB, 1),
            "worker_threads": concurrency,
            "summary": f"worker -P threads -c {concurrency}, idle {idle_tree / MB:.0f} MB",
        },
    )


def skipped(reason: str) -> Result:
    return not_run(id=ID, name=NAME, unit=UNIT, target=TARGET, reason=reason)
