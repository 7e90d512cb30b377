"""PostgreSQL's record store: psycopg's own bulk paths instead of statement text per write.

New rows go in with ``COPY … FROM STDIN`` (``Cursor.copy``): no statement text grows with the
rows and no value is quoted into one; psycopg sends each value through its dumper. A row without
its id is given one from the table's sequence first (one query for the lot). Changed rows go
through ``executemany``, which psycopg runs in pipeline mode: one round trip for the lot, the
statement text the same for every row. Statements are composed with ``psycopg.sql`` (identifiers quoted
by psycopg), once per table and column set.

Values are what the ORM would send: each field's ``pre_save`` for a new row, then its
``get_db_prep_save`` (a custom field's preparation is applied, as ``bulk_create`` applies it).
The raw connection is Django's own (``connection.connection`` after ``ensure_connection``), in
Django's transaction (``transaction.atomic``), with its errors mapped to Django's
(``wrap_database_errors``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, cast

from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Field, Model
from psycopg import Cursor, sql

from conversations.record.store import Batch, Insert, Operation, Update


class PostgresStore:
    """``COPY`` for new rows, ``executemany`` (pipeline mode) for changes, in order, in one
    ``transaction.atomic``; committed asynchronously when the batch is ``relaxed``."""

    def __init__(self, using: str = DEFAULT_DB_ALIAS) -> None:
        self.using = using

    def write(self, batch: Batch) -> None:
        db = connections[self.using]
        if db.vendor != "postgresql":
            raise RuntimeError(f"the PostgreSQL record store on a {db.vendor} database")
        outermost = not db.in_atomic_block
        with transaction.atomic(using=self.using):
            db.ensure_connection()
            with db.wrap_database_errors, db.connection.cursor() as cursor:
                if batch.relaxed and outermost:
                    # Until this transaction's commit (the ``true``: local to it).
                    cursor.execute("SELECT set_config('synchronous_commit', 'off', true)")
                for run in _runs(batch.operations):
                    if isinstance(run[0], Insert):
                        for insert in run:
                            _insert(cursor, db, insert.rows)  # type: ignore[union-attr]
                    else:
                        _update(cursor, db, run)  # type: ignore[arg-type]
            for callback in batch.on_commit:
                transaction.on_commit(callback, using=self.using)


def _runs(operations: Sequence[Operation]) -> list[list[Operation]]:
    """The operations in runs that go out together, in order: each insert alone; consecutive
    updates of the same model and fields together (one ``executemany``)."""
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
    """``COPY`` the rows in; rows without ids are given theirs from the table's own sequence
    first (one query), as the database would have given them."""
    model = type(rows[0])
    if rows[0].pk is None:
        cursor.execute(
            "SELECT nextval(pg_get_serial_sequence(%s, %s)) FROM generate_series(1, %s)",
            [db.ops.quote_name(model._meta.db_table), model._meta.pk.column, len(rows)],
        )
        for row, (pk,) in zip(rows, cursor.fetchall(), strict=True):
            row.pk = pk
    statement, fields = _copy_statement(model)
    with cursor.copy(statement) as copy:
        for row in rows:
            copy.write_row([field.get_db_prep_save(field.pre_save(row, True), db) for field in fields])
    for row in rows:
        row._state.adding = False
        row._state.db = db.alias


@functools.cache
def _copy_statement(model: type[Model]) -> tuple[sql.Composed, _Fields]:
    """``COPY`` into the model's table, every concrete column, and its fields in that order."""
    fields = tuple(model._meta.concrete_fields)
    columns = sql.SQL(", ").join(sql.Identifier(str(field.column)) for field in fields)
    return sql.SQL("COPY {} ({}) FROM STDIN").format(sql.Identifier(model._meta.db_table), columns), fields


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
def _update_statement(model: type[Model], names: tuple[str, ...]) -> tuple[sql.Composed, _Fields]:
    fields = tuple(cast("Field[Any, Any]", model._meta.get_field(name)) for name in names)
    parts: list[sql.Composable] = [
        sql.SQL("{} = %s").format(sql.Identifier(str(field.column))) for field in fields
    ]
    assignments = sql.SQL(", ").join(parts)
    statement = sql.SQL("UPDATE {} SET {} WHERE {} = %s").format(
        sql.Identifier(model._meta.db_table), assignments, sql.Identifier(str(model._meta.pk.column))
    )
    return statement, fields
