"""PostgreSQL's record store: psycopg's own bulk paths instead of statement text per write.

New rows with their ids go in with ``COPY … FROM STDIN`` (``Cursor.copy``): no statement text
grows with the rows and no value is quoted into one; psycopg sends each value through its
dumper. New rows without ids (they need theirs back) and changed rows go through
``executemany``, which psycopg runs in pipeline mode: one round trip for the lot, the statement
text the same for every row. Statements are composed with ``psycopg.sql`` (identifiers quoted
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
            and last.values.keys() == operation.values.keys()
        ):
            runs[-1].append(operation)
        else:
            runs.append([operation])
    return runs


_Fields = tuple["Field[Any, Any]", ...]


def _insert(cursor: Cursor[Any], db: BaseDatabaseWrapper, rows: Sequence[Model]) -> None:
    model = type(rows[0])
    with_ids = rows[0].pk is not None
    statement, fields = _insert_statement(model, with_ids=with_ids)
    values = [[field.get_db_prep_save(field.pre_save(row, True), db) for field in fields] for row in rows]
    if with_ids:
        with cursor.copy(statement) as copy:
            for row_values in values:
                copy.write_row(row_values)
    else:
        cursor.executemany(statement, values, returning=True)
        for row in rows:
            found = cursor.fetchone()
            if found is None:
                raise RuntimeError(f"an insert into {model._meta.db_table} returned no id")
            row.pk = found[0]
            cursor.nextset()
    for row in rows:
        row._state.adding = False
        row._state.db = db.alias


@functools.lru_cache(maxsize=32)
def _insert_statement(model: type[Model], *, with_ids: bool) -> tuple[sql.Composed, _Fields]:
    """``COPY`` into the model's table (rows with ids), or an ``INSERT … RETURNING`` its id."""
    fields = tuple(field for field in model._meta.concrete_fields if with_ids or not field.primary_key)
    table = sql.Identifier(model._meta.db_table)
    columns = sql.SQL(", ").join(sql.Identifier(str(field.column)) for field in fields)
    if with_ids:
        return sql.SQL("COPY {} ({}) FROM STDIN").format(table, columns), fields
    statement = sql.SQL("INSERT INTO {} ({}) VALUES ({}) RETURNING {}").format(
        table,
        columns,
        sql.SQL(", ").join(sql.Placeholder() * len(fields)),
        sql.Identifier(str(model._meta.pk.column)),
    )
    return statement, fields


def _update(cursor: Cursor[Any], db: BaseDatabaseWrapper, updates: Sequence[Update]) -> None:
    """Updates of one model's same fields, one ``executemany``."""
    model = updates[0].model
    statement, fields = _update_statement(model, tuple(updates[0].values))
    pk = model._meta.pk
    cursor.executemany(
        statement,
        [
            [
                *(
                    field.get_db_prep_save(value, db)
                    for field, value in zip(fields, update.values.values(), strict=True)
                ),
                pk.get_db_prep_save(update.pk, db),
            ]
            for update in updates
        ],
    )


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
