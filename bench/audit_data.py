"""P5's data set: up to ten million exchanges in PostgreSQL, grown in steps and kept across runs.

One real turn is run through the product (the demo model and the demo server: "What will the
weather be like in Beijing tomorrow?"), so its rows carry exactly what the recorder writes:
spliced prompts, token counts, raw request and response bodies. That turn is then replicated in
SQL (``INSERT … SELECT … generate_series``) into conversations of 2 turns, appended to the ones
already there until the set reaches the size asked for (``SIZES``: 100k, 1M, 10M exchanges):
every column is copied from the template row, except keys, sequence numbers and timestamps, and
two variations that make filtering meaningful (both depend only on a conversation's number, so a
set grown in steps is the set generated at once):

* the city (``Beijing`` in every text column) is one of 60 cities per conversation, so a common
  word matches ~1.7% of conversations; ``Reykjavik`` is rare (1 in 2,000);
* the tool called (``get_weather_forecast``) is one of the demo server's tools by a skewed
  distribution (weather 40%, calculate 35%, convert_units 20%, write_note 4%, read_note ~1%,
  list_notes 0.1%) — replaced where the template names the one tool called, not where it lists
  every tool (the request bodies and prompts that carry all tool definitions).

The rows are owned by the user ``bench-audit``. Their hash chains are copies of the template's
and do not verify: this data set exists to time list queries, not to be audited.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from django.db import connection, transaction
from django.db.backends.utils import CursorWrapper

from bench import fixtures
from conversations.models import Conversation, Exchange, Step, Turn
from conversations.runner import turn_run

# The curve P5 reports: the data set is grown to each size in turn (never shrunk).
SIZES = (100_000, 1_000_000, 10_000_000)
# Disk the growth must leave free, and the margin on the measured bytes per exchange (the
# index rebuilds and WAL need room beyond the rows' own size while they run).
KEEP_FREE_BYTES = 20 * 1024**3
GROWTH_MARGIN = 1.5
# Conversation c of the data set was created c × 30 seconds after this.
EPOCH = "2025-01-01 00:00:00+00"
TURNS_PER_CONVERSATION = 2
OWNER = "bench-audit"
QUESTION = "What will the weather be like in Beijing tomorrow?"
CITY = "Beijing"
TOOL = "get_weather_forecast"
OTHER_TOOL = "convert_units"  # a value naming this too lists every tool: leave it alone
RARE_CITY = "Reykjavik"
CITIES = (
    "Beijing, Paris, Lagos, Lima, Oslo, Cairo, Delhi, Tokyo, Seoul, Sydney, Madrid, Rome, Berlin, Vienna, "
    "Prague, Warsaw, Dublin, Lisbon, Athens, Ankara, Tehran, Dubai, Doha, Riyadh, Nairobi, Accra, Dakar, "
    "Tunis, Algiers, Rabat, Toronto, Chicago, Boston, Denver, Seattle, Austin, Miami, Havana, Bogota, Quito, "
    "Santiago, Montevideo, Asuncion, La Paz, Caracas, Manila, Hanoi, Bangkok, Jakarta, Dhaka, Karachi, Kabul, "
    "Tashkent, Almaty, Baku, Tbilisi, Yerevan, Minsk, Kyiv, Helsinki"
).split(", ")
# (tool, share in thousandths), cumulative in this order.
TOOLS = [
    ("get_weather_forecast", 400),
    ("calculate", 350),
    ("convert_units", 200),
    ("write_note", 39),
    ("read_note", 10),
    ("list_notes", 1),
]
TEXT_TYPES = {"text", "character varying"}


def owner() -> object:
    return fixtures.user(OWNER)


def present() -> tuple[int, int]:
    """(conversations, exchanges) the data set has now."""
    account = owner()
    conversations = Conversation.objects.filter(owner_id=account.pk).count()
    exchanges = Exchange.objects.filter(turn__conversation__owner_id=account.pk).count()
    return conversations, exchanges


def _columns(table: str) -> list[tuple[str, str]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_name = %s ORDER BY ordinal_position",
            [table],
        )
        return [(name, kind) for name, kind in cursor.fetchall()]


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _varied(
    column: str, kind: str, template_values: list[object], *, tool_ok: Callable[[object], bool]
) -> str:
    """The SELECT expression for a copied column: the template's value, city and tool swapped."""
    source = f"t.{column}"
    if kind == "jsonb":
        source = f"t.{column}::text"
    elif kind not in TEXT_TYPES:
        return f"t.{column}"
    expression = f"replace({source}, {_literal(CITY)}, g.city)"
    if any(tool_ok(value) for value in template_values):
        expression = (
            f"CASE WHEN position({_literal(OTHER_TOOL)} IN {source}) > 0 THEN {expression} "
            f"ELSE replace({expression}, {_literal(TOOL)}, g.tool) END"
        )
    return f"({expression})::jsonb" if kind == "jsonb" else expression


