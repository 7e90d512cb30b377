"""The conversation websocket: auth, origin, access, live rows from another thread, catch-up."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from conversations.models import AuditEvent, Conversation, ModelProfile, Step, Team, Turn
from inspector import consumers, live
from inspector.asgi import application
from inspector.fragments import timestamp_iso
from inspector.preferences import preference_set
from inspector.routing import websocket_urlpatterns

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("async_db_connections")]


def _conversation(owner: User) -> tuple[Conversation, Turn, Step]:
    profile = ModelProfile.objects.create(name=f"p-{owner.username}", model="demo", is_demo=True)
    conversation = Conversation.objects.create(owner=owner, title="weather", model_profile=profile)
    turn = Turn.objects.create(
        conversation=conversation,
        seq=1,
        question="What will the weather be like?",
        paradigm="native",
        tool_choice="auto",
        status=Turn.Status.RUNNING,
    )
    step = Step.objects.create(
        turn=turn, seq=1, kind="decide", title="model call 1", text="thinking about Beijing"
    )
    return conversation, turn, step


def _path(conversation: Conversation) -> str:
    return f"/ws/conversations/{conversation.public_id}/"


async def _signed_in(
    user: User, conversation: Conversation, origin: bytes = b"http://127.0.0.1"
) -> WebsocketCommunicator:
    """A socket on ``conversation`` through the whole ASGI stack, with ``user``'s session cookie."""
    client = Client()
    await sync_to_async(client.force_login)(user)
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    return WebsocketCommunicator(
        application,
        _path(conversation),
        headers=[(b"origin", origin), (b"host", b"127.0.0.1"), (b"cookie", cookie)],
    )


@asynccontextmanager
async def _page_holding_the_synchronous_thread() -> AsyncIterator[asyncio.Future[None]]:
    """A long conversation's page being rendered in the server's one thread for synchronous
    work (where every view is) until the block ends; yields it, to check it still is."""
    page_started, page_may_end = threading.Event(), threading.Event()

    def slow_page() -> None:
        page_started.set()
        page_may_end.wait(timeout=30)

    page = asyncio.ensure_future(sync_to_async(slow_page)())
    await sync_to_async(page_started.wait, thread_sensitive=False)(10)
    try:
        yield page
    finally:
        page_may_end.set()
        await page


async def _as(user: User, conversation: Conversation) -> WebsocketCommunicator:
    communicator = WebsocketCommunicator(URLRouter(websocket_urlpatterns), _path(conversation))
    communicator.scope["user"] = user
    return communicator


async def _caught_up(communicator: WebsocketCommunicator) -> list[dict[str, Any]]:
    """A catch-up's messages, up to the ``caught_up`` that ends them (which says how many)."""
    messages = [await communicator.receive_json_from(timeout=10)]
    while messages[-1]["type"] != "caught_up":
        messages.append(await communicator.receive_json_from(timeout=10))
    end = messages.pop()
    assert end == {
        "type": "caught_up",
        "turns": sum(1 for m in messages if m["type"] == "turn"),
        "rows": sum(1 for m in messages if m["type"] == "row"),
    }
    return messages


