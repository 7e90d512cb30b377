"""The conversation websocket: auth, origin, access, live rows from another thread, catch-up."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from conversations.models import Conversation, ModelProfile, Step, Turn
from inspector import live
from inspector.asgi import application
from inspector.fragments import timestamp_iso
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
    client = Client()
    await sync_to_async(client.force_login)(alice)
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    communicator = WebsocketCommunicator(
        application,
        _path(conversation),
        headers=[(b"origin", b"http://evil.example"), (b"host", b"127.0.0.1"), (b"cookie", cookie)],
    )

    connected, _ = await communicator.connect()

    assert not connected


async def test_the_owner_connects_through_the_real_auth_stack() -> None:
    alice = await User.objects.acreate(username="alice")
    conversation, _, _ = await sync_to_async(_conversation)(alice)
    client = Client()
    await sync_to_async(client.force_login)(alice)
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    communicator = WebsocketCommunicator(
        application,
        _path(conversation),
        headers=[(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1"), (b"cookie", cookie)],
    )

    connected, _ = await communicator.connect()

    assert connected
    await communicator.disconnect()


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
