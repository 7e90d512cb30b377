"""P5 audit scale: the conversation list filtered by tool and by text, at 100k, 1M and 10M exchanges.

One data set is grown between the points of the curve (``audit_data.SIZES``) and kept across runs;
every point is reported (p95 per filter), the largest is judged. A point the disk cannot hold with
``audit_data.KEEP_FREE_BYTES`` left is not generated: the run stops at the largest that fits and
says so.

The server time of one list page is what the list view asks of the database: the product's own
``selectors.conversation_search`` with ``ConversationFilters(tool=...)`` or ``(q=...)`` (PostgreSQL
full-text search over questions, answers and raw exchange bodies), paginated 25 to a page as the
view does (``selectors.conversation_page``: the count, capped at ``LIST_COUNT_CAP``, plus the
page's rows) and ``selectors.conversation_rows`` for that page.
Measured in-process against PostgreSQL, each query repeated, p95 judged; a query still running
after ``TIMEOUT_SECONDS`` is stopped by a statement timeout and recorded at the bound.

Each filter is timed for a common value and a rare one, for the non-staff owner of all the rows
(and a staff user, who sees everything). The text filter is timed in its default scopes and in
each scope alone (``selectors.scopes.SCOPES``); each scope's p95 is reported with its ratio to
the default scopes' in the same run (``scope_ratios``). The SQL of every case and its ``EXPLAIN (ANALYZE,
BUFFERS)`` (a plain ``EXPLAIN`` for slow ones) go to ``bench/results/p5-explain.txt``. The
unfiltered list is reported beside them. ``BENCH_P5_MAX_EXCHANGES`` (e.g. 100000) stops before
growing the set past that many exchanges, for a loaded host.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from typing import Any

from django.contrib.auth import get_user_model
from django.db import OperationalError, connection, transaction
from django.test.utils import CaptureQueriesContext

from bench import audit_data
from bench.context import Context
from bench.environment import REPO_ROOT
from bench.stats import Result, judged, not_run, summary
from conversations import selectors
from conversations.selectors import ConversationFilters
from conversations.selectors.scopes import SCOPES

ID, NAME, UNIT, TARGET, LIMIT = (
    "P5",
    "audit scale",
    "ms",
    "≤ 100 ms p95 (filtered list, 10M exchanges)",
    100.0,
)
PER_PAGE = 25
BUDGET_SECONDS = 15.0
# A query slower than this is not warmed up first, is repeated only twice, and gets a plain
# EXPLAIN (an EXPLAIN ANALYZE would run it once more).
SLOW_SECONDS = 5.0
# A page query still running after this is stopped (statement_timeout) and recorded at the bound.
TIMEOUT_SECONDS = 60.0
# The largest point to grow the data set to in this run (0: every point the disk holds): growing
# it is the long part (about ten minutes of CPU per million exchanges), so a loaded host may stop early.
MAX_EXCHANGES = int(os.environ.get("BENCH_P5_MAX_EXCHANGES", "0") or 0)


def list_page(user: Any, filters: ConversationFilters) -> int:
    """What the list view asks of the database for page 1: ``conversation_search``, the
    paginator's count, the page's rows and their tool labels (``conversation_rows``)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL statement_timeout = {int(TIMEOUT_SECONDS * 1000)}")
        conversations = selectors.conversation_search(user=user, filters=filters)
        # As the view pages the list: the count stops at LIST_COUNT_CAP ("more than 1000").
        page = selectors.conversation_page(conversations, 1, per_page=PER_PAGE)
        return len(selectors.conversation_rows(conversations=list(page.object_list)))


def _once(run: Callable[[], object]) -> float:
    """Milliseconds for one run; a run stopped by the statement timeout counts as the timeout."""
    started = time.perf_counter()
    try:
        run()
    except OperationalError as exc:
        if "statement timeout" not in str(exc):
            raise
        return TIMEOUT_SECONDS * 1000
    return (time.perf_counter() - started) * 1000


