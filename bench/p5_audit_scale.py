"""P5 audit scale: the conversation list filtered by tool and by text, over 1,000,000 exchanges.

The server time of one list page is what the list view asks of the database: the product's own
``selectors.conversation_search`` with ``ConversationFilters(tool=...)`` or ``(q=...)`` (PostgreSQL
full-text search over questions, answers and raw exchange bodies), paginated 25 to a page as the
view does (``selectors.conversation_page``: the count, capped at ``LIST_COUNT_CAP``, plus the
page's rows) and ``selectors.conversation_rows`` for that page.
Measured in-process against PostgreSQL, each query repeated, p95 judged; a query still running
after ``TIMEOUT_SECONDS`` is stopped by a statement timeout and recorded at the bound.

Each filter is timed for a common value and a rare one, for the non-staff owner of all the rows
(and a staff user, who sees everything). The SQL of every case and its ``EXPLAIN (ANALYZE,
BUFFERS)`` (a plain ``EXPLAIN`` for slow ones) go to ``bench/results/p5-explain.txt``. The
unfiltered list is reported beside them.
"""

from __future__ import annotations

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

ID, NAME, UNIT, TARGET, LIMIT = "P5", "audit scale", "ms", "≤ 100 ms p95 (filtered list, 1M exchanges)", 100.0
PER_PAGE = 25
BUDGET_SECONDS = 15.0
# A query slower than this is not warmed up first, is repeated only twice, and gets a plain
# EXPLAIN (an EXPLAIN ANALYZE would run it once more).
SLOW_SECONDS = 5.0
# A page query still running after this is stopped (statement_timeout) and recorded at the bound.
TIMEOUT_SECONDS = 60.0


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
    conversations, exchanges = audit_data.present()
    generated: dict[str, float] = {}
    if exchanges < audit_data.EXCHANGES:
        ctx.log(f"P5 data set incomplete ({exchanges:,} exchanges): generating (once; kept for later runs)")
        generated = audit_data.generate(ctx.log)
        conversations, exchanges = audit_data.present()
        ctx.log(f"P5 generated in {generated['seconds']:.0f} s")
    else:
        ctx.log(f"P5 reusing the data set: {conversations:,} conversations, {exchanges:,} exchanges")
    # The measures before this one (P1, P4) add and delete some 150,000 rows in these tables; the
    # index-only scans would visit the heap for every page they left dirty. Autovacuum clears
    # that within minutes; P5 starts from that state, not from the bench's own leftovers.
    dead = audit_data.dead_rows()
    if dead:
        ctx.log(f"P5 vacuuming {dead:,} dead rows the earlier measures left")
        audit_data.vacuum()
    owner = audit_data.owner()
    staff = _staff()
    cases: dict[str, Callable[[], object]] = {
        "owner: unfiltered": lambda: list_page(owner, ConversationFilters()),
        "staff: unfiltered": lambda: list_page(staff, ConversationFilters()),
        "owner: tool = calculate (35%)": lambda: list_page(owner, ConversationFilters(tool="calculate")),
        "owner: tool = list_notes (0.1%)": lambda: list_page(owner, ConversationFilters(tool="list_notes")),
        "staff: tool = list_notes (0.1%)": lambda: list_page(staff, ConversationFilters(tool="list_notes")),
        "owner: text 'Beijing' (1.7%)": lambda: list_page(owner, ConversationFilters(q="Beijing")),
        f"owner: text '{audit_data.RARE_CITY}' (0.05%)": lambda: list_page(
            owner, ConversationFilters(q=audit_data.RARE_CITY)
        ),
    }
    timings: dict[str, list[float]] = {}
    capped: list[str] = []
    explains: list[str] = []
    for label, case in cases.items():
        timings[label], statements = _timed(case, repeats)
        ctx.log(f"P5 {label}: p95 {summary(timings[label])['p95']:.0f} ms (n={len(timings[label])})")
        explains.append(_explain(label, statements, analyze=max(timings[label]) < SLOW_SECONDS * 1000))
        if max(timings[label]) >= TIMEOUT_SECONDS * 1000:
            capped.append(label)
    explain_path = ctx.results_dir / "p5-explain.txt"
    explain_path.write_text("\n\n\n".join(explains) + "\n")
    filtered = {label: t for label, t in timings.items() if "unfiltered" not in label}
    worst = max(filtered, key=lambda label: summary(filtered[label])["p95"])
    details: dict[str, Any] = {
        "data_set": {
            "conversations": conversations,
            "exchanges": exchanges,
            **({"generated": generated} if generated else {}),
            "dead_rows_vacuumed_first": dead,
        },
        "queries_ms": {label: summary(t) for label, t in timings.items()},
        "judged_on": f"the slowest filtered query's p95: {worst}",
        "explain": str(explain_path.relative_to(REPO_ROOT)),
        "note": "the product's own conversation_search (ConversationFilters tool= / q=), paginated as the view does",
        **(
            {"capped": f"stopped at the {TIMEOUT_SECONDS:.0f} s statement timeout: {', '.join(capped)}"}
            if capped
            else {}
        ),
        "summary": f"worst: {worst}",
    }
    result = judged(
        id=ID,
        name=NAME,
        unit=UNIT,
        target=TARGET,
        limit=LIMIT,
        samples=filtered[worst],
        statistic="p95",
        details=details,
    )
    return [result]
