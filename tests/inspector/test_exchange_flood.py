"""A step a server flooded with messages costs its page what a step of a few dozen does: the page
and a row's live read load the first ``EXCHANGES_HEAD`` and the last ``EXCHANGES_TAIL`` of its
exchanges and say how many are between (a stdio proxy session of 100,000 notifications made a
184 MB page that took 52 s). A step of exactly that many is shown whole, with no note.

Costs are counted (exchanges made, queries), never timed."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.db.models.signals import post_init
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from conversations import selectors
from conversations.models import Conversation, Exchange, Step
from inspector.fragments import render_row
from tests.factories import ConversationFactory, StepFactory, TurnFactory, UserFactory

pytestmark = pytest.mark.django_db

FLOOD = 2_000
SHOWN = selectors.EXCHANGES_HEAD + selectors.EXCHANGES_TAIL


def _notification(step: Step, seq: int) -> Exchange:
    return Exchange(
        step=step,
        turn=step.turn,
        conversation_id=step.turn.conversation_id,
        seq=seq,
        channel=Exchange.Channel.MCP,
        direction="server",
        label="notifications/message",
        request_body=f'{{"jsonrpc":"2.0","method":"notifications/message","params":{{"n":{seq}}}}}',
    )


def _flooded(owner: User, messages: int) -> tuple[Conversation, Step]:
    conversation = ConversationFactory(owner=owner)
    turn = TurnFactory(conversation=conversation)
    step = StepFactory(turn=turn, seq=1, kind=Step.Kind.CONNECT, title="connect")
    Exchange.objects.bulk_create([_notification(step, n) for n in range(1, messages + 1)])
    return conversation, step


class Made:
    def __init__(self) -> None:
        self.exchanges = 0

    def __call__(self, sender: type, **kwargs: object) -> None:
        self.exchanges += 1


@pytest.mark.parametrize("messages", [FLOOD, SHOWN])
def test_a_flooded_steps_page_and_live_row_show_its_ends_and_count_the_rest(messages: int) -> None:
    alice = UserFactory(username="alice")
    conversation, step = _flooded(alice, messages)
    client = Client()
    client.force_login(alice)

    made = Made()
    post_init.connect(made, sender=Exchange)
    try:
        with CaptureQueriesContext(connection) as queries:
            page = client.get(reverse("inspector-conversation", args=[conversation.public_id]))
        row = render_row(conversation=conversation, step_id=step.pk)
    finally:
        post_init.disconnect(made, sender=Exchange)

    assert page.status_code == 200 and row is not None
    for html in (page.content.decode(), row["html"]):
        left = messages - SHOWN
        if left:
            assert f"{left:,} more messages of this step" in html
        else:
            assert "more message" not in html
    # A few reads of the step (the page's, the live row's), each of its ends only: what they
    # make does not grow with the flood.
    assert made.exchanges <= 4 * SHOWN, made.exchanges
    assert len(queries) < 40
    read = selectors.step_row(conversation=conversation, step_id=step.pk)
    assert read is not None
    numbers = [exchange.seq for exchange in selectors.loaded_exchanges(read)]
    assert numbers == [
        *range(1, selectors.EXCHANGES_HEAD + 1),
        *range(messages - selectors.EXCHANGES_TAIL + 1, messages + 1),
    ]
    assert selectors.exchanges_left(read) == messages - SHOWN


def test_a_tool_call_flooded_with_notifications_shows_its_ends_and_counts_the_rest() -> None:
    alice = UserFactory(username="alice")
    conversation = ConversationFactory(owner=alice)
    turn = TurnFactory(conversation=conversation)
    decide = StepFactory(turn=turn, seq=1, kind=Step.Kind.DECIDE, title="calls demo/echo")
    call = StepFactory(turn=turn, seq=2, parent=decide, kind=Step.Kind.TOOL, title="demo/echo")
    Exchange.objects.bulk_create([_notification(call, n) for n in range(1, FLOOD + 1)])
    client = Client()
    client.force_login(alice)

    page = client.get(reverse("inspector-conversation", args=[conversation.public_id])).content.decode()

    assert f"{FLOOD - SHOWN:,} more messages of this step" in page
    assert page.count("notifications/message") < 4 * SHOWN