def _names_the_tool(value: object) -> bool:
    text = str(value or "")
    return TOOL in text and OTHER_TOOL not in text


def _copy(table: str, template_table: str, overrides: dict[str, str], source: str) -> None:
    """INSERT INTO table SELECT (override or varied template column) FROM source."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {template_table}")
        names = [d.name for d in cursor.description]
        rows = cursor.fetchall()
    values = {name: [row[i] for row in rows] for i, name in enumerate(names)}
    columns = _columns(table)
    select = [
        overrides[name] if name in overrides else _varied(name, kind, values[name], tool_ok=_names_the_tool)
        for name, kind in columns
    ]
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({', '.join(name for name, _ in columns)}) SELECT {', '.join(select)} FROM {source}"
        )


def _template(log: Callable[[str], None]) -> Turn:
    """One real demo turn, recorded by the product, owned by the audit user."""
    profile = fixtures.demo_profile()
    server = fixtures.demo_server()
    account = owner()
    # Warm the pooled session, so the template's connect step is a plain tools/list.
    _, warm = fixtures.queued_turn(owner=account, profile=profile, server=server, question=QUESTION)
    turn_run(turn_id=warm.pk)
    Conversation.objects.filter(pk=warm.conversation_id).delete()
    _, turn = fixtures.queued_turn(owner=account, profile=profile, server=server, question=QUESTION)
    turn_run(turn_id=turn.pk)
    turn.refresh_from_db()
    steps = Step.objects.filter(turn=turn).count()
    exchanges = Exchange.objects.filter(turn=turn).count()
    log(f"P5 template turn: {turn.status}, {steps} steps, {exchanges} exchanges")
    if turn.status != Turn.Status.DONE or not exchanges:
        raise RuntimeError(f"the template turn ended {turn.status}: {turn.error}")
    return turn


def sizes_within(free_bytes: int, bytes_per_exchange: float, have: int) -> list[int]:
    """The points of ``SIZES`` the disk can hold while keeping ``KEEP_FREE_BYTES`` free.

    ``bytes_per_exchange`` is what one exchange costs on disk with its share of the other tables
    and indexes (measured on the data set as it is); ``have`` exchanges are already stored.
    """
    room = free_bytes - KEEP_FREE_BYTES
    return [
        size for size in SIZES if size <= have or (size - have) * bytes_per_exchange * GROWTH_MARGIN <= room
    ]


def disk_bytes() -> int:
    """Bytes the audit tables take now, with their indexes and TOAST."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(sum(pg_total_relation_size(relname::regclass)), 0) FROM pg_stat_user_tables "
            "WHERE relname = ANY(%s)",
            [[*TABLES, "conversations_conversation_servers"]],
        )
        return int(cursor.fetchone()[0])


def _template_turn() -> Turn | None:
    """The real turn the data set is copied from: the owner's first conversation's turn."""
    first = Conversation.objects.filter(owner_id=owner().pk).order_by("pk").first()
    return None if first is None else Turn.objects.filter(conversation=first).order_by("seq").first()


def _secondary_indexes(cursor: CursorWrapper) -> list[tuple[str, str]]:
    """(name, definition) of the audit tables' indexes that back no constraint."""
    cursor.execute(
        "SELECT i.relname, pg_get_indexdef(x.indexrelid) FROM pg_index x "
        "JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid "
        "WHERE t.relname = ANY(%s) AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = x.indexrelid)",
        [[*TABLES, "conversations_conversation_servers"]],
    )
    return [(name, definition) for name, definition in cursor.fetchall()]


