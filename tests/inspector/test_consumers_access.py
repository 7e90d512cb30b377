"""The conversation websocket once its user may no longer see the conversation (a team left or
deleted, the conversation given to someone else, the user signed out or deactivated): it sends
nothing more of it and closes, at the next catch-up at once, within
``consumers.ACCESS_RECHECK_SECONDS`` for doorbells; its owner's socket goes on.

Each socket here goes through the whole ASGI stack with a real session cookie, as a browser's
does, on the channel layer the settings name (Redis when ``REDIS_URL`` is set)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.test import Client

from conversations.models import Conversation, Step, Team, Turn
from inspector import consumers, live
from inspector.asgi import application
from tests.inspector.test_consumers import _caught_up, _conversation, _path

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("async_db_connections")]

SINCE_EVER = "2000-01-01T00:00:00+00:00"
WAIT = 10.0


@dataclass
class Class:
    """Alice's conversation, and alice and bob in one team (``team``), each with a browser."""

    alice: User
    bob: User
    team: Team
    conversation: Conversation
    turn: Turn
    step: Step
    browsers: dict[str, Client]


async def _class() -> Class:
    alice = await User.objects.acreate(username="alice")
    bob = await User.objects.acreate(username="bob")
    conversation, turn, step = await sync_to_async(_conversation)(alice)
    team = await Team.objects.acreate(name="class")
    await team.members.aadd(alice, bob)
    browsers = {"alice": Client(), "bob": Client()}
    await sync_to_async(browsers["alice"].force_login)(alice)
    await sync_to_async(browsers["bob"].force_login)(bob)
    return Class(alice, bob, team, conversation, turn, step, browsers)