async def test_an_anonymous_socket_is_closed_before_accept() -> None:
    alice = await User.objects.acreate(username="alice")
    conversation, _, _ = await sync_to_async(_conversation)(alice)
    communicator = WebsocketCommunicator(
        application, _path(conversation), headers=[(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1")]
    )

    connected, code = await communicator.connect()

    assert not connected
    assert code == 4401


async def test_a_foreign_origin_is_refused_even_with_a_valid_session() -> None:
    alice = await User.objects.acreate(username="alice")
    conversation, _, _ = await sync_to_async(_conversation)(alice)
    communicator = await _signed_in(alice, conversation, origin=b"http://evil.example")

    connected, _ = await communicator.connect()

    assert not connected


async def test_the_owner_connects_through_the_real_auth_stack() -> None:
    alice = await User.objects.acreate(username="alice")
    conversation, _, _ = await sync_to_async(_conversation)(alice)
    communicator = await _signed_in(alice, conversation)

    connected, _ = await communicator.connect()

    assert connected
    await communicator.disconnect()


async def test_another_user_through_the_real_auth_stack_answers_not_found() -> None:
    # The session's user is read in the sockets' own threads: each socket gets its own user.
    alice = await User.objects.acreate(username="alice")
    bob = await User.objects.acreate(username="bob")
    conversation, _, _ = await sync_to_async(_conversation)(alice)
    owner, stranger = await _signed_in(alice, conversation), await _signed_in(bob, conversation)

    (owner_in, _), (stranger_in, code) = await asyncio.gather(owner.connect(), stranger.connect())

    assert owner_in and not stranger_in
    assert code == consumers.CLOSE_NOT_FOUND
    await owner.disconnect()


async def test_another_users_conversation_answers_not_found() -> None:
    alice = await User.objects.acreate(username="alice")
    bob = await User.objects.acreate(username="bob")
    conversation, _, _ = await sync_to_async(_conversation)(alice)
    communicator = await _as(bob, conversation)

    connected, code = await communicator.connect()

    assert not connected
    assert code == 4404


async def test_a_step_published_from_a_worker_thread_arrives_rendered_from_the_database() -> None:
    alice = await User.objects.acreate(username="alice")
    conversation, turn, step = await sync_to_async(_conversation)(alice)
    communicator = await _as(alice, conversation)
    assert (await communicator.connect())[0]

    # Runners publish from plain threads; the in-memory layer needs the send made on our loop.
    publisher = threading.Thread(
        target=live.publish_step_changed,
        kwargs={"conversation_id": conversation.public_id, "turn_id": turn.pk, "step_id": step.pk},
    )
    publisher.start()
    publisher.join()
    message = await communicator.receive_json_from(timeout=5)

    assert message["type"] == "row"
    assert message["step_id"] == step.pk
    assert "thinking about Beijing" in message["html"]
    await communicator.disconnect()


async def test_a_reconnecting_browser_catches_up_from_the_last_change_it_saw() -> None:
    alice = await User.objects.acreate(username="alice")
    conversation, turn, step = await sync_to_async(_conversation)(alice)
    seen = timezone.now()
    later = await Step.objects.acreate(
        turn=turn, seq=2, kind="answer", title="final answer", text="It will rain."
    )
    await Step.objects.filter(pk=step.pk).aupdate(updated_at=seen - timedelta(minutes=5))
    communicator = await _as(alice, conversation)
    assert (await communicator.connect())[0]

    await communicator.send_json_to({"type": "catch_up", "since": seen.isoformat()})
    messages = await _caught_up(communicator)

    rows = [m["step_id"] for m in messages if m["type"] == "row"]
    assert rows == [later.pk]
    await communicator.disconnect()


async def test_a_page_catching_up_with_its_view_gets_only_what_it_does_not_hold() -> None:
    alice = await User.objects.acreate(username="alice")
    conversation, turn, step = await sync_to_async(_conversation)(alice)
    later = await Step.objects.acreate(turn=turn, seq=2, kind="answer", title="final answer", text="Rain.")
    await step.arefresh_from_db()
    communicator = await _as(alice, conversation)
    assert (await communicator.connect())[0]

    held = {str(step.pk): timestamp_iso(step.updated_at)}
    view = {"turns": {str(turn.pk): {"from_seq": 0, "held": held}}, "newest_seq": turn.seq}
    since = (step.updated_at - timedelta(seconds=5)).isoformat()
    await communicator.send_json_to({"type": "catch_up", "since": since, "view": view})
    messages = await _caught_up(communicator)

    assert [m["step_id"] for m in messages if m["type"] == "row"] == [later.pk]
    await communicator.disconnect()


async def test_a_catch_up_with_a_malformed_view_gets_an_error_message_and_everything() -> None:
    alice = await User.objects.acreate(username="alice")
    conversation, turn, step = await sync_to_async(_conversation)(alice)
    communicator = await _as(alice, conversation)
    assert (await communicator.connect())[0]

    since = (timezone.now() - timedelta(hours=1)).isoformat()
    await communicator.send_json_to({"type": "catch_up", "since": since, "view": {"turns": "all"}})
    error = await communicator.receive_json_from(timeout=10)
    messages = await _caught_up(communicator)

    # The view only saves work: refused, the page still gets what changed.
    assert error["type"] == "error" and "view" in error["message"]
    assert [(m["type"], m.get("step_id", m["turn_id"])) for m in messages] == [
        ("turn", turn.pk),
        ("row", step.pk),
    ]
    await communicator.disconnect()


@pytest.mark.parametrize(
    "frame",
    [
        {"text_data": "not json"},
        {"text_data": "[" * 100_000 + "]" * 100_000},
        {"bytes_data": b"\x00\xff"},
        {"text_data": json.dumps({"type": "catch_up", "since": 1700000000})},
        {"text_data": json.dumps({"type": "catch_up", "since": "2026-01-01" * 20})},
        # Decodes; a "since" that is not text is refused before anything reads it (str() of a
        # list nested near the recursion limit raised RecursionError there).
        {"text_data": '{"type": "catch_up", "since": ' + "[" * 900 + "]" * 900 + "}"},
    ],
)
async def test_a_hostile_frame_gets_an_error_message_and_the_socket_stays_usable(
    frame: dict[str, Any],
) -> None:
    alice = await User.objects.acreate(username="alice")
    conversation, _, _ = await sync_to_async(_conversation)(alice)
    communicator = await _as(alice, conversation)
    assert (await communicator.connect())[0]

    await communicator.send_to(**frame)
    message = await communicator.receive_json_from(timeout=10)
    await communicator.send_json_to({"type": "catch_up", "since": timezone.now().isoformat()})
    after = await _caught_up(communicator)

    assert message["type"] == "error"
    assert after == []
    await communicator.disconnect()


async def test_a_malformed_catch_up_gets_an_error_message_not_a_crash() -> None:
    alice = await User.objects.acreate(username="alice")
    conversation, _, _ = await sync_to_async(_conversation)(alice)
    communicator = await _as(alice, conversation)
    assert (await communicator.connect())[0]

    await communicator.send_json_to({"type": "catch_up", "since": "yesterday-ish"})
    message = await communicator.receive_json_from()

    assert message["type"] == "error"
    await communicator.disconnect()


# --- a class watching: one render per doorbell for every socket of the process ---------------


def _counting(monkeypatch: pytest.MonkeyPatch, name: str) -> list[int]:
    """Count the consumer's renders of one kind (``render_row`` or ``render_turn``)."""
    calls: list[int] = []
    real = getattr(consumers, name)

    def counted(**kwargs: Any) -> Any:
        calls.append(kwargs.get("step_id", kwargs.get("turn_id")))
        return real(**kwargs)

    monkeypatch.setattr(consumers, name, counted)
    return calls


def _ring(target: Any, **kwargs: Any) -> None:
    """Ring a doorbell from a plain thread, as runners do (the in-memory layer sends on our loop)."""
    publisher = threading.Thread(target=target, kwargs=kwargs)
    publisher.start()
    publisher.join()


async def _watchers(users: list[User], conversation: Conversation) -> list[WebsocketCommunicator]:
    sockets = [await _as(user, conversation) for user in users]
    for socket in sockets:
        assert (await socket.connect())[0]
    return sockets


async def test_the_sockets_watching_a_conversation_share_one_render_of_each_doorbell(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    alice = await User.objects.acreate(username="alice")
    bob = await User.objects.acreate(username="bob")
    conversation, turn, step = await sync_to_async(_conversation)(alice)
    await sync_to_async(lambda: Team.objects.create(name="class").members.add(alice, bob))()
    rows, turns = _counting(monkeypatch, "render_row"), _counting(monkeypatch, "render_turn")
    sockets = await _watchers([alice, alice, bob, bob, bob], conversation)

    _ring(live.publish_turn_changed, conversation_id=conversation.public_id, turn_id=turn.pk)
    _ring(live.publish_step_changed, conversation_id=conversation.public_id, turn_id=turn.pk, step_id=step.pk)
    received = [
        [await socket.receive_json_from(timeout=5), await socket.receive_json_from(timeout=5)]
        for socket in sockets
    ]

    assert (rows, turns) == ([step.pk], [turn.pk])
    for turn_message, row in received:
        assert turn_message == received[0][0] and turn_message["type"] == "turn"
        assert row == received[0][1] and row["type"] == "row" and "thinking about Beijing" in row["html"]
    for socket in sockets:
        await socket.disconnect()


async def test_a_row_rung_again_after_a_change_is_rendered_anew_for_every_socket(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    alice = await User.objects.acreate(username="alice")
    conversation, turn, step = await sync_to_async(_conversation)(alice)
    rows = _counting(monkeypatch, "render_row")
    sockets = await _watchers([alice, alice, alice], conversation)
    ring = {"conversation_id": conversation.public_id, "turn_id": turn.pk, "step_id": step.pk}

    _ring(live.publish_step_changed, **ring)
    first = [await socket.receive_json_from(timeout=5) for socket in sockets]
    await Step.objects.filter(pk=step.pk).aupdate(text="It will rain in Beijing.")
    _ring(live.publish_step_changed, **ring)
    second = [await socket.receive_json_from(timeout=5) for socket in sockets]

    assert rows == [step.pk, step.pk]
    assert all("thinking about Beijing" in message["html"] for message in first)
    assert all("It will rain in Beijing." in message["html"] for message in second)
    for socket in sockets:
        await socket.disconnect()


async def test_teaching_and_plain_sockets_each_get_a_render_of_their_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    alice = await User.objects.acreate(username="alice")
    conversation, turn, step = await sync_to_async(_conversation)(alice)
    rows = _counting(monkeypatch, "render_row")
    plain = await _watchers([alice, alice], conversation)
    await sync_to_async(preference_set)(user=alice, teaching=True)
    teaching = await _watchers([alice, alice], conversation)

    _ring(live.publish_step_changed, conversation_id=conversation.public_id, turn_id=turn.pk, step_id=step.pk)
    plain_html = [(await socket.receive_json_from(timeout=5))["html"] for socket in plain]
    teaching_html = [(await socket.receive_json_from(timeout=5))["html"] for socket in teaching]

    assert rows == [step.pk, step.pk]
    assert all('class="teach teach-step"' not in html for html in plain_html)
    assert all('class="teach teach-step"' in html for html in teaching_html)
    for socket in [*plain, *teaching]:
        await socket.disconnect()


async def test_a_doorbell_without_a_ring_is_rendered_for_each_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    # As a sender from before rings were sent would ring it: nothing to tell one doorbell from another.
    alice = await User.objects.acreate(username="alice")
    conversation, turn, step = await sync_to_async(_conversation)(alice)
    rows = _counting(monkeypatch, "render_row")
    sockets = await _watchers([alice, alice], conversation)

    await get_channel_layer().group_send(
        live.conversation_group(conversation.public_id),
        {"type": "step.changed", "turn_id": turn.pk, "step_id": step.pk},
    )
    received = [await socket.receive_json_from(timeout=5) for socket in sockets]

    assert rows == [step.pk, step.pk]
    assert all(message["step_id"] == step.pk for message in received)
    for socket in sockets:
        await socket.disconnect()


async def test_a_shared_render_outlives_a_waiter_that_goes_away() -> None:
    renders = consumers.SharedRenders()
    release = asyncio.Event()
    made: list[str] = []

    async def render() -> str:
        await release.wait()
        made.append("row")
        return "row"

    leaving = asyncio.ensure_future(renders.get("ring", render))
    staying = asyncio.ensure_future(renders.get("ring", render))
    await asyncio.sleep(0)
    leaving.cancel()
    release.set()

    assert await staying == "row"
    assert made == ["row"]
    with pytest.raises(asyncio.CancelledError):
        await leaving


async def test_a_failed_render_is_forgotten_and_a_finished_one_after_a_while() -> None:
    renders = consumers.SharedRenders()
    renders.KEEP_SECONDS = 0.05
    attempts: list[int] = []

    async def flaky() -> int:
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionError("the database went away")
        return len(attempts)

    with pytest.raises(ConnectionError):
        await renders.get("ring", flaky)
    assert len(renders) == 0
    assert await renders.get("ring", flaky) == 2
    assert await renders.get("ring", flaky) == 2  # kept for those still in line
    await asyncio.sleep(0.2)
    assert len(renders) == 0
    assert await renders.get("ring", flaky) == 3


async def test_shared_renders_are_bounded_in_number_and_in_characters() -> None:
    renders = consumers.SharedRenders()

    async def render() -> str:
        return "row"

    for ring in range(renders.MOST + 50):
        await renders.get(ring, render)
    assert len(renders) == renders.MOST
    assert renders.chars == 3 * renders.MOST

    renders = consumers.SharedRenders()
    renders.MOST_CHARS = 25

    async def big() -> str:
        return "x" * 10

    for ring in range(10):
        assert await renders.get(ring, big) == "x" * 10
    assert (len(renders), renders.chars) == (2, 20)

    async def huge() -> str:
        return "x" * 100

    # Bigger than the budget alone: those waiting get it, nothing is kept.
    assert await renders.get("huge", huge) == "x" * 100
    assert (len(renders), renders.chars) == (0, 0)


async def test_a_page_holding_the_servers_synchronous_thread_does_not_hold_back_a_live_row() -> None:
    alice = await User.objects.acreate(username="alice")
    conversation, turn, step = await sync_to_async(_conversation)(alice)
    socket = (await _watchers([alice], conversation))[0]
    async with _page_holding_the_synchronous_thread() as page:
        _ring(
            live.publish_step_changed,
            conversation_id=conversation.public_id,
            turn_id=turn.pk,
            step_id=step.pk,
        )
        row = await socket.receive_json_from(timeout=5)
        assert not page.done()

    assert row["step_id"] == step.pk and "thinking about Beijing" in row["html"]
    await socket.disconnect()


async def test_a_socket_opens_and_catches_up_while_a_page_holds_the_servers_synchronous_thread() -> None:
    # A class reconnecting while its pages load: the socket's user, access, audit and catch-up
    # are read beside the pages, not queued behind them.
    alice = await User.objects.acreate(username="alice")
    conversation, turn, step = await sync_to_async(_conversation)(alice)
    communicator = await _signed_in(alice, conversation)
    async with _page_holding_the_synchronous_thread() as page:
        connected, _ = await communicator.connect(timeout=5)
        assert connected
        await communicator.send_json_to({"type": "catch_up", "since": "2000-01-01T00:00:00+00:00"})
        messages = await _caught_up(communicator)
        assert not page.done()

    assert [(m["type"], m.get("step_id", m["turn_id"])) for m in messages] == [
        ("turn", turn.pk),
        ("row", step.pk),
    ]
    opened = await AuditEvent.objects.filter(
        conversation_public_id=conversation.public_id, via="websocket"
    ).acount()
    assert opened == 1
    await communicator.disconnect()


async def test_without_redis_a_row_another_process_stored_makes_the_page_catch_up(
    settings: Any,
) -> None:
    # The embedded server has no Redis: a row that `proxy stdio` (a process of its own) stores
    # rings no doorbell here. The socket notices the conversation changed and says so; the page
    # then catches up and gets the row.
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    settings.LIVE_WATCH_SECONDS = 0.2
    alice = await User.objects.acreate(username="alice")
    conversation, turn, _step = await sync_to_async(_conversation)(alice)
    communicator = await _as(alice, conversation)
    assert (await communicator.connect())[0]
    assert await communicator.receive_nothing(timeout=0.8)  # nothing changed: nothing said
    before = timezone.now()

    stored = await Step.objects.acreate(turn=turn, seq=2, kind="answer", title="answer", text="Rain.")

    changed = await communicator.receive_json_from(timeout=5)
    assert changed["type"] == "changed" and changed["at"] >= before.isoformat()[:19]
    await communicator.send_json_to({"type": "catch_up", "since": before.isoformat()})
    rows = [m["step_id"] for m in await _caught_up(communicator) if m["type"] == "row"]
    assert rows == [stored.pk]
    assert await communicator.receive_nothing(timeout=0.8)  # said once per change
    await communicator.disconnect()
