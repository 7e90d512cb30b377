"""The live watch without Redis: one watch per conversation shared by its sockets, one query a
tick however many watch it, and a watch that outlives the database's absences."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.db import OperationalError, connection
from django.test.utils import CaptureQueriesContext

from conversations.models import Conversation, ModelProfile, Step, Turn
from inspector import consumers
from inspector.routing import websocket_urlpatterns

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("async_db_connections")]

CLASS = 30
WAIT = 10.0


@pytest.fixture(autouse=True)
def _without_redis(settings: Any) -> None:
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}


def _conversation(owner: User) -> tuple[Conversation, Turn]:
    profile = ModelProfile.objects.create(name=f"p-{owner.username}", model="demo", is_demo=True)
    conversation = Conversation.objects.create(owner=owner, title="weather", model_profile=profile)
    turn = Turn.objects.create(
        conversation=conversation, seq=1, question="Rain?", paradigm="native", status=Turn.Status.RUNNING
    )
    Step.objects.create(turn=turn, seq=1, kind="decide", title="model call 1", text="thinking")
    return conversation, turn


class Reads:
    """The watch's reads (``conversation_changed_at``), each with the SQL queries it made; while
    ``away`` is set a read fails as with the database gone."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.queries: list[int] = []
        self.failed = 0
        self.away = threading.Event()
        real = consumers.conversation_changed_at

        def counted(**kwargs: Any) -> datetime | None:
            if self.away.is_set():
                self.failed += 1
                raise OperationalError("the database is away")
            with CaptureQueriesContext(connection) as made:
                found = real(**kwargs)
            self.queries.append(len(made.captured_queries))
            return found

        monkeypatch.setattr(consumers, "conversation_changed_at", counted)

    async def until(self, done: Callable[[], bool]) -> None:
        """Wait (bounded) until ``done()``."""
        async with asyncio.timeout(WAIT):
            while not done():
                await asyncio.sleep(0.01)


async def _sockets(user: User, conversation: Conversation, count: int) -> list[WebsocketCommunicator]:
    sockets = []
    for _ in range(count):
        socket = WebsocketCommunicator(
            URLRouter(websocket_urlpatterns), f"/ws/conversations/{conversation.public_id}/"
        )
        socket.scope["user"] = user
        assert (await socket.connect(timeout=WAIT))[0]
        sockets.append(socket)
    return sockets


async def test_a_class_on_one_conversation_shares_one_watch_started_with_the_first_and_stopped_with_the_last(
    monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    settings.LIVE_WATCH_SECONDS = 3600  # no tick during the test: only the opening reads
    reads = Reads(monkeypatch)
    alice = await User.objects.acreate(username="alice")
    conversation, _turn = await sync_to_async(_conversation)(alice)
    other, _ = await sync_to_async(_conversation)(await User.objects.acreate(username="bob"))

    sockets = await _sockets(alice, conversation, CLASS)
    await reads.until(lambda: len(reads.queries) >= 1)
    assert await sockets[0].receive_nothing(timeout=0.5)  # room for any other socket's read

    assert reads.queries == [1]  # one watch, not one per socket; one query
    assert len(consumers.watches) == 1
    bob = await _sockets(await User.objects.aget(username="bob"), other, 1)
    assert len(consumers.watches) == 2  # a watch per conversation
    for socket in sockets[:-1]:
        await socket.disconnect()
    assert len(consumers.watches) == 2  # one socket still watches
    await sockets[-1].disconnect()
    await bob[0].disconnect()
    assert len(consumers.watches) == 0


async def test_each_tick_is_one_query_and_every_socket_of_the_class_hears_a_change(
    monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    settings.LIVE_WATCH_SECONDS = 0.2
    reads = Reads(monkeypatch)
    alice = await User.objects.acreate(username="alice")
    conversation, turn = await sync_to_async(_conversation)(alice)
    sockets = await _sockets(alice, conversation, CLASS)
    await reads.until(lambda: len(reads.queries) >= 2)  # the opening read and a tick

    # Stored by another process: no doorbell rings here.
    await Step.objects.acreate(turn=turn, seq=2, kind="answer", title="answer", text="Rain.")

    heard = [await socket.receive_json_from(timeout=WAIT) for socket in sockets]
    assert {message["type"] for message in heard} == {"changed"}
    assert len({message["at"] for message in heard}) == 1
    ticks = len(reads.queries)
    assert set(reads.queries) == {1}
    for socket in sockets:
        await socket.disconnect()
    assert len(consumers.watches) == 0
    await asyncio.sleep(1.0)  # five ticks' time: a stopped watch reads nothing more
    assert len(reads.queries) == ticks


async def test_a_watch_outlives_a_database_error_and_tells_what_changed_meanwhile(
    monkeypatch: pytest.MonkeyPatch, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    settings.LIVE_WATCH_SECONDS = 0.05
    reads = Reads(monkeypatch)
    alice = await User.objects.acreate(username="alice")
    conversation, turn = await sync_to_async(_conversation)(alice)
    socket = (await _sockets(alice, conversation, 1))[0]
    await reads.until(lambda: len(reads.queries) >= 1)

    with caplog.at_level(logging.WARNING, logger="inspector.consumers"):
        reads.away.set()
        await reads.until(lambda: reads.failed >= 2)
        stored = await Step.objects.acreate(turn=turn, seq=2, kind="answer", title="answer", text="Rain.")
        await reads.until(lambda: reads.failed >= 3)
        reads.away.clear()
        changed = await socket.receive_json_from(timeout=WAIT)

    assert changed["type"] == "changed"
    assert changed["at"] == consumers.timestamp_iso(stored.updated_at)
    assert any("could not read whether conversation" in record.getMessage() for record in caplog.records)
    await socket.disconnect()


async def test_a_watch_whose_first_read_fails_tells_the_page_to_catch_up_once_it_reads(
    monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    settings.LIVE_WATCH_SECONDS = 0.05
    reads = Reads(monkeypatch)
    reads.away.set()
    alice = await User.objects.acreate(username="alice")
    conversation, _turn = await sync_to_async(_conversation)(alice)
    socket = (await _sockets(alice, conversation, 1))[0]
    await reads.until(lambda: reads.failed >= 2)
    reads.away.clear()

    # Nothing was known of the conversation when the page's socket opened: whatever it holds
    # now might be news, so the page is told to catch up.
    assert (await socket.receive_json_from(timeout=WAIT))["type"] == "changed"
    await socket.disconnect()
