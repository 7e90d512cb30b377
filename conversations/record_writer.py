"""The record's SQL writer: a batch of turn, step and exchange rows committed as raw SQL.

``rows_write`` is its one entry point (``conversations.recording`` calls it from its writer
thread; ``conversations.integrity`` writes a turn's seal, its conversation's anchor and the
audit event with it). On PostgreSQL a write is one data-modifying ``WITH`` statement with
server-side binding: one round trip, no statement text parsed or values quoted in Python (see
``_execute_as_one`` and ``_insert_sql`` for why). Values are prepared by the model fields as the
ORM would, except the plain ones a field sends unchanged (``_plain_types``).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, NamedTuple, TypeVar, cast

import psycopg
from django.conf import settings
from django.db import connection, connections, models, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Field, Model
from django.db.models.base import ModelState
from django.db.models.fields.related_descriptors import ForeignKeyDeferredAttribute
from django.db.models.query_utils import DeferredAttribute
from django.db.models.signals import post_init, pre_init

from conversations.models import AuditEvent, Conversation, Exchange, Step, Turn


def rows_write(
    *,
    turn_values: dict[int, dict[str, Any]],
    step_updates: dict[int, dict[str, Any]],
    steps: list[Step],
    unsaved_steps: list[Step],
    exchanges: list[Exchange],
    conversation_values: dict[int, dict[str, Any]] | None = None,
    events: Sequence[AuditEvent] = (),
) -> None:
    """Commit these rows in one transaction: each turn's and step's field values (by id), the new
    steps with their ids, the new steps without (saved one by one, after the rest), the new
    exchanges, each conversation's field values (by id) and new audit events.

    No two parts may touch the same row (the caller merges a step opened and updated in the same
    write into one insert). On PostgreSQL a write that fits is one statement (``_execute_as_one``);
    otherwise, and on SQLite, it is one statement per part in a transaction.

    The new rows are marked saved (``_state``), as ``save`` would.
    """
    statements = [
        *(_update_sql(Turn, pk, values) for pk, values in turn_values.items()),
        *(_update_sql(Step, pk, fields) for pk, fields in step_updates.items()),
        *(_update_sql(Conversation, pk, values) for pk, values in (conversation_values or {}).items()),
        *_insert_sql(Step, steps),
        *_insert_sql(Exchange, exchanges),
        *_insert_sql(AuditEvent, list(events)),
    ]
    if (
        connection.vendor == "postgresql"
        and not unsaved_steps
        and sum(len(params) for _, params in statements) <= _MOST_BOUND_VALUES
    ):
        _execute_as_one(statements)
        return
    with transaction.atomic(), connection.cursor() as cursor:
        for sql, params in statements:
            cursor.execute(sql, params)
        for step in unsaved_steps:
            step.save(force_insert=True)


_M = TypeVar("_M", bound=Model)


def new_row(model: type[_M], values: dict[str, Any]) -> _M:
    """An unsaved ``model`` row with these values (by attribute name: ``turn_id``, not ``turn``)
    and every other field's default: the row Django's constructor makes, made without it.

    The constructor sets each field through its descriptor, one call each, and sends its
    ``pre_init`` and ``post_init`` signals; for the record's rows, two or three a record, that was
    a third of preparing it. Where every field's descriptor only stores the value (``_direct``)
    and nothing listens to either signal, the values go into the row's ``__dict__`` as the
    descriptors would put them; otherwise the constructor makes the row, by field position.

    Raises:
        TypeError: a name that is not one of the model's fields' attribute names.
    """
    made = _construction(model)
    names = made.defaults
    if not values.keys() <= names.keys():
        raise TypeError(f"{model.__name__} has no field {sorted(values.keys() - names.keys())}")
    if pre_init.receivers or post_init.receivers or not _direct(model):
        return model(*[values[name] if name in values else default() for name, default in names.items()])
    row = model.__new__(model)
    stored = row.__dict__
    stored.update(made.constants)
    for name, default in made.made:
        if name not in values:
            stored[name] = default()
    stored.update(values)
    row._state = ModelState()
    return row


def row_copy(row: _M) -> _M:
    """A shallow copy of ``row``: what ``copy.copy`` gives (the same values, a state and a cache of
    related rows of its own), made without the round trip through pickling's protocol that
    ``copy.copy`` takes for a model (a third of a write's step handling)."""
    clone = type(row).__new__(type(row))
    clone.__dict__.update(row.__dict__)
    state = ModelState()
    state.__dict__.update(row._state.__dict__)
    if "fields_cache" in state.__dict__:
        state.fields_cache = dict(state.fields_cache)
    # As Django's own copy: managers cached on the original stay with it.
    state.__dict__.pop("related_managers_cache", None)
    clone._state = state
    return clone


class _Construction(NamedTuple):
    """How a new row of a model gets its defaults."""

    # Each concrete field's attribute name, in order, with the function giving its default.
    defaults: dict[str, Callable[[], Any]]
    # The defaults every row shares, by attribute name: a default that is not callable, which
    # Django's field hands out as the same object each time, or its None or empty string.
    constants: dict[str, Any]
    # The fields whose default is made afresh for each row (a callable: ``dict``, a function).
    made: tuple[tuple[str, Callable[[], Any]], ...]


@functools.cache
def _construction(model: type[Model]) -> _Construction:
    constants: dict[str, Any] = {}
    made: list[tuple[str, Callable[[], Any]]] = []
    for field in model._meta.concrete_fields:
        if (field.has_default() and callable(field.default)) or field.has_db_default():
            made.append((field.attname, field.get_default))
        else:
            # The same object each time (as the field hands it out), its None or "" without a
            # default; asked of the field, which may convert it (a foreign key's row to its id).
            constants[field.attname] = field.get_default()
    defaults = {field.attname: field.get_default for field in model._meta.concrete_fields}
    return _Construction(defaults=defaults, constants=constants, made=tuple(made))


@functools.cache
def _direct(model: type[Model]) -> bool:
    """Whether setting each concrete field of a new ``model`` row stores the value in the row's
    ``__dict__`` and nothing else: its descriptor is Django's plain one, with no ``__set__``, or a
    foreign key's, whose ``__set__`` also forgets a related row cached on it (a new row has none)."""
    return all(
        type(model.__dict__.get(field.attname)) in (DeferredAttribute, ForeignKeyDeferredAttribute)
        for field in model._meta.concrete_fields
    )


_Statement = tuple[str, Sequence[Any]]
# The most values one statement can bind on the server (the protocol counts them in 16 bits);
# a bigger write goes statement by statement in a transaction.
_MOST_BOUND_VALUES = 65535


def _execute_as_one(statements: list[_Statement]) -> None:
    """Run the statements as one PostgreSQL statement: each a data-modifying ``WITH`` query.

    One statement is one round trip and, outside a transaction, its own atomic transaction:
    all of it is written or none. Every part sees the same snapshot (so no two parts touch the
    same row; the caller merges them), and the foreign keys, deferred to the commit, see rows
    inserted by other parts. Outside a caller's transaction it commits asynchronously
    (``set_config(…, true)`` lasts until that commit).

    The values are bound on the server (a raw cursor, ``$n`` placeholders numbered here), so
    neither the statement nor the bodies in it are parsed or quoted in Python: with
    client-side binding, psycopg re-parses a long statement's text on every write (it caches
    short ones only) and quotes every value.
    """
    if not statements:
        return
    parts: list[str] = []
    placeholders = 0
    for index, (sql, _) in enumerate(statements):
        pieces = sql.split("%s")
        count = len(pieces) - 1
        numbered: list[str] = [""] * (2 * count + 1)
        numbered[0::2] = pieces
        numbered[1::2] = _marks(placeholders + count)[placeholders : placeholders + count]
        placeholders += count
        parts.append(f"w{index} AS ({''.join(numbered)})")
    last = (
        "SELECT 1" if connection.in_atomic_block else "SELECT set_config('synchronous_commit', 'off', true)"
    )
    params = [param for _, part in statements for param in part]
    connection.ensure_connection()
    with connection.wrap_database_errors, psycopg.RawCursor(connection.connection) as cursor:
        cursor.execute(f"WITH {', '.join(parts)} {last}", params)


# "$1", "$2", …: the placeholders numbered so far (as many as the biggest write has needed).
_MARKS: list[str] = []
_marks_lock = threading.Lock()


def _marks(count: int) -> list[str]:
    """At least ``count`` numbered placeholders, ``"$1"`` first (numbering each in a Python loop
    cost a write of 200 exchanges about 1 ms: it binds 5,000 values)."""
    if len(_MARKS) < count:
        with _marks_lock:  # only appended to, under the lock: a reader's slice is always right
            _MARKS.extend([f"${number}" for number in range(len(_MARKS) + 1, count + 1)])
    return _MARKS


def _update_sql(
    model: type[Turn] | type[Step] | type[Conversation], pk: int, values: dict[str, Any]
) -> _Statement:
    """``UPDATE`` of one row's fields, with the values prepared by the fields as the ORM would."""
    sql, fields = _update_template(model, tuple(values), connection.alias)
    db = connections[connection.alias]
    params = [
        _value(field, preparing, value, db)
        for value, (field, preparing) in zip(values.values(), fields, strict=True)
    ]
    params.append(pk)
    return sql, params


def _insert_sql(model: type[Step] | type[Exchange] | type[AuditEvent], rows: list[Any]) -> list[_Statement]:
    """One ``INSERT … VALUES`` of ``rows`` (all with their ids, or all without), if any.

    Not ``bulk_create``: it sends PostgreSQL a multi-row insert as ``UNNEST`` over one array per
    column, and psycopg's client-side binding quotes each array element in Python, one regex
    call per quote character — on request bodies full of JSON that cost milliseconds per write.
    The statement text is built once per shape.
    """
    if not rows:
        return []
    with_ids = rows[0].pk is not None
    prefix, row_sql, fields = _insert_template(model, with_ids, connection.alias)
    # The connection itself, not the ``connection`` proxy: the fields look it up per value.
    db = connections[connection.alias]
    params = _row_values(rows, fields, db)
    alias = db.alias  # once: each read of the ``connection`` proxy is a thread-local lookup
    for row in rows:
        row._state.adding = False
        row._state.db = alias
    return [(prefix + ", ".join([row_sql] * len(rows)), params)]


_Fields = tuple["Field[Any, Any]", ...]


class _Preparing(NamedTuple):
    """How a field's values are prepared for the database, short of calling the field: ``plain``,
    the value types it sends as they are; ``quick``, for other value types, a function giving
    what the field would give. Any other type goes through the field."""

    plain: frozenset[type]
    quick: dict[type, Callable[[Any], Any]]


def _row_values(rows: Sequence[Model], fields: _Fields, db: BaseDatabaseWrapper) -> list[Any]:
    """The ``fields``' values of new ``rows`` (all of one model), row after row, as an insert
    sends them. ``pre_save`` runs only for values the field prepares itself: a field that sets
    its own value on save has no shorter preparation (``_preparing``).

    One loop for all values, not a call for each: a write of 200 exchanges sends 5,000. Where
    the model's descriptors only store what is set (``_direct``), a value is read from the row's
    ``__dict__`` (what ``getattr`` would find there, without the attribute lookup's walk of the
    class); a deferred one, not there, still through ``getattr``.
    """
    # Each field's preparation looked up once per write, not once per value (a field's hash is
    # computed in Python: that lookup cost more than the value's check).
    kinds = [(field, field.attname, *_preparing(field, db.alias)) for field in fields]
    direct = bool(rows) and _direct(type(rows[0]))
    params: list[Any] = []
    append = params.append
    for row in rows:
        stored = row.__dict__ if direct else {}
        for field, name, plain, quick in kinds:
            value = stored[name] if name in stored else getattr(row, name)
            kind = type(value)
            if kind in plain:
                append(value)
                continue
            prepare = quick.get(kind)
            if prepare is not None:
                append(prepare(value))
            else:
                append(field.get_db_prep_save(field.pre_save(row, True), db))
    return params


def _value(field: Field[Any, Any], preparing: _Preparing, value: Any, db: BaseDatabaseWrapper) -> Any:
    """``value`` of ``field`` as an update sends it."""
    kind = type(value)
    if kind in preparing.plain:
        return value
    quick = preparing.quick.get(kind)
    return quick(value) if quick is not None else field.get_db_prep_save(value, db)


@functools.cache
def _preparing(field: Field[Any, Any], alias: str) -> _Preparing:
    """The shorter ways ``field`` prepares a value for the database ``alias``, where calling it
    for every value of every row cost more than the write.

    Sent as they are (the field's preparation is the identity): a str for a text column, an int
    for an integer or a key, a float for a float column, a bool, a None where the column allows
    NULL. On PostgreSQL also, by a function doing what the field's chain of calls ends in: an
    aware datetime for a date and time column (sent as it is; a naive one goes through the
    field, which warns and makes it aware), a dict or a list for a JSON column (the same JSON
    wrapper with the same encoder as the field makes, found by preparing an empty dict once).
    Anything else — an enum member, a date, a field that sets its own value on save — goes
    through the field."""
    if getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False):
        return _Preparing(frozenset(), {})
    base = field.target_field if field.is_relation else field  # type: ignore[attr-defined]
    plain: frozenset[type] = frozenset()
    if isinstance(base, models.CharField | models.TextField):
        plain = frozenset({str})
    elif isinstance(base, models.BooleanField):
        plain = frozenset({bool})
    elif isinstance(base, models.IntegerField):
        plain = frozenset({int})
    elif isinstance(base, models.FloatField):
        plain = frozenset({float})
    if plain and field.null:
        plain |= {type(None)}
    db = connections[alias]
    quick: dict[type, Callable[[Any], Any]] = {}
    if db.vendor == "postgresql":
        if isinstance(field, models.DateTimeField) and settings.USE_TZ:
            quick[datetime] = functools.partial(_aware, field, db)
        elif isinstance(field, models.JSONField):
            sample: dict[str, Any] = {}
            wrapped: object = field.get_db_prep_save(sample, db)
            dumps = getattr(wrapped, "dumps", None)
            if getattr(wrapped, "obj", None) is sample and callable(dumps):
                wrap = cast("Callable[..., Any]", type(wrapped))
                quick[dict] = quick[list] = functools.partial(wrap, dumps=dumps)
    return _Preparing(plain, quick)