def _timed(run: Callable[[], object], repeats: int) -> tuple[list[float], list[str]]:
    """Samples in ms, and the SQL the page ran.

    After one warm-up run (the measure is of a server that has been up), until ``repeats`` or the
    time budget; a slow query's first run is kept as a sample instead of being thrown away.
    """
    with CaptureQueriesContext(connection) as captured:
        first = _once(run)
    times = [first] if first > SLOW_SECONDS * 1000 else []
    spent = first / 1000
    minimum = 2 if times else 3
    while len(times) < repeats and (spent < BUDGET_SECONDS or len(times) < minimum):
        times.append(_once(run))
        spent += times[-1] / 1000
    statements = [query["sql"] for query in captured.captured_queries]
    return times, [sql for sql in statements if sql.lstrip().upper().startswith("SELECT")]


def _explain(label: str, statements: list[str], *, analyze: bool) -> str:
    note = (
        ""
        if analyze
        else f" (plain EXPLAIN: slower than {SLOW_SECONDS:.0f} s; its timings are in latest.json)"
    )
    parts = [f"=== {label}{note}"]
    with connection.cursor() as cursor:
        for sql in statements:
            cursor.execute(f"EXPLAIN ({'ANALYZE, BUFFERS' if analyze else 'COSTS'}) {sql}")
            plan = "\n".join(row[0] for row in cursor.fetchall())
            parts.append(f"--- {sql}\n{plan}")
    return "\n\n".join(parts)


def _staff() -> Any:
    model = get_user_model()
    user, _ = model.objects.get_or_create(username="bench-audit-staff", defaults={"is_staff": True})
    if not user.is_staff:
        user.is_staff = True
        user.save(update_fields=["is_staff"])
    return user


# A point is measured only while the data set holds at most this much more than its size.
GROWN_PAST = 1.05
CURVE_FILE = "p5-curve.json"


def _curve_read(ctx: Context) -> dict[str, Any]:
    """The points measured by earlier runs (by size label), as they were reported."""
    try:
        return dict(json.loads((ctx.results_dir / CURVE_FILE).read_text()))
    except (OSError, ValueError):
        return {}


def _curve_write(ctx: Context, points: dict[str, Any]) -> None:
    (ctx.results_dir / CURVE_FILE).write_text(json.dumps(points, indent=1) + "\n")


def _free_bytes() -> int:
    """Free bytes on the file system of PostgreSQL's data directory (the root's if unreadable)."""
    with connection.cursor() as cursor:
        cursor.execute("SHOW data_directory")
        directory = cursor.fetchone()[0]
    try:
        return shutil.disk_usage(directory).free
    except OSError:
        return shutil.disk_usage("/").free


# The text case every scope is timed with, and the label of the default scopes' case.
SCOPED_WORD = "Beijing"
DEFAULT_TEXT_CASE = f"owner: text '{SCOPED_WORD}' (1.7%)"


def scope_label(scope: str) -> str:
    return f"owner: text '{SCOPED_WORD}' in {scope} only"


def scope_ratios(p95_ms: dict[str, float]) -> dict[str, dict[str, float]]:
    """Each scope's p95 (ms) and its ratio to the default scopes' p95, from the p95 of each case
    by label (a scope whose case was not timed is left out)."""
    default = p95_ms.get(DEFAULT_TEXT_CASE)
    ratios: dict[str, dict[str, float]] = {}
    for scope in SCOPES:
        p95 = p95_ms.get(scope_label(scope))
        if p95 is None:
            continue
        ratios[scope] = {"p95_ms": round(p95, 1)}
        if default:
            ratios[scope]["ratio_to_default"] = round(p95 / default, 2)
    return ratios


def _scoped_case(owner: Any, scope: str) -> Callable[[], object]:
    return lambda: list_page(owner, ConversationFilters(q=SCOPED_WORD, scope=(scope,)))


def _cases(owner: Any, staff: Any) -> dict[str, Callable[[], object]]:
    scoped = {scope_label(scope): _scoped_case(owner, scope) for scope in SCOPES}
    return {
        "owner: unfiltered": lambda: list_page(owner, ConversationFilters()),
        "staff: unfiltered": lambda: list_page(staff, ConversationFilters()),
        "owner: tool = calculate (35%)": lambda: list_page(owner, ConversationFilters(tool="calculate")),
        "owner: tool = list_notes (0.1%)": lambda: list_page(owner, ConversationFilters(tool="list_notes")),
        "staff: tool = list_notes (0.1%)": lambda: list_page(staff, ConversationFilters(tool="list_notes")),
        DEFAULT_TEXT_CASE: lambda: list_page(owner, ConversationFilters(q=SCOPED_WORD)),
        f"owner: text '{audit_data.RARE_CITY}' (0.05%)": lambda: list_page(
            owner, ConversationFilters(q=audit_data.RARE_CITY)
        ),
        **scoped,
    }


