"""One conversation by its public id, one row of it by its id with its exchanges, and one turn
by its id, each read in one SQL statement written from the models' fields: the reads every page,
question and socket of a conversation starts with (``access.conversation_get``) and every
doorbell of a live page makes (``rows.step_row``, ``rows.turn_get``), before P2's first row.

The ORM builds a queryset's SQL anew on every read (the row's joins, the columns it leaves out,
its two counted subqueries, the exchanges' prefetch), and that building cost more than the
queries themselves (decision 0570). Here each statement is written once per database vendor from
the models' ``_meta`` fields, run on a cursor, and its values made into models through
``Model.from_db`` after each field's converters (the backend's, then the field's
``from_db_value``): Django's public interfaces for raw SQL and model loading. They read what
``access.conversation_get``'s queryset, ``rows._rows()``, ``rows._step_exchanges()`` and
``rows.conversation_turns`` read, and
tests/conversations/test_lone_reads.py holds each equal to its queryset, field by field and as
rendered."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, cast
from uuid import UUID

from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import Field, Model

from conversations.models import Conversation, Exchange, ModelProfile, ProxySession, Step, TraceDelivery, Turn

Converter = Callable[[Any, Any, Any], Any]

# What a row shows of the server a step or an exchange names, and of a step's turn (a model
# call's row shows the turn's tool_choice, a tool's row its tools, a connect row where its pooled
# session was opened: ``inspector.handshakes``; teaching notes ask its status). The rest of them
# is left unread: a row read selects and converts a third of the columns it did (P2, every
# doorbell builds these queries), and a finished turn's message history, seal digests, tool
# counts and error are not decoded for every row. A field left out is still read if something
# asks it, one query for that row; tests/inspector/test_fragments_queries.py holds a row's render
# (teaching on and off, of each kind) to its queries.
SERVER_SHOWN = frozenset({"id", "name"})
TURN_SHOWN = frozenset(
    {"id", "conversation", "seq", "asked_by", "status", "tool_choice", "tool_choice_name", "tools", "runner"}
)


@dataclass(frozen=True)
class _Part:
    """One model's columns in a statement, in order, with what converts each value read."""

    model: type[Model]
    attnames: list[str]
    converters: list[tuple[int, Any, list[Converter]]]  # (position, column, converters), where any

    def made(self, values: Sequence[Any]) -> Model:
        converted = list(values)
        for position, column, converters in self.converters:
            for convert in converters:
                converted[position] = convert(converted[position], column, connection)
        return self.model.from_db(connection.alias, self.attnames, converted)


def _part(model: type[Model], shown: frozenset[str] | None = None) -> tuple[_Part, list[Field[Any, Any]]]:
    """``model``'s concrete fields (only those named in ``shown``, if given), and the part that
    makes a model of their values. The converters are the ones the ORM applies to a value read
    (``connection.ops.get_db_converters`` and ``Field.get_db_converters``); they depend on the
    backend and the settings only, so they are taken once per vendor."""
    fields: list[Field[Any, Any]] = [
        field for field in model._meta.concrete_fields if shown is None or field.name in shown
    ]
    table = model._meta.db_table
    converters = []
    for position, field in enumerate(fields):
        column = field.get_col(table)
        found = [*connection.ops.get_db_converters(column), *field.get_db_converters(connection)]
        if found:
            converters.append((position, column, found))
    return _Part(model, [field.attname for field in fields], converters), fields


# What a page leaves unread of a turn: its whole message history and its seal's digests.
TURN_UNREAD = ("transcript", "seal_steps")
# A turn's fields as a page reads them: all the others.
TURN_READ = tuple(field.name for field in Turn._meta.concrete_fields if field.name not in TURN_UNREAD)
# The attribute a turn read here carries: its trace delivery, or None for none (a reverse
# one-to-one relation keeps no "none" but through ``select_related``).
TRACE_DELIVERY_READ = "trace_delivery_read"


@dataclass(frozen=True)
class _Statements:
    row: str
    exchanges: str
    step: _Part
    turn: _Part
    server: _Part
    exchange: _Part
    exchange_server: _Part
    lone_turn: str
    turn_whole: _Part  # a turn as ``conversation_turns`` reads it
    delivery: _Part
    conversation: str
    conversation_with_owner: str
    conversation_part: _Part
    profile: _Part
    owner: _Part