def _aware(field: Field[Any, Any], db: BaseDatabaseWrapper, value: datetime) -> Any:
    # What PostgreSQL's preparation of an aware datetime gives: the value itself.
    return value if value.utcoffset() is not None else field.get_db_prep_save(value, db)


@functools.lru_cache(maxsize=512)
def _update_template(
    model: type[Model], names: tuple[str, ...], alias: str
) -> tuple[str, tuple[tuple[Field[Any, Any], _Preparing], ...]]:
    """The ``UPDATE`` of these fields, and each field with its ``_preparing``."""
    quote = connections[alias].ops.quote_name
    fields = tuple(cast("Field[Any, Any]", model._meta.get_field(name)) for name in names)
    assignments = ", ".join(f"{quote(str(field.column))} = %s" for field in fields)
    pk = quote(str(model._meta.pk.column))
    sql = f"UPDATE {quote(model._meta.db_table)} SET {assignments} WHERE {pk} = %s"
    return sql, tuple((field, _preparing(field, alias)) for field in fields)


@functools.lru_cache(maxsize=16)
def _insert_template(model: type[Model], with_ids: bool, alias: str) -> tuple[str, str, _Fields]:
    quote = connections[alias].ops.quote_name
    fields = tuple(f for f in model._meta.concrete_fields if with_ids or not f.primary_key)
    columns = ", ".join(quote(str(field.column)) for field in fields)
    row = "(" + ", ".join(["%s"] * len(fields)) + ")"
    return f"INSERT INTO {quote(model._meta.db_table)} ({columns}) VALUES ", row, fields
