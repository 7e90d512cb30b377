"""Reads whose SQL Django compiles once: a queryset written as usual, run with new ids.

Django builds a queryset's SQL anew every time one is run: each ``filter``, ``select_related``
and ``defer`` clones the query, and the compiler resolves every column, join and ordering into
text again. For a read run on every doorbell of a turn (the live row, a few hundred times a
turn on every watching page) that building took a third of the read's CPU. A
:class:`CompiledRead` takes a function that builds the queryset from ids, builds and compiles it
once per shape (how many ids each list holds), with stand-in ids, for the database the queryset
is routed to, and then runs that SQL with the real ids in their places. The rows go through
Django's own code: its model iterable makes the instances, fills ``select_related`` relations
and defers fields exactly as the queryset would; a ``values_list`` read's rows are converted by
the compiler as Django converts them. The queryset stays the readable definition; the tests
compare the two.

Only ids are bound: ints, lists of ints for ``__in``, and UUIDs (a public id), which a
database takes in a form of its own (PostgreSQL the UUID, SQLite its 32 hex digits): each is
bound in the form the compiled query gave its stand-in. Any other value the fields would
prepare (a date, JSON, a model) could be sent differently from how the queryset would send it.
The build must depend on its ids alone. A stand-in id that the built SQL does not carry as one of
its parameters, or carries changed, and a build that gives another query when made again (one
that read the clock, say), are errors when the read is first compiled, not wrong answers.
"""

from __future__ import annotations

import copy
import itertools
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from django.core.exceptions import EmptyResultSet
from django.db import connections
from django.db.models import Model, QuerySet
from django.db.models.query import FlatValuesListIterable, ModelIterable, ValuesListIterable
from django.db.models.sql.compiler import SQLCompiler
from django.db.models.sql.constants import MULTI

from conversations.connections import prepared_cursor

Row = TypeVar("Row")
Ids = int | uuid.UUID | Sequence[int]

# Stand-ins for the ids while a read is compiled: positive and inside a 32-bit integer column's
# range, as Django answers a lookup whose value its column could not hold with no rows at all.
_FIRST_STAND_IN = 2_147_000_000
# A list of more ids than this is read as the plain queryset (each length is a shape of its own);
# a read keeps at most this many shapes.
MOST_LISTED_IDS = 64
MOST_SHAPES = 128


class _Compiler:
    """Stands in for a queryset's ``Query`` where Django's iterable asks it for a compiler."""

    def __init__(self, compiler: SQLCompiler) -> None:
        self.compiler = compiler

    def get_compiler(
        self, using: str | None = None, connection: Any = None, elide_empty: bool = True
    ) -> SQLCompiler:
        return self.compiler


@dataclass(frozen=True)
class _Compiled:
    """One shape of a read: the compiler set up by compiling it, its SQL and parameters, and
    where each id goes (parameter index, the id's name, its index in a list or None, and for a
    UUID whether the database takes its hex digits)."""

    model: type[Model]
    alias: str
    kind: type  # the queryset's iterable: model instances, value tuples or single values
    compiler: SQLCompiler | None  # None: the read is empty for this shape (an empty ``__in``)
    sql: str
    params: tuple[Any, ...]
    places: tuple[tuple[int, str, int | None, bool], ...]

    def run(self, ids: dict[str, Ids]) -> list[Any]:
        if self.compiler is None:
            return []
        params = list(self.params)
        for index, name, item, hexadecimal in self.places:
            value = ids[name] if item is None else ids[name][item]  # type: ignore[index]
            params[index] = cast("uuid.UUID", value).hex if hexadecimal else value
        # A copy per run: the compiled one's state (its select, the related rows' layout) is only
        # read; the connection is the running thread's own.
        compiler = copy.copy(self.compiler)
        compiler.connection = connections[self.alias]
        sql, bound = self.sql, tuple(params)
        compiler.as_sql = lambda *args, **kwargs: (sql, bound)  # type: ignore[method-assign]
        compiler.execute_sql = lambda *args, **kwargs: _fetched(compiler, sql, bound)  # type: ignore[method-assign,assignment]
        if self.kind is ModelIterable:
            rows: QuerySet[Any] = QuerySet(model=self.model, query=_Compiler(compiler), using=self.alias)  # type: ignore[arg-type]
            return list(rows)
        values = compiler.results_iter(compiler.execute_sql(MULTI), tuple_expected=True)
        return [row[0] for row in values] if self.kind is FlatValuesListIterable else list(values)


def _fetched(compiler: SQLCompiler, sql: str, params: tuple[Any, ...]) -> list[list[tuple[Any, ...]]]:
    """The rows of a compiled read, as Django's ``execute_sql`` gives a read's rows (one list of
    them, each cut to the selected columns), read with a prepared statement where the database
    has them (``connections.prepared_cursor``): its text is the same on every run."""
    with prepared_cursor(compiler.connection) as cursor:
        cursor.execute(sql, params)
        rows: list[tuple[Any, ...]] = cursor.fetchall()
    if compiler.has_extra_select:
        rows = [row[: compiler.col_count] for row in rows]
    return [rows]


