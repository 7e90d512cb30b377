"""Prepared statements on PostgreSQL (``inspector.postgresql``'s ``prepared_cursor``): the reads
run on every turn and live row (the compiled reads, a turn's starting points, the redactor's
version) are parsed and planned once per connection and run prepared after that; nothing else is
prepared (Django's own statements bind on the client; the record writer's vary with what each
write holds); turned off in the settings, nothing is; and every prepared read is still seen by
Django's query log."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.db import connection
from django.db.models import Q
from django.test.utils import CaptureQueriesContext

from conversations.compiled_reads import CompiledRead
from conversations.connections import prepared_cursor
from conversations.models import Step, Turn
from conversations.record.store import Batch, record_store
from conversations.recording import TurnRecorder
from conversations.secret_sources import active_redactor
from tests.factories import StepFactory, TurnFactory

pytestmark = pytest.mark.django_db(transaction=True)


_steps_of_turn = CompiledRead(
    lambda turn_id: Step.objects.filter(Q(turn_id=turn_id) | Q(parent__turn_id=turn_id)).order_by("seq")
)


def _prepared(containing: str) -> list[dict[str, Any]]:
    """This session's prepared statements whose text holds ``containing``, with how often each
    was planned (a generic plan is made once and reused; a custom one per run)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements"
            " WHERE statement LIKE %s AND NOT from_sql",
            [f"%{containing}%"],
        )
        return [{"statement": s, "generic": g, "custom": c} for s, g, c in cursor.fetchall()]


def _forget_prepared() -> None:
    """Nothing prepared in this session yet: the pool may lend one that earlier tests prepared
    on. psycopg sees the command and forgets what it had prepared too."""
    connection.ensure_connection()
    raw = connection.connection
    # psycopg notices the command only while it keeps account of statements, and only the first
    # time it sees its text on a connection.
    raw.prepare_threshold = 2**31 - 1
    try:
        raw.execute(f"DEALLOCATE ALL -- {uuid.uuid4()}")
    finally:
        raw.prepare_threshold = None


@pytest.mark.postgres
def test_a_compiled_read_is_prepared_once_and_then_runs_prepared_with_new_ids() -> None:
    _forget_prepared()
    first, second = TurnFactory(), TurnFactory()
    ones = [StepFactory(turn=first, seq=seq) for seq in (1, 2)]
    other = StepFactory(turn=second, seq=1)

    assert [row.pk for row in _steps_of_turn(turn_id=first.pk)] == [row.pk for row in ones]
    assert [row.pk for row in _steps_of_turn(turn_id=second.pk)] == [other.pk]
    assert [row.pk for row in _steps_of_turn(turn_id=first.pk)] == [row.pk for row in ones]

    prepared = _prepared('FROM "conversations_step"')
    assert len(prepared) == 1, prepared
    assert '"turn_id" = $1' in prepared[0]["statement"]
    # Three runs of the one statement prepared: each planned for its values or from the generic plan.
    assert prepared[0]["generic"] + prepared[0]["custom"] == 3


@pytest.mark.postgres
def test_what_django_and_the_record_store_send_is_never_prepared() -> None:
    """Django's statements carry their values in their text: preparing them would keep one
    plan per value. The record store's updates go out pipelined (``executemany``), their text
    the same for every row; none is prepared, however often its text comes back."""
    _forget_prepared()
    turn = TurnFactory()
    step = StepFactory(turn=turn, seq=1)
    for _ in range(8):
        assert Turn.objects.filter(pk=turn.pk).exists()
    # What a turn's writer sends (here on this thread's connection, where it can be seen).
    for index in range(8):
        write = Batch()
        write.update(Step, step.pk, {"text": f"so far {index}"})
        record_store().write(write)
    step.refresh_from_db()
    assert step.text == "so far 7"

    assert _prepared("conversations_turn") == []
    assert _prepared("UPDATE") == []
    # Nor does psycopg keep account of them (their texts, big bodies among them): it does only
    # while a prepared statement runs.
    assert connection.connection.prepare_threshold is None


@pytest.mark.postgres
def test_a_turns_starting_points_and_the_redactors_version_are_prepared() -> None:
    _forget_prepared()
    for _ in range(2):
        TurnRecorder(TurnFactory(), redact=active_redactor())
    for containing in ("pg_get_serial_sequence", "conversations_secretschange"):
        prepared = _prepared(containing)
        assert len(prepared) == 1, (containing, prepared)
        assert prepared[0]["generic"] + prepared[0]["custom"] >= 2


@pytest.mark.postgres
def test_turned_off_nothing_is_prepared_and_the_reads_give_the_same_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``DATABASE_PREPARED_STATEMENTS=false``: for a connection pooler in front of PostgreSQL
    that cannot carry prepared statements."""
    _forget_prepared()
    turn = TurnFactory()
    ones = [StepFactory(turn=turn, seq=seq) for seq in (1, 2)]
    monkeypatch.setitem(connection.settings_dict["OPTIONS"], "prepared_statements", False)

    assert [row.pk for row in _steps_of_turn(turn_id=turn.pk)] == [row.pk for row in ones]
    TurnRecorder(turn, redact=active_redactor())
    assert _prepared("$1") == []


def test_every_prepared_read_is_in_djangos_query_log() -> None:
    """The prepared cursor is wrapped as Django wraps its own: query counts, the debug log and
    database error mapping see its statements (on SQLite it is Django's plain cursor)."""
    turn = TurnFactory()
    StepFactory(turn=turn, seq=1)
    with CaptureQueriesContext(connection) as queries:
        assert len(_steps_of_turn(turn_id=turn.pk)) == 1
        with prepared_cursor(connection) as cursor:
            cursor.execute("SELECT %s + 1", [41])
            assert cursor.fetchone() == (42,)
    assert len(queries) == 2
    assert 'FROM "conversations_step"' in queries[0]["sql"] and str(turn.pk) in queries[0]["sql"]
    assert queries[1]["sql"] == "SELECT 41 + 1"
