"""A turn on a pooled MCP session records no handshake of its own: its connect row says which
turn opened the session and links to that turn's initialize exchange — or says the session was
opened outside the conversation. Real runs: the demo model in-process, the demo MCP server over
stdio."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from conversations.models import Exchange, Step
from conversations.runner import turn_run
from conversations.services import conversation_start, demo_profile_ensure, turn_start
from inspector.handshakes import session_origins
from servers import gateway
from servers.services import demo_server_ensure
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)

WEATHER = "What will the weather be like in Beijing tomorrow?"


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    gateway.close_all()
    yield
    gateway.close_all()


def _page(user: object, conversation: object) -> str:
    client = Client()
    client.force_login(user)  # type: ignore[arg-type]
    return client.get(reverse("inspector-conversation", args=[conversation.public_id])).content.decode()  # type: ignore[attr-defined]


def test_a_later_turn_links_to_the_handshake_of_the_turn_that_opened_its_session() -> None:
    alice = UserFactory(username="alice")
    conversation, first = conversation_start(
        owner=alice,
        model_profile=demo_profile_ensure(),
        question=WEATHER,
        servers=[demo_server_ensure()],
        dispatch=False,
    )
    turn_run(turn_id=first.pk)
    second = turn_start(conversation=conversation, question="And in Paris?", dispatch=False)
    turn_run(turn_id=second.pk)

    handshake = Exchange.objects.get(turn=first, label="initialize")
    assert not Exchange.objects.filter(turn=second, label="initialize").exists()
    origins = session_origins(Step.objects.get(turn=second, kind="connect"))
    assert [(o.server, o.turn_seq, o.exchange_id) for o in origins] == [("demo", 1, handshake.pk)]
    # The first turn opened its own session: nothing to link.
    assert session_origins(Step.objects.get(turn=first, kind="connect")) == []

    text = _page(alice, conversation)
    link = reverse("inspector-turn", args=[conversation.public_id, first.pk]) + f"#exchange-{handshake.pk}"
    assert re.search(rf'opened at <a href="{re.escape(link)}">turn 1 — its handshake</a>', text)


def test_a_session_opened_in_another_conversation_is_said_to_be_so_never_linked() -> None:
    # Sessions are pooled per user: the other conversation is alice's too.
    alice = UserFactory(username="alice")
    profile, demo = demo_profile_ensure(), demo_server_ensure()
    elsewhere, opened = conversation_start(
        owner=alice, model_profile=profile, question=WEATHER, servers=[demo], dispatch=False
    )
    turn_run(turn_id=opened.pk)
    conversation, turn = conversation_start(
        owner=alice, model_profile=profile, question=WEATHER, servers=[demo], dispatch=False
    )
    turn_run(turn_id=turn.pk)

    origins = session_origins(Step.objects.get(turn=turn, kind="connect"))
    assert [(o.server, o.turn_seq, o.exchange_id) for o in origins] == [("demo", None, None)]
    text = _page(alice, conversation)
    assert "was opened before this conversation" in text
    # Nothing of the other conversation reaches this one's page.
    assert str(Exchange.objects.get(turn=opened, label="initialize").pk) not in re.findall(
        r"#exchange-(\d+)", text
    )


def test_a_first_turns_reused_session_is_told_without_a_read_and_a_later_turns_with_one(
    django_assert_num_queries: Any,
) -> None:
    # Every closed connect row a doorbell renders asks where its sessions were opened: a
    # conversation's first turn has no turn before it to have opened them.
    alice = UserFactory(username="alice")
    profile, demo = demo_profile_ensure(), demo_server_ensure()
    _, opened = conversation_start(
        owner=alice, model_profile=profile, question=WEATHER, servers=[demo], dispatch=False
    )
    turn_run(turn_id=opened.pk)
    conversation, first = conversation_start(
        owner=alice, model_profile=profile, question=WEATHER, servers=[demo], dispatch=False
    )
    turn_run(turn_id=first.pk)
    second = turn_start(conversation=conversation, question="And in Paris?", dispatch=False)
    turn_run(turn_id=second.pk)
    first_row, second_row = (
        Step.objects.select_related("turn").get(turn=turn, kind="connect") for turn in (first, second)
    )

    with django_assert_num_queries(0):
        assert [(o.server, o.turn_seq) for o in session_origins(first_row)] == [("demo", None)]
    # The second turn's read of the turns before it finds none that opened the session either.
    with django_assert_num_queries(1):
        assert [(o.server, o.turn_seq) for o in session_origins(second_row)] == [("demo", None)]
