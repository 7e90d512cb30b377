"""The row queryset a process builds once (``conversations.selectors.rows._rows``) and every row
read refines: it must stay a query, never a result. Evaluated once, it would hold the rows of that
moment for the life of the process, and every later read of it would answer them again."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.models import QuerySet
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from conversations import selectors
from conversations.models import Step, Turn
from conversations.selectors.rows import _rows
from inspector.fragments import page_view_from_json, render_catch_up, render_row, render_turn
from tests.factories import ConversationFactory, ExchangeFactory, StepFactory, TurnFactory

pytestmark = pytest.mark.django_db


def _asks_the_database(rows: QuerySet[Step]) -> bool:
    """Whether counting ``rows`` runs a query: a queryset already evaluated counts its result
    cache instead (``QuerySet.count``), and counting never fills it."""
    with CaptureQueriesContext(connection) as queries:
        rows.count()
    return len(queries.captured_queries) == 1


def test_the_check_tells_an_evaluated_queryset_from_one_that_is_not() -> None:
    # The check on a copy of the shared queryset: the shared one itself is never evaluated here.
    copy = _rows().all()
    assert _asks_the_database(copy)
    list(copy)
    assert not _asks_the_database(copy)


def test_the_shared_row_queryset_is_never_evaluated_by_the_reads_and_renders_of_rows() -> None:
    conversation = ConversationFactory()
    turn = TurnFactory(conversation=conversation, status=Turn.Status.RUNNING)
    connect = StepFactory(turn=turn, kind="connect", title="connect 1 MCP server(s)")
    ExchangeFactory(turn=turn, step=connect, mcp=True, label="tools/list")
    decide = StepFactory(turn=turn)
    ExchangeFactory(turn=turn, step=decide)
    calls = [StepFactory(parent=decide, kind="tool", title=f"call {n}") for n in range(12)]
    ExchangeFactory(turn=turn, step=calls[0], mcp=True)
    opened = StepFactory(turn=turn, kind="answer", status=Step.Status.RUNNING)
    since = timezone.now().replace(year=2000)
    client = Client()
    client.force_login(conversation.owner)

    shared = _rows()
    for step in (connect, decide, opened):
        for teaching in (False, True):
            assert render_row(conversation=conversation, step_id=step.pk, teaching=teaching) is not None
    assert render_turn(conversation=conversation, turn_id=turn.pk) is not None
    view = page_view_from_json({"turns": {}, "newest_seq": 0})
    for page_view in (None, view):
        assert render_catch_up(conversation=conversation, since=since, view=page_view)
    assert len(selectors.turn_rows(turn=turn)) == 3
    assert len(selectors.turn_rows(turn=turn, last=1, before_seq=opened.seq)) == 1
    assert len(selectors.turn_rows_page(turn=turn, start=1, size=1).rows) == 1
    assert len(selectors.turns_rows(turns=[turn])[turn.pk]) == 3
    assert len(selectors.rows_by_id(conversation=conversation, step_ids=[connect.pk, decide.pk])) == 2
    assert len(selectors.rows_changed_since(conversation=conversation, since=since)) == 3
    assert selectors.step_row(conversation=conversation, step_id=decide.pk) is not None
    assert len(selectors.row_calls(row=decide, start=0, stop=12)) == 12
    page = client.get(reverse("inspector-conversation", args=[conversation.public_id]))
    assert page.status_code == 200 and f'id="step-{decide.pk}"' in page.content.decode()

    # The same queryset, still a query: each read above refined a copy of it.
    assert _rows() is shared
    assert _asks_the_database(shared)
