"""One record store: the interface every write of the record's rows goes through.

A ``Batch`` is an ordered list of operations on the record's tables: new rows (``Insert``) and
changed fields of existing rows (``Update``). A ``RecordStore`` writes a whole batch in one
transaction, in order, or nothing of it. Two implementations hold the same contract
(``tests/conversations/record/test_store.py``):

- ``conversations.record.orm.OrmStore`` — the readable reference: ``bulk_create`` and
  ``QuerySet.update`` in ``transaction.atomic``. SQLite uses it.
- ``conversations.record.postgres.PostgresStore`` — PostgreSQL's fast path: psycopg's pipeline mode
  for new rows and ``executemany`` (pipeline mode) for changed ones, every value still prepared
  by its model field as the ORM prepares it.

``record_store()`` picks one by the database's vendor; ``settings.RECORD_STORE = "orm"`` forces
the reference on PostgreSQL too.

Fencing: a batch a turn's runner writes carries the claim the runner holds (``Batch.fence``,
the token ``lifecycle.turn_claim`` set). Its transaction begins with one guard statement per
fenced turn that the database itself decides: it holds the turn's row (locked until the commit,
so another process's end of the turn waits for it, and it for that end) while the turn is still
running under that claim, and refuses the whole batch otherwise — the turn was interrupted,
cancelled or claimed again. The store then raises ``FenceRefused``; nothing of the batch is
written. The guard costs no round trip of its own: it goes out with the batch's statements
(docs/decisions/0140-fencing-a-turns-writes.md).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Model

from conversations.models import TURN_CLAIM_FENCE


@dataclass(frozen=True)
class Insert:
    """New rows of one model, all with their primary key set or all without (a row without one
    has it set once written)."""

    rows: Sequence[Model]

    def __post_init__(self) -> None:
        if len({type(row) for row in self.rows}) > 1:
            raise TypeError("an Insert holds rows of one model")
        if len({row.pk is None for row in self.rows}) > 1:
            raise TypeError("an Insert holds rows all with their ids or all without")


@dataclass(frozen=True)
class Update:
    """New values (by attribute name: ``turn_id``, not ``turn``) of one existing row's fields.
    A row that does not exist is not an error: nothing is changed."""

    model: type[Model]
    pk: Any
    values: Mapping[str, Any]


Operation = Insert | Update

M = TypeVar("M", bound=Model)


def model_row(model: type[M], values: Mapping[str, Any]) -> M:
    """A new, unsaved row of ``model``: what ``model(**values)`` makes, made by the model's
    constructor from positional values (every concrete field in the model's own order, as
    ``Model.from_db`` calls it), which skips the keyword form's lookup, ``pop`` and missing-key
    exception per field: about half the cost for the record's rows, made by the thousand.

    ``values`` by attribute name (``turn_id``, not ``turn``); a field not in it gets its default
    (``Field.get_default``), as the keyword form gives it.

    Raises:
        TypeError: a name that is not a concrete field's attribute name.
    """
    fields = _concrete_fields(model)
    if not values.keys() <= fields.keys():
        unknown = ", ".join(sorted(set(values) - set(fields)))
        raise TypeError(f"{model.__name__} has no field {unknown}")
    return model(*[values[name] if name in values else field.get_default() for name, field in fields.items()])


@functools.cache
def _concrete_fields(model: type[Model]) -> dict[str, Any]:
    """The model's concrete fields by attribute name, in the order its constructor takes them."""
    return {str(field.attname): field for field in model._meta.concrete_fields}


class FenceRefused(Exception):
    """The database refused a batch: a turn it writes for is no longer running under the claim
    the batch carries. Nothing of the batch was written. ``turns``: the fenced turns of the
    batch (the refused one among them)."""

    def __init__(self, turns: Sequence[int]) -> None:
        self.turns = tuple(turns)
        names = ", ".join(str(pk) for pk in self.turns)
        super().__init__(f"the database refused a write for turn {names}: its claim no longer holds")


def fence_violated(error: BaseException | None) -> bool:
    """Whether ``error`` (a database error, or one that caused it) is the claim check's refusal:
    a violation of the constraint ``TURN_CLAIM_FENCE``, as the driver names it."""
    while error is not None:
        diag = getattr(error, "diag", None)
        if getattr(diag, "constraint_name", None) == TURN_CLAIM_FENCE:
            return True
        error = error.__cause__
    return False


@dataclass
class Batch:
    """What one write commits, in this order.

    ``relaxed``: the commit need not wait for the disk (PostgreSQL's asynchronous commit, for
    the recorder's steps; the turn's final, ordinary commit makes them durable). Ignored inside
    a caller's transaction, whose commit decides. ``on_commit``: called once the batch is
    committed — after the caller's transaction, when there is one — and never when it is not.
    """

    operations: list[Operation] = field(default_factory=list)
    relaxed: bool = False
    on_commit: list[Callable[[], None]] = field(default_factory=list)
    # Turn id -> the claim its rows are written under (see the module's docstring).
    fences: dict[int, int] = field(default_factory=dict)

    def fence(self, *, turn_id: int, claim: int) -> None:
        """Write this batch only while ``turn_id`` is running under ``claim``."""
        self.fences[turn_id] = claim

    def insert(self, rows: Sequence[Model]) -> None:
        if rows:
            self.operations.append(Insert(rows))

    def update(self, model: type[Model], pk: Any, values: Mapping[str, Any]) -> None:
        if values:
            self.operations.append(Update(model, pk, values))

    def __bool__(self) -> bool:
        return bool(self.operations)


@contextmanager
def ids_taken_back_on_failure(batch: Batch) -> Iterator[None]:
    """A store's write: if it fails, the new rows that came without ids lose those it gave them
    (its inserts were rolled back), so the same rows can be written again (the writer retries a
    failed write's batches one by one)."""
    fresh = [row for op in batch.operations if isinstance(op, Insert) for row in op.rows if row.pk is None]
    try:
        yield
    except BaseException:
        for row in fresh:
            row.pk = None
            row._state.adding = True
        raise


class RecordStore(Protocol):
    """Writes batches of the record's rows."""

    def write(self, batch: Batch) -> None:
        """Commit ``batch`` in one transaction (a savepoint inside a caller's), in order.

        New rows are marked saved and given their ids; each value is prepared by its model
        field (``get_db_prep_save``) as the ORM prepares it. On any error nothing of the batch
        is written, new rows keep no id it gave them, and the error is raised;
        ``batch.on_commit`` is called only after a commit.

        Raises:
            FenceRefused: a turn of ``batch.fences`` is no longer running under its claim (the
                database's own guard statement refused the batch).
        """


def record_store(using: str = DEFAULT_DB_ALIAS) -> RecordStore:
    """The store for the database ``using``: PostgreSQL's fast path there, unless
    ``settings.RECORD_STORE`` is ``"orm"``; the ORM store everywhere else."""
    from conversations.record.orm import OrmStore
    from conversations.record.postgres import PostgresStore

    if connections[using].vendor == "postgresql" and getattr(settings, "RECORD_STORE", "auto") != "orm":
        return PostgresStore(using)
    return OrmStore(using)