def grow(target: int, log: Callable[[str], None]) -> dict[str, float]:
    """Grow the data set to at least ``target`` exchanges, adding conversations after the ones
    there (a data set without its template turn is replaced); returns counts and seconds taken.

    The new rows go in with set-based ``INSERT … SELECT``; when they outnumber the rows there,
    the tables' secondary indexes are dropped first and built again after (in the same
    transaction), which is much faster than maintaining them row by row.
    """
    started = time.monotonic()
    account = owner()
    template = _template_turn()
    if template is None or template.status != Turn.Status.DONE:
        Conversation.objects.filter(owner_id=account.pk).delete()
        template = _template(log)
    per_turn = Exchange.objects.filter(turn=template).count()
    steps_per_turn = Step.objects.filter(turn=template).count()
    # Conversation c (1-based, after the template) has turns 2c - 1 and 2c.
    have = Conversation.objects.filter(owner_id=account.pk).count() - 1
    wanted = -(-max(target - per_turn, 0) // (per_turn * TURNS_PER_CONVERSATION))
    if wanted <= have:
        return {"added_conversations": 0, "seconds": round(time.monotonic() - started, 1)}
    added = wanted - have
    turns = added * TURNS_PER_CONVERSATION
    cities = ", ".join(_literal(c) for c in CITIES)
    tool_case = (
        "CASE "
        + " ".join(
            f"WHEN c % 1000 < {sum(share for _, share in TOOLS[: i + 1])} THEN {_literal(name)}"
            for i, (name, _) in enumerate(TOOLS)
        )
        + " END"
    )
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL synchronous_commit TO off")
        cursor.execute("SET LOCAL work_mem TO '256MB'")
        cursor.execute("SET LOCAL maintenance_work_mem TO '1GB'")
        # The foreign keys hold by construction (every id is computed from the same base): their
        # per-row triggers are skipped.
        cursor.execute("SET LOCAL session_replication_role TO replica")
        dropped: list[tuple[str, str]] = []
        if added > have:
            dropped = _secondary_indexes(cursor)
            for name, _ in dropped:
                cursor.execute(f'DROP INDEX "{name}"')
        # c numbers conversations across the whole data set (city, tool and time depend on it,
        # so a grown set is the set generated at that size); i numbers the ones added now.
        cursor.execute(
            f"""CREATE TEMP TABLE bench_gen ON COMMIT DROP AS
            SELECT c, c - {have} AS i,
                   CASE WHEN c % 2000 = 7 THEN {_literal(RARE_CITY)} ELSE (ARRAY[{cities}])[1 + c % {len(CITIES)}] END AS city,
                   {tool_case} AS tool,
                   timestamptz '{EPOCH}' + c * interval '30 seconds' AS at
            FROM generate_series({have + 1}, {wanted}) AS c"""
        )
        cursor.execute("CREATE UNIQUE INDEX ON bench_gen (i)")
        for table in (*TABLES,):
            cursor.execute(f"SELECT coalesce(max(id), 0) FROM {table}")
            cursor.execute(
                f"CREATE TEMP TABLE base_{table} ON COMMIT DROP AS SELECT {cursor.fetchone()[0]}::bigint AS id"
            )
        cursor.execute(
            "CREATE TEMP TABLE tpl_conversation ON COMMIT DROP AS SELECT * FROM conversations_conversation WHERE id = %s",
            [template.conversation_id],
        )
        cursor.execute(
            "CREATE TEMP TABLE tpl_turn ON COMMIT DROP AS SELECT * FROM conversations_turn WHERE id = %s",
            [template.pk],
        )
        cursor.execute(
            "CREATE TEMP TABLE tpl_step ON COMMIT DROP AS SELECT row_number() OVER (ORDER BY seq) - 1 AS k, * "
            "FROM conversations_step WHERE turn_id = %s",
            [template.pk],
        )
        cursor.execute(
            "CREATE TEMP TABLE tpl_exchange ON COMMIT DROP AS SELECT row_number() OVER (ORDER BY e.seq, e.id) - 1 AS k, "
            "s.k AS step_k, e.* FROM conversations_exchange e LEFT JOIN tpl_step s ON s.id = e.step_id WHERE e.turn_id = %s",
            [template.pk],
        )
        cb = "(SELECT id FROM base_conversations_conversation)"
        tb = "(SELECT id FROM base_conversations_turn)"
        sb = "(SELECT id FROM base_conversations_step)"
        eb = "(SELECT id FROM base_conversations_exchange)"
        log(
            f"P5 adding {added:,} conversations, {turns:,} turns, {turns * steps_per_turn:,} steps, "
            f"{turns * per_turn:,} exchanges"
            + (f" ({len(dropped)} indexes dropped, rebuilt after)" if dropped else "")
            + " …"
        )
        _copy(
            "conversations_conversation",
            "tpl_conversation",
            {
                "id": f"{cb} + g.i",
                "public_id": "gen_random_uuid()",
                "owner_id": str(account.pk),
                "created_at": "g.at",
                "comparison_id": "NULL",
            },
            "bench_gen g CROSS JOIN tpl_conversation t",
        )
        cursor.execute(
            "INSERT INTO conversations_conversation_servers (conversation_id, mcpserver_id) "
            f"SELECT {cb} + g.i, s.mcpserver_id FROM bench_gen g CROSS JOIN conversations_conversation_servers s "
            "WHERE s.conversation_id = %s",
            [template.conversation_id],
        )
        # Added turn n (1-based) belongs to added conversation (n - 1) / 2 + 1, as its turn (n - 1) % 2 + 1.
        turn_source = (
            f"(SELECT n, (n - 1) / {TURNS_PER_CONVERSATION} + 1 AS c, (n - 1) % {TURNS_PER_CONVERSATION} + 1 AS seq "
            f"FROM generate_series(1, {turns}) AS n) AS x JOIN bench_gen g ON g.i = x.c CROSS JOIN tpl_turn t"
        )
        shift = "(g.at + (x.seq - 1) * interval '1 minute' - tt.created_at)"
        _copy(
            "conversations_turn",
            "tpl_turn",
            {
                "id": f"{tb} + x.n",
                "conversation_id": f"{cb} + x.c",
                "seq": "x.seq",
                "created_at": "g.at + (x.seq - 1) * interval '1 minute'",
                "started_at": "t.started_at + (g.at + (x.seq - 1) * interval '1 minute' - t.created_at)",
                "finished_at": "t.finished_at + (g.at + (x.seq - 1) * interval '1 minute' - t.created_at)",
                "updated_at": "t.updated_at + (g.at + (x.seq - 1) * interval '1 minute' - t.created_at)",
            },
            turn_source,
        )
        row_source = (
            "(SELECT n, (n - 1) / {per} + 1 AS turn_n, (n - 1) % {per} AS k FROM generate_series(1, {total}) AS n) AS x "
            f"JOIN bench_gen g ON g.i = (x.turn_n - 1) / {TURNS_PER_CONVERSATION} + 1 "
            "JOIN {tpl} t ON t.k = x.k CROSS JOIN tpl_turn tt"
        )
        step_shift = shift.replace("x.seq", f"((x.turn_n - 1) % {TURNS_PER_CONVERSATION} + 1)")
        _copy(
            "conversations_step",
            "tpl_step",
            {
                "id": f"{sb} + x.n",
                "turn_id": f"{tb} + x.turn_n",
                "parent_id": f"CASE WHEN t.parent_id IS NULL THEN NULL ELSE {sb} + (x.turn_n - 1) * {steps_per_turn} "
                f"+ (SELECT p.k FROM tpl_step p WHERE p.id = t.parent_id) + 1 END",
                "started_at": f"t.started_at + {step_shift}",
                "finished_at": f"t.finished_at + {step_shift}",
                "updated_at": f"t.updated_at + {step_shift}",
            },
            row_source.format(per=steps_per_turn, total=turns * steps_per_turn, tpl="tpl_step"),
        )
        _copy(
            "conversations_exchange",
            "tpl_exchange",
            {
                "id": f"{eb} + x.n",
                "turn_id": f"{tb} + x.turn_n",
                "conversation_id": f"{cb} + (x.turn_n - 1) / {TURNS_PER_CONVERSATION} + 1",
                # Every copied body is indexed whole: the template's spans are offsets into its
                # own bodies, which the city swap changes (a bigger index: the stricter case).
                "search_start": "NULL",
                "search_length": "NULL",
                "step_id": f"CASE WHEN t.step_k IS NULL THEN NULL ELSE {sb} + (x.turn_n - 1) * {steps_per_turn} + t.step_k + 1 END",
                "started_at": f"t.started_at + {step_shift}",
            },
            row_source.format(per=per_turn, total=turns * per_turn, tpl="tpl_exchange"),
        )
        inserted = time.monotonic()
        log(f"P5 rows added in {inserted - started:.0f} s")
        for _name, definition in dropped:
            cursor.execute(definition)
        if dropped:
            log(f"P5 indexes rebuilt in {time.monotonic() - inserted:.0f} s")
        for table in TABLES:
            cursor.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))"
            )
    vacuum()
    return {
        "added_conversations": added,
        "conversations": wanted + 1,
        "exchanges": (wanted * TURNS_PER_CONVERSATION + 1) * per_turn,
        "seconds": round(time.monotonic() - started, 1),
    }


TABLES = ("conversations_conversation", "conversations_turn", "conversations_step", "conversations_exchange")


def dead_rows() -> int:
    """Deleted row versions in the audit tables that no vacuum has cleared yet."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables WHERE relname = ANY(%s)",
            [list(TABLES)],
        )
        return int(cursor.fetchone()[0])


def vacuum() -> None:
    """``VACUUM ANALYZE`` the audit tables: the state autovacuum keeps a database in."""
    with connection.cursor() as cursor:
        for table in TABLES:
            cursor.execute(f"VACUUM ANALYZE {table}")
