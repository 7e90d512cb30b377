"""Where a write into a turn goes on, read in one query: the turn's last step and exchange
numbers, the hash its next exchange chains on from, whether later turns follow, and on PostgreSQL
the ids its next rows will have.

Both writers of a turn read them before their first rows: the loop's recorder
(``recording.TurnRecorder``) once a turn, the proxy (``proxy.writing``) once a record. The query
is defined by the ORM (:func:`starting_query`: subqueries of the turn's row); only the ids are
SQL of their own (:func:`reserved_ids`): ``nextval`` of the table's sequence, the ids the database
would have given the rows, so the rows go out with their ids in the same write.

Building and compiling that query costs about 3 ms of CPU, more than the rest of a one-record
proxy write; the proxy makes one for every record (decision 0540). So each shape of it is
compiled once per database with a distinct stand-in value for each parameter, the compiled
statement kept with where each value goes, and later reads bind their own values to it: the
ORM's own SQL, run through Django's cursor. A test holds it equal to the queryset's answer.
"""

from __future__ import annotations

import threading
from typing import Any, NamedTuple

from django.db import connections
from django.db.models import Exists, Field, Model, OuterRef, QuerySet, Subquery
from django.db.models.expressions import RawSQL

from conversations.models import Exchange, Step, Turn

# What a read is asked for: the turn, its conversation and number, how many ids to reserve.
_VALUES = ("turn", "conversation", "seq", "step_ids", "exchange_ids")
# Stand-ins for those values while the query is compiled: numbers no real value takes, each
# found again among the compiled statement's parameters. Within every field's range: Django
# drops a comparison with a value its field cannot hold (a negative turn number) from the query.
_STAND_INS = {name: 2_147_483_000 + n for n, name in enumerate(_VALUES)}


# ``count`` fresh ids of a table from its own sequence (the ids the database would have given its
# next rows); its parameters are ``next_ids_params``.
NEXT_IDS = "SELECT nextval(pg_get_serial_sequence(%s, %s)) FROM generate_series(1, %s)"


def next_ids_params(model: type[Model], count: Any, *, alias: str = "default") -> list[Any]:
    """The parameters of ``NEXT_IDS`` for ``count`` ids of ``model``'s table."""
    return [connections[alias].ops.quote_name(model._meta.db_table), model._meta.pk.column, count]


def reserved_ids(model: type[Model], count: Any) -> RawSQL:
    """``count`` fresh ids of ``model``'s table (a list) as an expression: PostgreSQL only
    (psycopg reads its array as a list)."""
    return RawSQL(f"ARRAY({NEXT_IDS})", next_ids_params(model, count), output_field=Field())


class Shape(NamedTuple):
    """Which starting points a writer reads."""

    # The head of the chain within the turn and the turns before it (else the conversation's
    # latest exchange's hash).
    head_up_to_turn: bool
    # Whether later turns follow.
    later: bool
    # Reserve step and exchange ids (PostgreSQL).
    step_ids: bool
    exchange_ids: bool


def starting_query(shape: Shape, values: dict[str, Any]) -> QuerySet[Turn, Any]:
    """The starting points of turn ``values["turn"]`` as a queryset of one row: ``last_step``,
    ``last_exchange`` and ``head``, then as ``shape`` asks ``later``, ``step_ids`` and
    ``exchange_ids``."""
    chain = Exchange.objects.filter(turn__conversation_id=values["conversation"])
    if shape.head_up_to_turn:
        chain = chain.filter(turn__seq__lte=values["seq"])
    columns: dict[str, Any] = {
        "last_step": Subquery(Step.objects.filter(turn=OuterRef("pk")).order_by("-seq").values("seq")[:1]),
        "last_exchange": Subquery(
            Exchange.objects.filter(turn=OuterRef("pk")).order_by("-seq").values("seq")[:1]
        ),
        "head": Subquery(chain.order_by("-turn__seq", "-seq", "-id").values("hash")[:1]),
    }
    if shape.later:
        columns["later"] = Exists(
            Turn.objects.filter(conversation_id=values["conversation"], seq__gt=values["seq"])
        )
    if shape.step_ids:
        columns["step_ids"] = reserved_ids(Step, values["step_ids"])
    if shape.exchange_ids:
        columns["exchange_ids"] = reserved_ids(Exchange, values["exchange_ids"])
    return Turn.objects.filter(pk=values["turn"]).values(**columns)


class _Compiled(NamedTuple):
    sql: str
    # Each parameter of ``sql``: the name of a value, or (a constant) the value itself.
    slots: tuple[tuple[bool, Any], ...]


_compiled: dict[tuple[str, Shape], _Compiled] = {}
_lock = threading.Lock()


def _compile(alias: str, shape: Shape) -> _Compiled:
    key = (alias, shape)
    with _lock:
        found = _compiled.get(key)
    if found is not None:
        return found
    sql, params = starting_query(shape, _STAND_INS).using(alias).query.sql_with_params()
    names = {number: name for name, number in _STAND_INS.items()}
    slots = tuple((True, names[p]) if isinstance(p, int) and p in names else (False, p) for p in params)
    asked = {"turn", "conversation"}
    asked |= {"seq"} if shape.head_up_to_turn or shape.later else set()
    asked |= {name for name in ("step_ids", "exchange_ids") if getattr(shape, name)}
    if {value for named, value in slots if named} != asked:
        raise RuntimeError(f"the starting points' query binds {slots}, not each of {sorted(asked)}")
    compiled = _Compiled(sql, slots)
    with _lock:
        _compiled[key] = compiled
    return compiled


def starting_points(
    turn: Turn,
    *,
    head_up_to_turn: bool = False,
    later: bool = False,
    step_ids: int = 0,
    exchange_ids: int = 0,
) -> dict[str, Any]:
    """``last_step`` and ``last_exchange`` (0 where the turn has none), ``head`` (None: the
    chain is empty), and as asked ``later``, ``step_ids`` and ``exchange_ids`` (``step_ids``
    and ``exchange_ids`` ids reserved: PostgreSQL only, else empty lists); in one query."""
    alias = "default"
    reserve = connections[alias].vendor == "postgresql"
    shape = Shape(head_up_to_turn, later, reserve and step_ids > 0, reserve and exchange_ids > 0)
    values = {
        "turn": turn.pk,
        "conversation": turn.conversation_id,
        "seq": turn.seq,
        "step_ids": step_ids,
        "exchange_ids": exchange_ids,
    }
    compiled = _compile(alias, shape)
    with connections[alias].cursor() as cursor:
        cursor.execute(compiled.sql, [values[value] if named else value for named, value in compiled.slots])
        row = cursor.fetchone()
        names = [column[0] for column in cursor.description or ()]
    if row is None:
        raise Turn.DoesNotExist(f"turn {turn.pk} is gone")
    points = dict(zip(names, row, strict=True))
    points["last_step"] = points["last_step"] or 0
    points["last_exchange"] = points["last_exchange"] or 0
    points["later"] = bool(points.get("later", False))
    points["step_ids"] = [int(pk) for pk in points.get("step_ids") or ()]
    points["exchange_ids"] = [int(pk) for pk in points.get("exchange_ids") or ()]
    return points
