"""P7 memory: the worker's resident memory at P4's load (200 turns at once).

Measured inside P4's run (``bench.p4_concurrency`` samples the workers every 100 ms); this module
turns those samples into the result. The figure judged is the worker host's: every worker
process's whole tree — the Celery process and the stdio MCP server it spawned — added up at each
sample; the Celery processes alone are reported beside it, and the trees' PSS (pages shared
between the processes, such as the interpreter's and the libraries', counted once), not judged.
"""

from __future__ import annotations

from bench.stats import Result, judged, not_run

ID, NAME, UNIT, TARGET, LIMIT = "P7", "memory", "MB", "≤ 400 MB", 400.0
MB = 1024 * 1024


def result(
    *,
    peaks_tree: list[int],
    peaks_own: list[int],
    idle_tree: int,
    concurrency: int,
    processes: int = 1,
    peaks_tree_pss: list[int] | None = None,
    peaks_tree_at_pss: list[int] | None = None,
) -> Result:
    """P7 from the per-repeat peak RSS of the worker host's process trees (bytes); their peak
    PSS beside it (``bench.processes.pss_bytes``: shared pages counted once), not judged, with
    the peak RSS of the same samples (PSS is read at every fifth)."""
    pss, rss_at_pss = _mb(peaks_tree_pss or []), _mb(peaks_tree_at_pss or [])
    pss_note = (
        f"; PSS (shared pages counted once) peak {max(pss):.0f} MB, RSS at the same samples {max(rss_at_pss):.0f} MB"
        if pss and rss_at_pss
        else ""
    )
    return judged(
        id=ID,
        name=NAME,
        unit=UNIT,
        target=TARGET,
        limit=LIMIT,
        samples=[peak / MB for peak in peaks_tree],
        statistic="max",
        details={
            "judged_on": "peak RSS of the worker processes' trees (Celery + its stdio MCP server) together, worst repeat",
            "celery_process_peak_mb": _mb(peaks_own),
            "idle_tree_mb_before_load": round(idle_tree / MB, 1),
            "peak_tree_pss_mb": pss,
            "peak_tree_rss_at_pss_samples_mb": rss_at_pss,
            "worker_threads": concurrency,
            "worker_processes": processes,
            "summary": f"{processes} worker process(es), {concurrency} threads in all, "
            f"idle {idle_tree / MB:.0f} MB{pss_note}",
        },
    )


def _mb(values: list[int]) -> list[float]:
    return [round(value / MB, 1) for value in values]


def skipped(reason: str) -> Result:
    return not_run(id=ID, name=NAME, unit=UNIT, target=TARGET, reason=reason)