@cache
def _statements(vendor: str) -> _Statements:
    """The statements for ``vendor`` (quoting is the backend's), and the parts they select."""
    server_model = Step._meta.get_field("server").related_model
    quote = connection.ops.quote_name
    step, step_fields = _part(Step)
    turn, turn_fields = _part(Turn, TURN_SHOWN)
    server, server_fields = _part(server_model, SERVER_SHOWN)
    exchange, exchange_fields = _part(Exchange)
    turn_whole, turn_whole_fields = _part(Turn, frozenset(TURN_READ))
    delivery, delivery_fields = _part(TraceDelivery)
    conversation_part, conversation_fields = _part(Conversation)
    profile, profile_fields = _part(ModelProfile)
    owner, owner_fields = _part(get_user_model())

    def columns(alias: str, fields: list[Field[Any, Any]]) -> str:
        return ", ".join(f"{alias}.{quote(cast(str, field.column))}" for field in fields)

    def table(model: type[Model]) -> str:
        return quote(model._meta.db_table)

    row = (
        f"SELECT {columns('s', step_fields)}, "
        f"COALESCE((SELECT COUNT(*) FROM {table(Step)} c WHERE c.{quote('parent_id')} = s.{quote('id')}), 0), "
        f"EXISTS(SELECT 1 FROM {table(Exchange)} e WHERE e.{quote('step_id')} = s.{quote('id')}), "
        f"{columns('t', turn_fields)}, {columns('v', server_fields)} "
        f"FROM {table(Step)} s INNER JOIN {table(Turn)} t ON t.{quote('id')} = s.{quote('turn_id')} "
        f"LEFT OUTER JOIN {table(server_model)} v ON v.{quote('id')} = s.{quote('server_id')} "
        f"WHERE s.{quote('id')} = %s AND s.{quote('parent_id')} IS NULL "
        f"AND t.{quote('conversation_id')} = %s"
    )
    exchanges = (
        f"SELECT {columns('e', exchange_fields)}, {columns('v', server_fields)} "
        f"FROM {table(Exchange)} e "
        f"LEFT OUTER JOIN {table(server_model)} v ON v.{quote('id')} = e.{quote('server_id')} "
        f"WHERE e.{quote('step_id')} = %s ORDER BY e.{quote('seq')} ASC, e.{quote('id')} ASC LIMIT %s"
    )
    lone_turn = (
        f"SELECT {columns('t', turn_whole_fields)}, {columns('d', delivery_fields)} "
        f"FROM {table(Turn)} t "
        f"LEFT OUTER JOIN {table(TraceDelivery)} d ON d.{quote('turn_id')} = t.{quote('id')} "
        f"WHERE t.{quote('id')} = %s AND t.{quote('conversation_id')} = %s"
    )
    profiled = (
        f"FROM {table(Conversation)} c "
        f"INNER JOIN {table(ModelProfile)} p ON p.{quote('id')} = c.{quote('model_profile_id')}"
    )
    by_public_id = f"WHERE c.{quote('public_id')} = %s"
    # Whether a proxy recorded it (``Conversation.recorded_by_proxy``: a question's POST asks).
    proxied = (
        f"EXISTS(SELECT 1 FROM {table(ProxySession)} x WHERE x.{quote('conversation_id')} = c.{quote('id')})"
    )
    conversation = (
        f"SELECT {proxied}, {columns('c', conversation_fields)}, {columns('p', profile_fields)} "
        f"{profiled} {by_public_id}"
    )
    conversation_with_owner = (
        f"SELECT {proxied}, {columns('c', conversation_fields)}, {columns('p', profile_fields)}, "
        f"{columns('u', owner_fields)} {profiled} "
        f"INNER JOIN {table(get_user_model())} u ON u.{quote('id')} = c.{quote('owner_id')} {by_public_id}"
    )
    return _Statements(
        row,
        exchanges,
        step,
        turn,
        server,
        exchange,
        server,
        lone_turn,
        turn_whole,
        delivery,
        conversation,
        conversation_with_owner,
        conversation_part,
        profile,
        owner,
    )


