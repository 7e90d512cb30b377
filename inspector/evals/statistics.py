"""What a cell's case runs say once repeated: the pass rate with its 95% interval, pass@k and
pass^k over each case's repeats, latency's mean and 95th percentile, and what a case costs.
docs/evals.md §6 gives the definitions and their sources.

Pure Python: the numbers of :func:`cell_statistics` come from plain values, so they are tested
on their own.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

# The normal quantile of a two-sided 95% interval.
Z_95 = 1.959963984540054


@dataclass(frozen=True)
class CaseRun:
    case: int
    passed: bool
    latency_ms: int | None
    tokens: int
    cost: Decimal | None


def wilson_interval(passed: int, runs: int, z: float = Z_95) -> tuple[float, float] | None:
    """The Wilson score interval of a pass rate (sound at 0 or all passes and for few runs,
    unlike the normal approximation); None without runs."""
    if runs <= 0:
        return None
    rate = passed / runs
    denominator = 1 + z * z / runs
    centre = (rate + z * z / (2 * runs)) / denominator
    half = z * math.sqrt(rate * (1 - rate) / runs + z * z / (4 * runs * runs)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def _pass_at(n: int, c: int, k: int) -> float:
    """The chance that at least one of k runs drawn from n, c of which passed, passes."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _pass_all(n: int, c: int, k: int) -> float:
    """The chance that all k runs drawn from n, c of which passed, pass."""
    return math.comb(c, k) / math.comb(n, k) if c >= k else 0.0


def percentile(values: Sequence[int], share: float) -> int | None:
    """The nearest-rank percentile (``share`` in 0..1); None without values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def cell_statistics(
    runs: Iterable[CaseRun], k: int, case_k: Mapping[int, int] | None = None
) -> dict[str, object]:
    """The cell keys of ``eval run --json`` for its ended case runs, k the run's repeats and
    ``case_k`` the repeats of the cases that state their own (by case index): ``pass_rate``,
    ``pass_rate_ci`` ([low, high]), ``k``, ``pass_at_k`` and ``pass_hat_k`` (each case's at its
    own k, averaged over the cases with at least that many ended runs), ``latency_ms_mean``,
    ``latency_ms_p95``, ``tokens_per_case`` and ``cost_per_case`` (a string of US dollars, or
    None without a price)."""
    ended = list(runs)
    passed = sum(1 for run in ended if run.passed)
    interval = wilson_interval(passed, len(ended))
    by_case: dict[int, list[bool]] = defaultdict(list)
    for run in ended:
        by_case[run.case].append(run.passed)
    k = max(1, k)
    wanted = {case: max(1, (case_k or {}).get(case, k)) for case in by_case}
    complete = [
        (len(results), sum(results), wanted[case])
        for case, results in by_case.items()
        if len(results) >= wanted[case]
    ]
    latencies = [run.latency_ms for run in ended if run.latency_ms is not None]
    costs = [run.cost for run in ended if run.cost is not None]
    return {
        "pass_rate": round(passed / len(ended), 4) if ended else None,
        "pass_rate_ci": [round(interval[0], 4), round(interval[1], 4)] if interval else None,
        "k": k,
        "pass_at_k": round(sum(_pass_at(n, c, kk) for n, c, kk in complete) / len(complete), 4)
        if complete
        else None,
        "pass_hat_k": round(sum(_pass_all(n, c, kk) for n, c, kk in complete) / len(complete), 4)
        if complete
        else None,
        "latency_ms_mean": round(sum(latencies) / len(latencies)) if latencies else None,
        "latency_ms_p95": percentile(latencies, 0.95),
        "tokens_per_case": round(sum(run.tokens for run in ended) / len(ended)) if ended else None,
        "cost_per_case": str(sum(costs, Decimal(0)) / len(costs))
        if costs and len(costs) == len(ended)
        else None,
    }
