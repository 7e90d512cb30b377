"""The reads in SQL of their own (``conversations.selectors.lone_reads``) against the querysets
that define them: a conversation as ``conversation_query`` reads it, a lone row as ``_rows()``
with ``_loaded`` reads it, a lone turn as ``conversation_turns`` reads a page's. Every field, every count, every related model and the
rendered fragments must be the same, on both databases (each converts some values its own way:
JSON, booleans, times), for rows of every shape and for values that are hard to carry."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.db.models import Model
from django.template.loader import render_to_string
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from conversations import selectors
from conversations.models import Conversation, Exchange, ProxySession, Step, TraceDelivery, Turn
from conversations.proxy.models import ProxyKey
from conversations.selectors.access import conversation_query
from conversations.selectors.rows import CALLS_COUNT, HAS_EXCHANGES, _loaded, _rows
from inspector.fragments import STEP_TEMPLATE, TURN_STATUS_TEMPLATE, turn_context
from tests.factories import (
    ConversationFactory,
    ExchangeFactory,
    McpServerFactory,
    StepFactory,
    TurnFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db

# Text a value must carry unchanged: bidi overrides, invisible characters, astral symbols, quotes.
HARD = 'say "hi" \u202eevil\u202c \u200b zero-width, 🚀 rocket, \\ backslash, \u00e9t\u00e9'


def _orm_row(conversation: Conversation, step_id: int) -> Step | None:
    """The row as the queryset that defines the lone read reads it."""
    one = _rows().filter(pk=step_id, turn__conversation=conversation).order_by()
    return next(iter(_loaded(one)), None)


def _orm_turn(conversation: Conversation, turn_id: int) -> Turn | None:
    return next(
        (turn for turn in selectors.conversation_turns(conversation=conversation) if turn.pk == turn_id), None
    )


def _values(instance: Model | None) -> tuple[dict[str, Any], set[str]] | None:
    """Every loaded field of ``instance`` by its attribute name, and the names left deferred."""
    if instance is None:
        return None
    deferred = instance.get_deferred_fields()
    fields = type(instance)._meta.concrete_fields
    return {
        field.attname: getattr(instance, field.attname) for field in fields if field.attname not in deferred
    }, deferred


def _row_shape(row: Step) -> dict[str, Any]:
    exchanges = selectors.loaded_exchanges(row)
    return {
        "row": _values(row),
        "counts": (getattr(row, CALLS_COUNT), getattr(row, HAS_EXCHANGES)),
        "turn": _values(row.turn),
        "server": _values(row.server),
        "exchanges": [(_values(exchange), _values(exchange.server)) for exchange in exchanges],
        "calls": [
            (_values(call), [_values(exchange) for exchange in call.exchanges.all()])
            for call in selectors.loaded_calls(row)
        ],
    }


def _rendered(conversation: Conversation, row: Step, teaching: bool) -> str:
    return render_to_string(STEP_TEMPLATE, {"conversation": conversation, "step": row, "teaching": teaching})


def _conversation_of_every_shape() -> tuple[Conversation, list[Step]]:
    """A running turn's rows: a connect row with its handshake, a decide row with twelve tool
    calls (more than a row shows at first), an answer with hard text, an opened row with nothing
    yet, and a failed one without a server."""
    conversation = ConversationFactory()
    turn = TurnFactory(
        conversation=conversation, status=Turn.Status.RUNNING, finished_at=None, tools=[{"name": HARD}]
    )
    server = McpServerFactory(demo=True)
    connect = StepFactory(turn=turn, kind=Step.Kind.CONNECT, title="connect 1 MCP server(s)", server=server)
    ExchangeFactory(turn=turn, step=connect, channel=Exchange.Channel.MCP, label="initialize", server=server)
    ExchangeFactory(
        turn=turn,
        step=connect,
        channel=Exchange.Channel.MCP,
        label="tools/list",
        server=server,
        request_headers={"x-note": HARD, "nested": {"deep": [1, 2.5, None, True]}},
        response_body='{"tools": [{"name": "' + "\u202e" + '"}]}',
        duration_ms=None,
    )
    decide = StepFactory(
        turn=turn,
        kind=Step.Kind.DECIDE,
        prompt=HARD,
        usage={"prompt_tokens": 12, "completion_tokens": 3},
        calls=[{"id": "call_1", "name": "get_forecast", "arguments": {"city": HARD}}],
        started_at=datetime(2026, 12, 6, 1, 2, 3, 456789, tzinfo=UTC),
    )
    ExchangeFactory(turn=turn, step=decide)
    for number in range(12):
        call = StepFactory(parent=decide, kind=Step.Kind.TOOL, title=f"call {number}", server=server)
        ExchangeFactory(turn=turn, step=call, channel=Exchange.Channel.MCP, label="tools/call", server=server)
    answer = StepFactory(turn=turn, kind=Step.Kind.ANSWER, text=HARD, prompt=HARD + "\n more")
    ExchangeFactory(turn=turn, step=answer, response_body=HARD)
    opened = StepFactory(turn=turn, kind=Step.Kind.ANSWER, status=Step.Status.RUNNING)
    failed = StepFactory(
        turn=turn,
        kind=Step.Kind.TOOL,
        status=Step.Status.ERROR,
        server=None,
        is_error=True,
        error=HARD,
        arguments={"a": [{"b": None}]},
    )
    return conversation, [connect, decide, answer, opened, failed]


@pytest.mark.parametrize("teaching", [False, True])
def test_a_lone_row_is_the_row_its_queryset_reads_field_by_field_and_as_rendered(teaching: bool) -> None:
    conversation, rows = _conversation_of_every_shape()

    for step in rows:
        lone = selectors.step_row(conversation=conversation, step_id=step.pk)
        orm = _orm_row(conversation, step.pk)
        assert lone is not None and orm is not None
        assert _row_shape(lone) == _row_shape(orm), step.kind
        assert _rendered(conversation, lone, teaching) == _rendered(conversation, orm, teaching), step.kind


def test_a_lone_row_keeps_what_a_value_holds() -> None:
    conversation, (connect, decide, answer, _opened, failed) = _conversation_of_every_shape()

    read = selectors.step_row(conversation=conversation, step_id=decide.pk)
    assert read is not None
    assert read.prompt == HARD and read.calls[0]["arguments"] == {"city": HARD}
    assert read.started_at == datetime(2026, 12, 6, 1, 2, 3, 456789, tzinfo=UTC)
    assert getattr(read, CALLS_COUNT) == 12 and getattr(read, HAS_EXCHANGES) is True
    assert (
        read.turn.tools == [{"name": HARD}]
        and {"transcript", "seal_steps"} <= read.turn.get_deferred_fields()
    )
    bad = selectors.step_row(conversation=conversation, step_id=failed.pk)
    assert (
        bad is not None
        and bad.is_error is True
        and bad.server is None
        and bad.arguments == {"a": [{"b": None}]}
    )
    assert getattr(bad, HAS_EXCHANGES) is False and getattr(bad, CALLS_COUNT) == 0
    opened = selectors.step_row(conversation=conversation, step_id=connect.pk)
    assert opened is not None and opened.server is not None and opened.server.name == connect.server.name
    headers = [exchange.request_headers for exchange in selectors.loaded_exchanges(opened)]
    assert headers[1] == {"x-note": HARD, "nested": {"deep": [1, 2.5, None, True]}}
    said = selectors.step_row(conversation=conversation, step_id=answer.pk)
    assert said is not None and [exchange.response_body for exchange in selectors.loaded_exchanges(said)] == [
        HARD
    ]


def test_a_lone_row_is_none_for_a_tool_call_another_conversations_row_or_no_row() -> None:
    conversation, (_connect, decide, *_rest) = _conversation_of_every_shape()
    other = StepFactory(turn=TurnFactory())
    call = decide.children.first()
    assert call is not None

    for step_id in (call.pk, other.pk, 10**9):
        assert selectors.step_row(conversation=conversation, step_id=step_id) is None
        assert _orm_row(conversation, step_id) is None


def test_an_id_past_the_columns_range_names_no_row_or_turn_as_the_orm_answers_it() -> None:
    conversation, (connect, *_rest) = _conversation_of_every_shape()
    client = Client()
    client.force_login(conversation.owner)

    for huge in (2**63, -(2**63) - 1, 10**30):
        assert selectors.step_row(conversation=conversation, step_id=huge) is None
        assert _orm_row(conversation, huge) is None
        assert selectors.turn_get(conversation=conversation, turn_id=huge) is None
        assert _orm_turn(conversation, huge) is None
    # A turn's page takes the id from its URL: past the range it is a 404, not a failure.
    page = client.get(reverse("inspector-turn", args=[conversation.public_id, 10**30]))
    assert page.status_code == 404
    assert selectors.turn_get(conversation=conversation, turn_id=connect.turn_id) is not None


def test_a_lone_row_without_tool_calls_or_exchanges_is_one_query_and_renders_without_another() -> None:
    conversation, (_connect, _decide, _answer, opened, _failed) = _conversation_of_every_shape()

    with CaptureQueriesContext(connection) as queries:
        row = selectors.step_row(conversation=conversation, step_id=opened.pk)
        assert row is not None
        assert selectors.loaded_exchanges(row) == [] and selectors.loaded_calls(row) == []
        row.turn.status  # noqa: B018
        row.server  # noqa: B018
    assert len(queries.captured_queries) == 1


@pytest.mark.parametrize("delivered", [False, True])
def test_a_lone_turn_is_the_turn_a_page_reads_field_by_field_and_as_rendered(delivered: bool) -> None:
    conversation = ConversationFactory()
    done = TurnFactory(conversation=conversation, answer=HARD, transcript=[{"role": "user", "content": HARD}])
    running = TurnFactory(
        conversation=conversation, status=Turn.Status.RUNNING, finished_at=None, question=HARD
    )
    if delivered:
        TraceDelivery.objects.create(turn=done, attempts=2, last_error=HARD)

    for turn in (done, running):
        lone = selectors.turn_get(conversation=conversation, turn_id=turn.pk)
        orm = _orm_turn(conversation, turn.pk)
        assert lone is not None and orm is not None
        assert _values(lone) == _values(orm)
        with CaptureQueriesContext(connection) as queries:
            lone_delivery = selectors.turn_trace_delivery(lone)
        assert queries.captured_queries == []
        assert _values(lone_delivery) == _values(selectors.turn_trace_delivery(orm))
        context = turn_context(conversation=conversation, turn=lone, rows=[])
        assert render_to_string(TURN_STATUS_TEMPLATE, context) == render_to_string(
            TURN_STATUS_TEMPLATE, turn_context(conversation=conversation, turn=orm, rows=[])
        )
    delivery = selectors.turn_trace_delivery(selectors.turn_get(conversation=conversation, turn_id=done.pk))  # type: ignore[arg-type]
    assert (delivery is not None and delivery.last_error == HARD) is delivered


def test_a_lone_turn_is_none_for_another_conversations_turn() -> None:
    conversation = ConversationFactory()
    other = TurnFactory()

    assert selectors.turn_get(conversation=conversation, turn_id=other.pk) is None
    assert selectors.turn_get(conversation=conversation, turn_id=10**9) is None


def test_a_turn_read_elsewhere_still_answers_for_its_trace_delivery() -> None:
    turn = TurnFactory()
    assert selectors.turn_trace_delivery(Turn.objects.get(pk=turn.pk)) is None
    TraceDelivery.objects.create(turn=turn)
    found = selectors.turn_trace_delivery(Turn.objects.get(pk=turn.pk))
    assert found is not None and found.turn_id == turn.pk


@pytest.mark.parametrize("with_owner", [False, True])
@pytest.mark.parametrize("proxied", [False, True])
def test_a_lone_conversation_is_the_one_its_queryset_reads_with_whether_a_proxy_recorded_it(
    with_owner: bool, proxied: bool
) -> None:
    conversation = ConversationFactory(title=HARD, imported_meta={"note": HARD} if proxied else None)
    ConversationFactory(owner=conversation.owner)  # another of the same owner's
    if proxied:
        key = ProxyKey.objects.create(user=conversation.owner, prefix="tci_abc", key_hash="0" * 64)
        ProxySession.objects.create(key=key, conversation=conversation)

    with CaptureQueriesContext(connection) as queries:
        lone = selectors.conversation_get(
            user=conversation.owner, public_id=conversation.public_id, with_owner=with_owner
        )
        assert lone.recorded_by_proxy is proxied and lone.read_only is proxied
        lone.model_profile.name  # noqa: B018
        if with_owner:
            lone.owner.username  # noqa: B018
    assert len(queries.captured_queries) == 1
    orm = conversation_query(public_id=conversation.public_id, with_owner=with_owner).get()
    assert _values(lone) == _values(orm) and _values(lone.model_profile) == _values(orm.model_profile)
    assert (_values(lone.owner) == _values(orm.owner)) if with_owner else True
    assert lone.recorded_by_proxy == orm.recorded_by_proxy and lone.title == HARD


def test_a_lone_conversation_is_refused_as_its_queryset_is() -> None:
    conversation = ConversationFactory()
    stranger = UserFactory()

    for public_id in (conversation.public_id, uuid4()):
        user = stranger if public_id == conversation.public_id else conversation.owner
        with pytest.raises(Conversation.DoesNotExist):
            selectors.conversation_get(user=user, public_id=public_id)
    # Not a UUID: refused as the ORM's filter on it refuses it.
    with pytest.raises(ValidationError):
        conversation_query(public_id="not-a-uuid").get()
    with pytest.raises(ValidationError):
        selectors.conversation_get(user=conversation.owner, public_id="not-a-uuid")
    assert (
        selectors.conversation_get(user=conversation.owner, public_id=str(conversation.public_id))
        == conversation
    )