def size_label(exchanges: int) -> str:
    """100k, 1M, 10M: the curve's points as the report names them."""
    if exchanges >= 1_000_000:
        return f"{exchanges / 1_000_000:g}M"
    return f"{exchanges / 1_000:g}k"


def _point(
    ctx: Context, size: int, repeats: int
) -> tuple[dict[str, list[float]], list[str], list[str], dict[str, Any]]:
    """Grow the data set to ``size`` exchanges and time every case there.

    Returns (samples per case, cases stopped at the timeout, EXPLAIN sections, data set facts).
    """
    conversations, exchanges = audit_data.present()
    facts: dict[str, Any] = {}
    if exchanges < size:
        ctx.log(
            f"P5 {size_label(size)}: the data set has {exchanges:,} exchanges; growing it (kept for later runs)"
        )
        facts["generated"] = audit_data.grow(size, ctx.log)
        conversations, exchanges = audit_data.present()
        ctx.log(f"P5 {size_label(size)}: grown in {facts['generated']['seconds']:.0f} s")
    else:
        ctx.log(
            f"P5 {size_label(size)}: reusing the data set: {conversations:,} conversations, {exchanges:,} exchanges"
        )
    # The measures before this one (P1, P4) add and delete some 150,000 rows in these tables; the
    # index-only scans would visit the heap for every page they left dirty. Autovacuum clears
    # that within minutes; P5 starts from that state, not from the bench's own leftovers.
    dead = 0 if facts else audit_data.dead_rows()
    if dead:
        ctx.log(f"P5 vacuuming {dead:,} dead rows")
        audit_data.vacuum()
    facts.update(
        {
            "conversations": conversations,
            "exchanges": exchanges,
            "disk_gb": round(audit_data.disk_bytes() / 1024**3, 2),
            "dead_rows_vacuumed_first": dead,
        }
    )
    timings: dict[str, list[float]] = {}
    capped: list[str] = []
    explains: list[str] = []
    for label, case in _cases(audit_data.owner(), _staff()).items():
        timings[label], statements = _timed(case, repeats)
        ctx.log(
            f"P5 {size_label(size)} {label}: p95 {summary(timings[label])['p95']:.0f} ms (n={len(timings[label])})"
        )
        explains.append(
            _explain(
                f"{size_label(size)} ({exchanges:,} exchanges): {label}",
                statements,
                analyze=max(timings[label]) < SLOW_SECONDS * 1000,
            )
        )
        if max(timings[label]) >= TIMEOUT_SECONDS * 1000:
            capped.append(label)
    return timings, capped, explains, facts


def _scopes_note(timings: dict[str, list[float]]) -> str:
    """The judged point's scopes for the report's notes: each one's p95 and ratio to the default."""
    ratios = scope_ratios({label: summary(t)["p95"] for label, t in timings.items()})
    if not ratios:
        return ""
    parts = [
        f"{scope} {found['p95_ms']:.0f} ms ({found['ratio_to_default']:.2f}×)"
        if "ratio_to_default" in found
        else f"{scope} {found['p95_ms']:.0f} ms"
        for scope, found in ratios.items()
    ]
    return " · per scope, p95 and ÷ the default scopes: " + ", ".join(parts)


def _worst(timings: dict[str, list[float]]) -> str:
    filtered = {label: t for label, t in timings.items() if "unfiltered" not in label}
    return max(filtered, key=lambda label: summary(filtered[label])["p95"])