def _length(name: str, value: object) -> int | None:
    """None for one id, the count for a list of them."""
    if type(value) is int or type(value) is uuid.UUID:
        return None
    if isinstance(value, list | tuple) and all(type(item) is int for item in value):
        return len(value)
    raise TypeError(f"{name} must be an int id, a list of them or a UUID, not {type(value).__name__}")


class CompiledRead(Generic[Row]):
    """A read built by ``build`` (keyword ids → a queryset of model instances, or a
    ``values_list`` of fields, with no ``prefetch_related``: its reads would be built anew
    anyway), compiled once per shape."""

    def __init__(self, build: Callable[..., QuerySet[Any, Row]]) -> None:
        self._build = build
        self._shapes: dict[tuple[Any, ...], _Compiled] = {}
        self._compiling = threading.Lock()

    def __call__(self, **ids: Ids) -> list[Row]:
        """The rows the built queryset would give for these ids, in its order."""
        shape = tuple((name, _length(name, value)) for name, value in sorted(ids.items()))
        compiled = self._shapes.get(shape)
        if compiled is None:
            if any(length is not None and length > MOST_LISTED_IDS for _, length in shape):
                # A long list is rare and its shapes many: built as any queryset is.
                return list(self._build(**ids))
            with self._compiling:
                compiled = self._shapes.get(shape)  # compiled by another thread meanwhile?
                if compiled is None:
                    compiled = self._compile(ids)
                    if len(self._shapes) >= MOST_SHAPES:  # the oldest shape makes room
                        del self._shapes[next(iter(self._shapes))]
                    self._shapes[shape] = compiled
        return compiled.run(ids)

    def _compile(self, ids: dict[str, Ids]) -> _Compiled:
        numbers = itertools.count(_FIRST_STAND_IN)
        stand_ins: dict[str, Ids] = {}
        where: dict[int, tuple[str, int | None]] = {}
        # A UUID's stand-in, as the database may take it: the UUID itself or its hex digits.
        uuids: dict[uuid.UUID | str, tuple[str, bool]] = {}
        for name, value in ids.items():
            if isinstance(value, uuid.UUID):
                stand_ins[name] = stand_in = uuid.UUID(int=next(numbers))
                uuids[stand_in] = (name, False)
                uuids[stand_in.hex] = (name, True)
            elif isinstance(value, int):
                stand_ins[name] = number = next(numbers)
                where[number] = (name, None)
            else:
                stand_ins[name] = numbered = [next(numbers) for _ in value]
                where.update((number, (name, item)) for item, number in enumerate(numbered))
        queryset = self._build(**stand_ins)
        kind = queryset._iterable_class
        query = queryset.query
        # A values_list of fields, in the order it names them: no extra or annotated columns,
        # which Django's iterable would put in place by name.
        plain_values = (
            kind in (ValuesListIterable, FlatValuesListIterable)
            and not query.extra_select
            and not query.annotation_select
            and tuple(queryset._fields) == tuple(query.values_select)  # type: ignore[attr-defined]
        )
        if queryset._prefetch_related_lookups or not (kind is ModelIterable or plain_values):  # type: ignore[attr-defined]
            raise TypeError(
                "a compiled read gives model instances or a values_list of fields, and prefetches nothing"
            )
        alias = queryset.db
        compiler = query.get_compiler(using=alias)
        try:
            sql, params = compiler.as_sql()
        except EmptyResultSet:
            if any(isinstance(value, list | tuple) and not value for value in ids.values()):
                return _Compiled(queryset.model, alias, kind, None, "", (), ())  # an empty ``__in``
            raise ValueError(
                "the built query reads nothing for the stand-in ids: it cannot be compiled"
            ) from None
        # Built again, it must be the same query: one that reads the clock or anything else but
        # its ids would be frozen at its first build.
        if self._build(**stand_ins).query.get_compiler(using=alias).as_sql() != (sql, params):
            raise ValueError("the built query depends on more than its ids: it cannot be compiled")
        places: list[tuple[int, str, int | None, bool]] = []
        for index, param in enumerate(params):
            if type(param) is int and param in where:
                places.append((index, *where[param], False))
            elif type(param) in (uuid.UUID, str) and param in uuids:
                name, hexadecimal = uuids[param]
                places.append((index, name, None, hexadecimal))
        bound = {(name, item) for _, name, item, _ in places}
        missing = {where[number][0] for number in where if where[number] not in bound} | {
            name for name, _ in uuids.values() if (name, None) not in bound
        }
        if missing:
            raise ValueError(f"the built query does not bind {sorted(missing)} as given")
        return _Compiled(queryset.model, alias, kind, compiler, sql, tuple(params), tuple(places))