def _one(sql: str, params: list[Any]) -> tuple[Any, ...] | None:
    """The first row ``sql`` answers with ``params`` (None: none)."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        found: tuple[Any, ...] | None = cursor.fetchone()
    return found


def _an_id(model: type[Model], value: int) -> bool:
    """Whether ``value`` lies in the range of ``model``'s primary key column. An id past it names
    no row (the ORM answers it with none) and SQLite refuses to bind it, so these reads answer
    none without asking (a turn's page takes its id from the URL)."""
    low, high = connection.ops.integer_field_range(model._meta.pk.get_internal_type())
    return (low is None or value >= low) and (high is None or value <= high)


def _joined(part: _Part, values: Sequence[Any]) -> Model | None:
    """The model of a left join's values (a server, a trace delivery): None where the join found
    none (its id, the first column, is null)."""
    return None if values[0] is None else part.made(values)


def lone_row(*, conversation_id: int, step_id: int, calls_count: str, has_exchanges: str) -> Step | None:
    """The top-level step ``step_id`` of the conversation, with its turn and server (what a row
    shows of them, as ``rows._rows()`` reads them) and its two counts set as the attributes
    named ``calls_count`` and ``has_exchanges``; None if it is no row of that conversation."""
    if not _an_id(Step, step_id):
        return None
    statements = _statements(connection.vendor)
    found = _one(statements.row, [step_id, conversation_id])
    if found is None:
        return None
    counted = len(statements.step.attnames)
    turned = counted + 2 + len(statements.turn.attnames)
    step = cast(Step, statements.step.made(found[:counted]))
    setattr(step, calls_count, int(found[counted]))
    setattr(step, has_exchanges, bool(found[counted + 1]))
    step.turn = cast(Turn, statements.turn.made(found[counted + 2 : turned]))
    step.server = _joined(statements.server, found[turned:])  # type: ignore[assignment]
    return step


def lone_row_exchanges(*, step_id: int, most: int) -> list[Exchange]:
    """The first ``most`` exchanges of step ``step_id`` in the order they happened, each with
    its server (its id and name, as ``rows._step_exchanges()`` reads them)."""
    statements = _statements(connection.vendor)
    with connection.cursor() as cursor:
        cursor.execute(statements.exchanges, [step_id, most])
        found = cursor.fetchall()
    width = len(statements.exchange.attnames)
    exchanges = []
    for values in found:
        exchange = cast(Exchange, statements.exchange.made(values[:width]))
        exchange.server = _joined(statements.exchange_server, values[width:])  # type: ignore[assignment]
        exchanges.append(exchange)
    return exchanges


def lone_turn(*, conversation_id: int, turn_id: int) -> Turn | None:
    """The turn ``turn_id`` of the conversation, as ``rows.conversation_turns`` reads a page's
    (neither its message history nor its seal's digests), with its trace delivery (the
    attribute ``TRACE_DELIVERY_READ``, None for none); None if it is not that conversation's."""
    if not _an_id(Turn, turn_id):
        return None
    statements = _statements(connection.vendor)
    found = _one(statements.lone_turn, [turn_id, conversation_id])
    if found is None:
        return None
    width = len(statements.turn_whole.attnames)
    turn = cast(Turn, statements.turn_whole.made(found[:width]))
    delivery = _joined(statements.delivery, found[width:])
    if delivery is not None:
        turn.trace_delivery = cast(TraceDelivery, delivery)
    setattr(turn, TRACE_DELIVERY_READ, delivery)
    return turn


def lone_conversation(*, public_id: UUID | str, with_owner: bool) -> Conversation | None:
    """The conversation with ``public_id``, with its model profile and (``with_owner``) its owner,
    as ``selectors.access.conversation_query`` reads it, and whether a proxy recorded it; None if
    there is none.

    Raises:
        ValidationError: ``public_id`` is not a UUID (as the ORM's filter on it raises).
    """
    statements = _statements(connection.vendor)
    sql = statements.conversation_with_owner if with_owner else statements.conversation
    key = Conversation._meta.get_field("public_id").get_db_prep_value(public_id, connection)
    found = _one(sql, [key])
    if found is None:
        return None
    width = 1 + len(statements.conversation_part.attnames)
    profiled = width + len(statements.profile.attnames)
    conversation = cast(Conversation, statements.conversation_part.made(found[1:width]))
    conversation.recorded_by_proxy = bool(found[0])  # a cached property, answered here
    conversation.model_profile = cast(ModelProfile, statements.profile.made(found[width:profiled]))
    if with_owner:
        conversation.owner = statements.owner.made(found[profiled:])  # type: ignore[assignment]
    return conversation
