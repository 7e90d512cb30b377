"""PostgreSQL's record store: psycopg's pipeline mode instead of statement text per write.

A write is one pipeline: the transaction's ``BEGIN``, each run of new rows of one model or
changes of one model's same fields as one ``executemany`` (the statement's text the same for
every row, each row's values bound on the server), and the ``COMMIT``, sent together and
synchronised once — one round trip, or two when new rows need their ids back (``RETURNING``,
read before the commit). Many new rows of one model (``COPY_FROM_ROWS``) go by ``COPY`` instead:
their ids taken from the table's sequence first, the values streamed with no statement per row.
``COPY`` cannot run in a pipeline, so such a batch takes a round trip per operation; the
recorder's usual writes are small and stay pipelined. Statements are composed with
``psycopg.sql`` (identifiers quoted by psycopg) and rendered to their bytes once per table and
column set: psycopg renders a composed statement again at every ``executemany``, which cost
more than binding the few rows a write holds.

The store's cursors are psycopg's own server-binding ``Cursor`` on Django's connection, not the
client-binding cursor Django's ``connection.cursor()`` gives (Django binds client-side unless
``OPTIONS["server_side_binding"]``): a statement's text is the same for every row, so each row's
values go out as parameters dumped by psycopg's C adapters, where a client-binding cursor quotes
each value into the statement's text in Python (a fifth to a third of a pipelined write's CPU,
decision 0510). Django disables prepared statements on its connections (``prepare_threshold``
None), and these cursors leave that as it is.

Values are what the ORM would send: each field's ``pre_save`` for a new row, then its
``get_db_prep_save`` (a custom field's preparation is applied, as ``bulk_create`` applies it).
The raw connection is Django's own (``connection.connection`` after ``ensure_connection``), its
errors mapped to Django's (``wrap_database_errors``). Outside a caller's transaction the
transaction is psycopg's (``Connection.transaction``, inside the pipeline); inside one it is a
savepoint of Django's (``transaction.atomic``), whose commit decides.

A fenced batch (``Batch.fences``) begins with one guard ``UPDATE`` of each fenced turn, in the
same pipeline: it keeps the turn's claim while the turn runs under the batch's claim and sets
it to -1 otherwise, which the table's check (``models.TURN_CLAIM_FENCE``) refuses — the
statement fails, and with it the whole transaction. The refusal comes back with the batch's
one synchronisation; the store raises ``FenceRefused``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, cast

from django.db import DEFAULT_DB_ALIAS, IntegrityError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Field, Model
from psycopg import Connection, Cursor, sql

from conversations.models import Turn
from conversations.record.starting import NEXT_IDS, next_ids_params
from conversations.record.store import (
    Batch,
    FenceRefused,
    Insert,
    Operation,
    Update,
    fence_violated,
    ids_taken_back_on_failure,
)


class PostgresStore:
    """Every operation an ``executemany`` in one pipeline, in order, in one transaction;
    committed asynchronously when the batch is ``relaxed`` (outside a caller's transaction)."""

    def __init__(self, using: str = DEFAULT_DB_ALIAS) -> None:
        self.using = using

    def write(self, batch: Batch) -> None:
        db = connections[self.using]
        if db.vendor != "postgresql":
            raise RuntimeError(f"the PostgreSQL record store on a {db.vendor} database")
        with ids_taken_back_on_failure(batch):
            try:
                self._write(db, batch)
            except IntegrityError as exc:
                if fence_violated(exc):
                    raise FenceRefused(sorted(batch.fences)) from exc
                raise

    def _write(self, db: BaseDatabaseWrapper, batch: Batch) -> None:
        if db.in_atomic_block:
            with transaction.atomic(using=self.using), db.wrap_database_errors:
                raw = db.connection
                with _pipeline(raw, batch), _cursor(raw) as cursor:
                    _guard(cursor, batch)
                    _operations(cursor, db, batch.operations)
            for callback in batch.on_commit:
                transaction.on_commit(callback, using=self.using)
            return
        db.ensure_connection()
        raw = db.connection
        with db.wrap_database_errors, _pipeline(raw, batch), raw.transaction(), _cursor(raw) as cursor:
            if batch.relaxed:
                # Until this transaction's commit (the ``true``: local to it).
                cursor.execute("SELECT set_config('synchronous_commit', 'off', true)")
            _guard(cursor, batch)
            _operations(cursor, db, batch.operations)
        for callback in batch.on_commit:
            callback()


# New rows of one model from this many on go in by ``COPY`` (the values sent as one stream, no
# statement per row), outside a pipeline: the batch then takes a round trip per operation.
COPY_FROM_ROWS = 64


def _copied(insert: Operation) -> bool:
    return isinstance(insert, Insert) and len(insert.rows) >= COPY_FROM_ROWS


def _cursor(raw: Connection[Any]) -> Cursor[Any]:
    """A server-binding cursor on Django's connection (see the module's docstring)."""
    return Cursor(raw)


def _pipeline(raw: Connection[Any], batch: Batch) -> AbstractContextManager[Any]:
    """The batch's pipeline, unless one of its inserts goes by ``COPY`` (which none can run in)."""
    return nullcontext() if any(_copied(operation) for operation in batch.operations) else raw.pipeline()


def _guard(cursor: Cursor[Any], batch: Batch) -> None:
    """The fences' guards, in turn id order (two writers lock turns in the same order)."""
    if batch.fences:
        running = str(Turn.Status.RUNNING)
        cursor.executemany(
            _guard_statement(), [[claim, running, turn_id] for turn_id, claim in sorted(batch.fences.items())]
        )


@functools.cache
def _guard_statement() -> bytes:
    """Keep the turn's claim if it still runs under the given one; else -1, which the table's
    check refuses (the statement, and the transaction, fail)."""
    claim = sql.Identifier(str(Turn._meta.get_field("claim").column))
    status = sql.Identifier(str(Turn._meta.get_field("status").column))
    return _rendered(
        sql.SQL("UPDATE {} SET {} = CASE WHEN {} = %s AND {} = %s THEN {} ELSE -1 END WHERE {} = %s").format(
            sql.Identifier(Turn._meta.db_table),
            claim,
            claim,
            status,
            claim,
            sql.Identifier(str(Turn._meta.pk.column)),
        )
    )


def _rendered(statement: sql.Composable) -> bytes:
    """The statement's text, as psycopg renders it for a connection (UTF-8, every connection
    Django opens): identifiers quoted as ``PQescapeIdentifier`` quotes them."""
    return statement.as_bytes(None)


def _operations(cursor: Cursor[Any], db: BaseDatabaseWrapper, operations: Sequence[Operation]) -> None:
    for run in _runs(operations):
        if isinstance(run[0], Insert):
            _insert(cursor, db, run[0].rows)
        else:
            _update(cursor, db, run)  # type: ignore[arg-type]


def _runs(operations: Sequence[Operation]) -> list[list[Operation]]:
    """The operations in runs that go out together, in order: each insert alone; consecutive
    updates of the same model and fields (named in the same order) together."""
    runs: list[list[Operation]] = []
    for operation in operations:
        last = runs[-1][-1] if runs else None
        if (
            isinstance(operation, Update)
            and isinstance(last, Update)
            and last.model is operation.model
            and tuple(last.values) == tuple(operation.values)
        ):
            runs[-1].append(operation)
        else:
            runs.append([operation])
    return runs


_Fields = tuple["Field[Any, Any]", ...]


def _insert(cursor: Cursor[Any], db: BaseDatabaseWrapper, rows: Sequence[Model]) -> None:
    """An ``INSERT`` per row, pipelined, rows without ids getting theirs back (``RETURNING``);
    or, for many rows, ids from the table's sequence (one query) and a ``COPY``."""
    model = type(rows[0])
    copied = _copied(Insert(rows))
    if copied and rows[0].pk is None:
        cursor.execute(NEXT_IDS, next_ids_params(model, len(rows), alias=db.alias))
        for row, (pk,) in zip(rows, cursor.fetchall(), strict=True):
            row.pk = pk
    with_ids = rows[0].pk is not None
    statement, fields = _insert_statement(model, with_ids=with_ids, copy=copied)
    if copied:
        # Each row prepared as it goes out: psycopg sends the stream a buffer at a time, so the
        # server stores the first rows while the next ones are prepared.
        with cursor.copy(statement) as copy:
            for row in rows:
                copy.write_row(_prepared(row, fields, db))
        _saved(rows, db)
        return
    values = [_prepared(row, fields, db) for row in rows]
    if with_ids:
        cursor.executemany(statement, values)
    else:
        # A cursor of its own: in a pipeline, a cursor's results include those of the statements
        # it sent before, not yet read.
        with _cursor(cursor.connection) as returning:
            returning.executemany(statement, values, returning=True)
            for row in rows:
                found = returning.fetchone()
                if found is None:
                    raise RuntimeError(f"an insert into {model._meta.db_table} returned no id")
                row.pk = found[0]
                returning.nextset()
    _saved(rows, db)


def _prepared(row: Model, fields: _Fields, db: BaseDatabaseWrapper) -> list[Any]:
    """A new row's values as Django's own insert prepares them: each field's ``pre_save`` (as
    for a row being added), then its ``get_db_prep_save``."""
    return [field.get_db_prep_save(field.pre_save(row, True), db) for field in fields]


def _saved(rows: Sequence[Model], db: BaseDatabaseWrapper) -> None:
    for row in rows:
        row._state.adding = False
        row._state.db = db.alias


@functools.lru_cache(maxsize=32)
def _insert_statement(model: type[Model], *, with_ids: bool, copy: bool) -> tuple[bytes, _Fields]:
    """The ``COPY`` of the model's rows, or the ``INSERT`` of one (with its id, or returning the
    id it is given)."""
    fields = tuple(field for field in model._meta.concrete_fields if with_ids or not field.primary_key)
    table = sql.Identifier(model._meta.db_table)
    columns = sql.SQL(", ").join(sql.Identifier(str(field.column)) for field in fields)
    if copy:
        return _rendered(sql.SQL("COPY {} ({}) FROM STDIN").format(table, columns)), fields
    statement = sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
        table, columns, sql.SQL(", ").join(sql.Placeholder() * len(fields))
    )
    if not with_ids:
        statement += sql.SQL(" RETURNING {}").format(sql.Identifier(str(model._meta.pk.column)))
    return _rendered(statement), fields


def _update(cursor: Cursor[Any], db: BaseDatabaseWrapper, updates: Sequence[Update]) -> None:
    """Updates of one model's same fields, one ``executemany``."""
    model = updates[0].model
    names = tuple(updates[0].values)
    statement, fields = _update_statement(model, names)
    pk = model._meta.pk
    params = []
    for update in updates:
        values = update.values
        row = [field.get_db_prep_save(values[name], db) for name, field in zip(names, fields, strict=True)]
        row.append(pk.get_db_prep_save(update.pk, db))
        params.append(row)
    cursor.executemany(statement, params)


@functools.lru_cache(maxsize=256)
def _update_statement(model: type[Model], names: tuple[str, ...]) -> tuple[bytes, _Fields]:
    fields = tuple(cast("Field[Any, Any]", model._meta.get_field(name)) for name in names)
    parts: list[sql.Composable] = [
        sql.SQL("{} = %s").format(sql.Identifier(str(field.column))) for field in fields
    ]
    assignments = sql.SQL(", ").join(parts)
    statement = sql.SQL("UPDATE {} SET {} WHERE {} = %s").format(
        sql.Identifier(model._meta.db_table), assignments, sql.Identifier(str(model._meta.pk.column))
    )
    return _rendered(statement), fields