async def _socket(room: Class, who: str) -> WebsocketCommunicator:
    """``who``'s open socket on alice's conversation, with that browser's session cookie."""
    cookie = f"sessionid={room.browsers[who].cookies['sessionid'].value}".encode()
    socket = WebsocketCommunicator(
        application,
        _path(room.conversation),
        headers=[(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1"), (b"cookie", cookie)],
    )
    connected, _ = await socket.connect(timeout=WAIT)
    assert connected
    return socket


async def _ring(room: Class) -> None:
    """A doorbell for the conversation's step, as a runner's would arrive."""
    await get_channel_layer().group_send(
        live.conversation_group(room.conversation.public_id),
        {"type": "step.changed", "turn_id": room.turn.pk, "step_id": room.step.pk, "ring": uuid.uuid4().hex},
    )


async def _closed(socket: WebsocketCommunicator) -> int:
    """The code the server closes ``socket`` with; fails on anything it sends before."""
    output = await socket.receive_output(timeout=WAIT)
    assert output["type"] == "websocket.close", output
    code: int = output["code"]
    return code


async def _team_deleted(room: Class) -> None:
    await Team.objects.filter(pk=room.team.pk).adelete()


async def _team_left(room: Class) -> None:
    await room.team.members.aremove(room.bob)


async def _conversation_given_away(room: Class) -> None:
    carol = await User.objects.acreate(username="carol")
    await Conversation.objects.filter(pk=room.conversation.pk).aupdate(owner=carol)


async def _signed_out(room: Class) -> None:
    response = await sync_to_async(room.browsers["bob"].post)("/accounts/logout/")
    assert response.status_code == 302


async def _deactivated(room: Class) -> None:
    await User.objects.filter(pk=room.bob.pk).aupdate(is_active=False)


REVOCATIONS = [
    pytest.param(_team_deleted, consumers.CLOSE_NOT_FOUND, id="team deleted"),
    pytest.param(_team_left, consumers.CLOSE_NOT_FOUND, id="team left"),
    pytest.param(_conversation_given_away, consumers.CLOSE_NOT_FOUND, id="conversation given away"),
    pytest.param(_signed_out, consumers.CLOSE_UNAUTHENTICATED, id="signed out"),
    pytest.param(_deactivated, consumers.CLOSE_UNAUTHENTICATED, id="deactivated"),
]


@pytest.mark.parametrize(("revoke", "code"), REVOCATIONS)
async def test_a_catch_up_after_the_access_went_gets_nothing_and_the_socket_closes(
    revoke: Callable[[Class], Awaitable[None]], code: int
) -> None:
    room = await _class()
    bob = await _socket(room, "bob")
    await bob.send_json_to({"type": "catch_up", "since": SINCE_EVER})
    assert [m["type"] for m in await _caught_up(bob)] == ["turn", "row"]  # a team mate's, so far

    await revoke(room)
    await bob.send_json_to({"type": "catch_up", "since": SINCE_EVER})

    assert await _closed(bob) == code
    await _ring(room)
    assert await bob.receive_nothing(timeout=0.5)
    await bob.disconnect()


async def test_the_owner_keeps_her_socket_when_her_team_mate_loses_his(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(consumers, "ACCESS_RECHECK_SECONDS", 0.0)  # every doorbell asks again
    room = await _class()
    alice, bob = await _socket(room, "alice"), await _socket(room, "bob")

    await _team_deleted(room)
    await _ring(room)

    row = await alice.receive_json_from(timeout=WAIT)
    assert row["type"] == "row" and row["step_id"] == room.step.pk
    assert await _closed(bob) == consumers.CLOSE_NOT_FOUND
    await alice.send_json_to({"type": "catch_up", "since": SINCE_EVER})
    assert [m["type"] for m in await _caught_up(alice)] == ["turn", "row"]
    await bob.disconnect()
    await alice.disconnect()


async def test_doorbells_are_not_checked_one_by_one_and_stop_within_the_recheck_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    interval = 2.0
    monkeypatch.setattr(consumers, "ACCESS_RECHECK_SECONDS", interval)
    checks: list[float] = []
    real = consumers._refused

    def counted(**kwargs: Any) -> int | None:
        checks.append(time.monotonic())
        return real(**kwargs)

    monkeypatch.setattr(consumers, "_refused", counted)
    room = await _class()
    bob = await _socket(room, "bob")

    # A burst of doorbells right after the socket opened: passed on, no access read for any.
    for _ in range(20):
        await _ring(room)
    assert [(await bob.receive_json_from(timeout=WAIT))["type"] for _ in range(20)] == ["row"] * 20
    assert checks == []

    await _team_deleted(room)
    revoked = time.monotonic()
    async with asyncio.timeout(interval + WAIT):
        while True:
            await _ring(room)
            if await bob.receive_nothing(timeout=0.05):
                continue
            output = await bob.receive_output(timeout=WAIT)
            if output["type"] == "websocket.close":
                break
            assert output["type"] == "websocket.send"  # still within the interval: passed on
    stopped = time.monotonic() - revoked

    assert output["code"] == consumers.CLOSE_NOT_FOUND
    # The bound: doorbells rung after the access went are passed on until the next re-check,
    # at most the interval after the last one (plus a render in flight), and none after it.
    assert stopped < interval + 2.0
    assert len(checks) == 1, checks  # one read in the interval, not one per doorbell
    assert await bob.receive_nothing(timeout=0.5)
    await bob.disconnect()


async def test_without_redis_the_watch_tells_a_socket_whose_access_went_nothing(
    monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    # The embedded server: the conversation's watch tells its sockets it changed; bob's socket is
    # closed instead of told.
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    settings.LIVE_WATCH_SECONDS = 0.1
    monkeypatch.setattr(consumers, "ACCESS_RECHECK_SECONDS", 0.0)
    room = await _class()
    alice, bob = await _socket(room, "alice"), await _socket(room, "bob")
    assert await bob.receive_nothing(timeout=0.5)  # the watch's first read: nothing changed yet

    await _team_left(room)
    await Step.objects.acreate(turn=room.turn, seq=2, kind="answer", title="answer", text="Rain.")

    assert (await alice.receive_json_from(timeout=WAIT))["type"] == "changed"
    assert await _closed(bob) == consumers.CLOSE_NOT_FOUND
    await bob.disconnect()
    await alice.disconnect()