def run(ctx: Context) -> list[Result]:
    if not ctx.services.postgres:
        return [
            not_run(
                id=ID,
                name=NAME,
                unit=UNIT,
                target=TARGET,
                reason=f"needs PostgreSQL: {ctx.services.missing('postgres')}",
            )
        ]
    repeats = ctx.repeats(full=20, quick=5)
    points: dict[str, Any] = {}
    explains: list[str] = []
    timings: dict[str, list[float]] = {}
    skipped: list[str] = []
    fit_note = ""
    stop_reason = "does not fit on disk"
    earlier = _curve_read(ctx)
    measured: set[str] = set()
    for size in audit_data.SIZES:
        _, have = audit_data.present()
        label = size_label(size)
        if MAX_EXCHANGES and size > MAX_EXCHANGES and size > have:
            skipped = [size_label(s) for s in audit_data.SIZES if s >= size]
            fit_note = f"{', '.join(skipped)} not measured: BENCH_P5_MAX_EXCHANGES={MAX_EXCHANGES} asked to stop before"
            ctx.log(f"P5 {label}: past BENCH_P5_MAX_EXCHANGES ({MAX_EXCHANGES:,}): stopping")
            stop_reason = "past BENCH_P5_MAX_EXCHANGES"
            break
        if have > size * GROWN_PAST:
            # The set has grown past this point (it is kept, never shrunk): report the point as
            # it was measured when the set had that size, saying when.
            if label in earlier:
                points[label] = {**earlier[label], "from_an_earlier_run": True}
            else:
                points[label] = {"not_measured": f"the data set already has {have:,} exchanges"}
            continue
        per_exchange = audit_data.disk_bytes() / have if have else 0.0
        if per_exchange and size not in audit_data.sizes_within(_free_bytes(), per_exchange, have):
            skipped = [size_label(s) for s in audit_data.SIZES if s >= size]
            needed = (size - have) * per_exchange
            ctx.log(
                f"P5 {label}: does not fit on disk with {audit_data.KEEP_FREE_BYTES / 1024**3:.0f} GB "
                f"left (needs ~{needed / 1024**3:.0f} GB more: {per_exchange / 1024:.1f} kB per exchange; "
                f"{_free_bytes() / 1024**3:.0f} GB free): stopping"
            )
            fit_note = (
                f"{', '.join(skipped)} not measured: at {per_exchange / 1024:.1f} kB per exchange (rows, TOAST "
                f"and indexes, measured) growing to {label} needs ~{needed / 1024**3:.0f} GB more, and "
                f"{_free_bytes() / 1024**3:.0f} GB are free, of which "
                f"{audit_data.KEEP_FREE_BYTES / 1024**3:.0f} GB must stay free"
            )
            break
        timings, capped, sections, facts = _point(ctx, size, repeats)
        explains += sections
        measured.add(label)
        worst = _worst(timings)
        points[label] = {
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "data_set": facts,
            "p95_ms": {case: round(summary(t)["p95"], 1) for case, t in timings.items()},
            "worst": f"{worst}: p95 {summary(timings[worst])['p95']:.0f} ms",
            "scopes": scope_ratios({case: summary(t)["p95"] for case, t in timings.items()}),
            **(
                {"capped": f"stopped at the {TIMEOUT_SECONDS:.0f} s statement timeout: {', '.join(capped)}"}
                if capped
                else {}
            ),
        }
        _curve_write(ctx, {**earlier, **{k: v for k, v in points.items() if k in measured}})
    if not measured:
        return [
            not_run(id=ID, name=NAME, unit=UNIT, target=TARGET, reason=fit_note or "no point was measured")
        ]
    explain_path = ctx.results_dir / "p5-explain.txt"
    explain_path.write_text("\n\n\n".join(explains) + "\n")
    judged_point = [label for label in points if label in measured][-1]
    worst = _worst(timings)
    largest = audit_data.SIZES[-1]
    details: dict[str, Any] = {
        "curve": points,
        "queries_ms": {label: summary(t) for label, t in timings.items()},
        "judged_on": f"the slowest filtered query's p95 at {judged_point}: {worst}",
        "explain": str(explain_path.relative_to(REPO_ROOT)),
        "note": "the product's own conversation_search (ConversationFilters tool= / q=), paginated as the view does",
        **(
            {"not_reached": f"{fit_note}; judged at {judged_point}, not {size_label(largest)}"}
            if skipped
            else {}
        ),
        "scopes": scope_ratios({label: summary(t)["p95"] for label, t in timings.items()}),
        "summary": " · ".join(
            f"{label}: {point['worst']}" for label, point in points.items() if "worst" in point
        )
        + _scopes_note(timings)
        + (f" · {', '.join(skipped)}: {stop_reason}" if skipped else ""),
    }
    result = judged(
        id=ID,
        name=NAME,
        unit=UNIT,
        target=TARGET,
        limit=LIMIT,
        samples=timings[worst],
        statistic="p95",
        details=details,
    )
    return [result]
