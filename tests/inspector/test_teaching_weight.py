"""Page weight: the teaching layer is rendered only for a user who has teaching mode on — on the
page, in the rows the plain-HTTP catch-up and the websocket send, and on the workbench. Real runs:
the demo model in-process, the demo MCP server over stdio."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.test import Client
from django.urls import reverse

from conversations.models import Turn
from conversations.runner import turn_run
from conversations.services import conversation_start, demo_profile_ensure
from inspector import live
from inspector.preferences import preference_set
from inspector.routing import websocket_urlpatterns
from servers import gateway
from servers.services import demo_server_ensure
from tests.factories import UserFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("async_db_connections")]

WEATHER = "What will the weather be like in Beijing tomorrow?"
# What only the teaching layer puts on a page.
NOTES = ('class="teach ', 'class="teach-', "data-sender=", "What each field means", "mark-select")


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


def _weather_turn(owner: Any) -> Turn:
    _, turn = conversation_start(
        owner=owner,
        model_profile=demo_profile_ensure(),
        question=WEATHER,
        servers=[demo_server_ensure()],
        dispatch=False,
    )
    turn_run(turn_id=turn.pk)
    turn.refresh_from_db()
    return turn


def _notes(text: str) -> list[str]:
    return [mark for mark in NOTES if mark in text]


def _page(user: Any, turn: Turn) -> str:
    client = Client()
    client.force_login(user)
    return client.get(reverse("inspector-conversation", args=[turn.conversation.public_id])).content.decode()


def _rows(user: Any, turn: Turn) -> str:
    client = Client()
    client.force_login(user)
    url = reverse("inspector-conversation-rows", args=[turn.conversation.public_id])
    messages = client.get(url, {"since": "1970-01-01T00:00:00+00:00"}).json()["messages"]
    return "".join(m.get("html", "") + m.get("html_shell", "") for m in messages)


def test_a_page_for_a_user_with_teaching_off_carries_no_notes_and_on_it_does() -> None:
    alice = UserFactory(username="alice")
    turn = _weather_turn(alice)
    assert turn.status == "done", turn.error

    off, rows_off = _page(alice, turn), _rows(alice, turn)
    preference_set(user=alice, teaching=True)
    on, rows_on = _page(alice, turn), _rows(alice, turn)

    assert _notes(off) == []
    assert _notes(rows_off) == []
    assert _notes(on) == list(NOTES)
    assert _notes(rows_on) == list(NOTES)
    assert len(off) < len(on)


async def test_live_rows_follow_the_preference_the_connection_was_opened_with() -> None:
    """The preference is read once per connection: switching it reloads the page, whose new
    connection renders rows the new way; rows of a page already open match that page."""
    alice = await sync_to_async(UserFactory)(username="alice")
    turn = await sync_to_async(_weather_turn)(alice)
    public_id = await sync_to_async(lambda: turn.conversation.public_id)()
    step = await turn.steps.filter(kind="decide").afirst()
    assert step is not None

    async def connected() -> WebsocketCommunicator:
        communicator = WebsocketCommunicator(
            URLRouter(websocket_urlpatterns), f"/ws/conversations/{public_id}/"
        )
        communicator.scope["user"] = alice
        assert (await communicator.connect())[0]
        return communicator

    async def row(communicator: WebsocketCommunicator) -> str:
        publisher = threading.Thread(
            target=live.publish_step_changed,
            kwargs={"conversation_id": public_id, "turn_id": turn.pk, "step_id": step.pk},
        )
        publisher.start()
        publisher.join()
        message = await communicator.receive_json_from(timeout=5)
        assert message["type"] == "row"
        return str(message["html"])

    first = await connected()
    off = await row(first)
    await sync_to_async(preference_set)(user=alice, teaching=True)
    still_off = await row(first)
    await first.disconnect()
    second = await connected()
    on = await row(second)
    await second.disconnect()

    assert _notes(off) == [] and still_off == off
    assert "mark-select" in on and "What each field means" in on and "data-sender=" in on
