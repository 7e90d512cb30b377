"""What one doorbell reads: the queries a live row's and a live turn's render make, pinned, so a
change that adds a read to every doorbell (P2, time to first step) is caught here."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from conversations import selectors
from conversations.models import Conversation, Exchange, Step, Turn
from conversations.runner import turn_run
from conversations.services import conversation_start, demo_profile_ensure, turn_start
from inspector import consumers
from inspector.fragments import render_row, render_turn
from servers import gateway
from servers.services import demo_server_ensure
from tests.factories import (
    ConversationFactory,
    ExchangeFactory,
    McpServerFactory,
    StepFactory,
    TurnFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db


def _tables(queries: CaptureQueriesContext) -> list[str]:
    """The table each query reads first (``FROM "..."``)."""
    return [q["sql"].split(' FROM "', 1)[1].split('"', 1)[0] for q in queries.captured_queries]


def _running_turn() -> tuple[Conversation, Turn]:
    conversation = ConversationFactory()
    turn = TurnFactory(conversation=conversation, status=Turn.Status.RUNNING)
    # The doorbell renders with the conversation its socket holds, read when it connected.
    admitted = consumers._admitted(conversation.owner, str(conversation.public_id))
    assert admitted is not None
    return admitted[0], turn


def test_a_connect_rows_doorbell_is_two_queries_the_row_and_its_exchanges() -> None:
    conversation, turn = _running_turn()
    server = McpServerFactory()
    step = StepFactory(turn=turn, seq=1, kind="connect", title="connect", server=server)
    for seq in (1, 2, 3):
        ExchangeFactory(turn=turn, step=step, server=server, seq=seq)

    with CaptureQueriesContext(connection) as queries:
        message = render_row(conversation=conversation, step_id=step.pk)

    assert message is not None and message["step_id"] == step.pk
    # The row comes with its turn, its server and how many tool calls it has; a row with none
    # is given none without asking.
    assert _tables(queries) == ["conversations_step", "conversations_exchange"]


def test_a_just_opened_rows_doorbell_is_one_query_and_shows_no_exchange() -> None:
    # Every step's first doorbell names it before any of its calls is recorded (P2's first row:
    # the connect step, opened): the row's read says it has no exchange, none is asked for.
    conversation, turn = _running_turn()
    step = StepFactory(turn=turn, seq=1, kind="connect", title="connect", status=Step.Status.RUNNING)

    with CaptureQueriesContext(connection) as queries:
        message = render_row(conversation=conversation, step_id=step.pk)

    assert message is not None and 'class="ex-' not in message["html"]
    assert _tables(queries) == ["conversations_step"]
    # Once its exchange is stored, the next doorbell shows it.
    ExchangeFactory(turn=turn, step=step, mcp=True, seq=1)
    with CaptureQueriesContext(connection) as queries:
        message = render_row(conversation=conversation, step_id=step.pk)
    assert message is not None and 'class="ex-' in message["html"]
    assert _tables(queries) == ["conversations_step", "conversations_exchange"]


def test_a_model_call_rows_doorbell_reads_its_tool_calls_too() -> None:
    conversation, turn = _running_turn()
    decide = StepFactory(turn=turn, seq=1, kind="decide", title="model call 1")
    for seq in (2, 3):
        StepFactory(turn=turn, parent=decide, seq=seq, kind="tool", title="calculate")

    with CaptureQueriesContext(connection) as queries:
        message = render_row(conversation=conversation, step_id=decide.pk)

    assert message is not None
    assert _tables(queries) == ["conversations_step", "conversations_step", "conversations_exchange"]


def test_a_running_turns_doorbell_is_one_query_without_an_order_or_the_conversation() -> None:
    conversation, turn = _running_turn()
    StepFactory(turn=turn, seq=1, kind="connect", title="connect")

    with CaptureQueriesContext(connection) as queries:
        message = render_turn(conversation=conversation, turn_id=turn.pk)

    assert message is not None and message["status"] == "running"
    assert _tables(queries) == ["conversations_turn"]
    (sql,) = [q["sql"] for q in queries.captured_queries]
    # By its id: no sort, so no join of the conversation the model's ordering would bring.
    assert "ORDER BY" not in sql and '"conversations_conversation"' not in sql


def test_another_conversations_turn_or_row_renders_nothing() -> None:
    conversation, turn = _running_turn()
    step = StepFactory(turn=turn, seq=1, kind="connect", title="connect")
    other, _ = _running_turn()

    assert render_turn(conversation=other, turn_id=turn.pk) is None
    assert render_row(conversation=other, step_id=step.pk) is None
    assert render_turn(conversation=conversation, turn_id=turn.pk) is not None


def test_the_live_watchs_read_is_one_query_with_the_newest_change_of_turns_and_steps() -> None:
    conversation, turn = _running_turn()
    nothing = ConversationFactory()
    with CaptureQueriesContext(connection) as empty:
        assert selectors.conversation_changed_at(conversation=nothing) is None
    later = timezone.now() + timedelta(minutes=5)
    step = StepFactory(turn=turn, seq=1, kind="connect", title="connect")
    Step.objects.filter(pk=step.pk).update(updated_at=later)
    TurnFactory(conversation=conversation, seq=2)  # a second turn, stepless: the join keeps it

    with CaptureQueriesContext(connection) as queries:
        at = selectors.conversation_changed_at(conversation=conversation)

    assert at == later
    Turn.objects.filter(pk=turn.pk).update(updated_at=later + timedelta(minutes=1))
    assert selectors.conversation_changed_at(conversation=conversation) == later + timedelta(minutes=1)
    assert (len(empty.captured_queries), len(queries.captured_queries)) == (1, 1)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("teaching", [False, True])
def test_a_rows_render_reads_nothing_of_its_turn_or_server_it_left_unread(teaching: bool) -> None:
    # A row is read with only what it shows of its turn and servers (``selectors.rows``): a
    # field it left out would be read back, one query for each row, whatever kind it is.
    owner = UserFactory()
    conversation, first = conversation_start(
        owner=owner,
        model_profile=demo_profile_ensure(),
        question="What will the weather be like in Beijing tomorrow?",
        servers=[demo_server_ensure()],
        dispatch=False,
    )
    try:
        turn_run(turn_id=first.pk)
        second = turn_start(conversation=conversation, question="And in Paris?", dispatch=False)
        turn_run(turn_id=second.pk)
    finally:
        gateway.close_all()
    # Not what the row shows: an exchange that names its server only by the link.
    Exchange.objects.filter(turn=second, channel=Exchange.Channel.MCP).update(server_name="")
    admitted = consumers._admitted(owner, str(conversation.public_id))
    assert admitted is not None
    rows = Step.objects.filter(turn__conversation=conversation, parent__isnull=True)
    kinds = set(rows.values_list("kind", flat=True))
    assert {"connect", "decide", "answer"} <= kinds

    for step_id in rows.values_list("pk", flat=True):
        with CaptureQueriesContext(connection) as queries:
            message = render_row(conversation=admitted[0], step_id=step_id, teaching=teaching)
        assert message is not None
        assert not {"conversations_turn", "servers_mcpserver"} & set(_tables(queries)), (
            queries.captured_queries
        )
