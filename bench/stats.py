"""Summaries of repeated samples, and the result every measure reports."""

from __future__ import annotations

import statistics
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Status = Literal["pass", "fail", "not run", "error"]


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) by linear interpolation between the closest ranks."""
    if not values:
        raise ValueError("no samples")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summary(values: Sequence[float]) -> dict[str, float | int]:
    """Median and spread: min, max, quartiles, p95 and the sample count."""
    return {
        "n": len(values),
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "q1": percentile(values, 0.25),
        "q3": percentile(values, 0.75),
        "p95": percentile(values, 0.95),
    }


@dataclass
class Result:
    """One measure's outcome.

    ``value`` is the statistic the target is checked on (``statistic`` names it: median, p95...);
    ``samples`` are the raw repeats; ``details`` holds the supporting numbers and notes.
    """

    id: str
    name: str
    unit: str
    target: str
    status: Status
    value: float | None = None
    statistic: str = "median"
    samples: list[float] = field(default_factory=list)
    spread: dict[str, float | int] = field(default_factory=dict)
    reason: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def judged(
    *,
    id: str,
    name: str,
    unit: str,
    target: str,
    limit: float,
    samples: Sequence[float],
    statistic: Literal["median", "p95", "max", "min"] = "median",
    at_most: bool = True,
    details: dict[str, Any] | None = None,
) -> Result:
    """A result whose ``statistic`` of ``samples`` must be at most (or at least) ``limit``."""
    spread = summary(samples)
    value = float(spread[statistic])
    ok = value <= limit if at_most else value >= limit
    return Result(
        id=id,
        name=name,
        unit=unit,
        target=target,
        status="pass" if ok else "fail",
        value=value,
        statistic=statistic,
        samples=[float(s) for s in samples],
        spread=spread,
        details=details or {},
    )


def also_within(result: Result, *, what: str, value: float, limit: float) -> Result:
    """``result`` with a second condition of its target: ``value`` (named ``what``) at most
    ``limit``. A miss turns a pass into a miss and is named in ``details["missed"]``; both
    conditions are kept in ``details["conditions"]`` so the report shows each."""
    ok = value <= limit
    result.details.setdefault("conditions", []).append(
        {"what": what, "value": round(value, 3), "limit": limit, "met": ok}
    )
    if not ok and result.status in {"pass", "fail"}:
        result.status = "fail"
        result.details.setdefault("missed", []).append(f"{what} {value:.3g} > {limit:g}")
    return result


def not_run(*, id: str, name: str, unit: str, target: str, reason: str) -> Result:
    return Result(id=id, name=name, unit=unit, target=target, status="not run", reason=reason)


def guarded(id: str, measure: Callable[[], Result]) -> Result:
    """``measure()``, or a result of ``id`` with its error when it raises: a measure that reports
    several results keeps the others when one of them breaks."""
    try:
        return measure()
    except Exception as exc:  # noqa: BLE001 — this result's error, not the others'
        traceback.print_exc()
        return Result(
            id=id, name="", unit="", target="", status="error", reason=f"{type(exc).__name__}: {exc}"
        )
