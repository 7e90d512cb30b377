"""A streamed model reply reaches the websocket while it arrives, then the stored step replaces it:
a real turn (the demo model streaming slowly, the demo MCP server over stdio) run by a worker
thread, watched through the conversation consumer."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.db import connection

from conversations.models import Conversation, ModelProfile
from conversations.runner import turn_run
from conversations.services import conversation_start
from inspector import live
from inspector.routing import websocket_urlpatterns
from servers import gateway
from servers.services import demo_server_ensure

# Each streamed event a tenth of a second apart: slower than the 50 ms throttle, so each shows.
WEATHER = "[demo:drip=0.1] What will the weather be like in Beijing tomorrow?"

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("async_db_connections")]


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


def _start(owner: User, provider: str) -> tuple[Conversation, int]:
    profile = ModelProfile.objects.create(
        name=f"demo-{provider}-stream",
        provider=provider,
        model="demo",
        api_key_env="DEMO_MODEL_API_KEY",
        is_demo=True,
        stream=True,
    )
    conversation, turn = conversation_start(
        owner=owner, model_profile=profile, question=WEATHER, servers=[demo_server_ensure()], dispatch=False
    )
    return conversation, turn.pk


def _run_and_close(turn_id: int) -> None:
    """The turn, on a thread of the loop's executor, which then hands its pooled connection back
    (that thread outlives the test's loop, and a connection it kept would stay lent)."""
    try:
        turn_run(turn_id=turn_id)
    finally:
        connection.close()


async def _watch(owner: User, conversation: Conversation, turn_id: int) -> list[dict[str, Any]]:
    """Every message the socket got while the turn ran, in order, until the turn was done."""
    communicator = WebsocketCommunicator(
        URLRouter(websocket_urlpatterns), f"/ws/conversations/{conversation.public_id}/"
    )
    communicator.scope["user"] = owner
    assert (await communicator.connect())[0]
    running = asyncio.ensure_future(sync_to_async(_run_and_close, thread_sensitive=False)(turn_id))
    messages: list[dict[str, Any]] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        message = await communicator.receive_json_from(timeout=30)
        messages.append(message)
        if message["type"] == "turn" and message["status"] in ("done", "failed"):
            break
    await running
    await communicator.disconnect()
    return messages


def _grows(values: list[str]) -> bool:
    return all(later.startswith(earlier) for earlier, later in zip(values, values[1:], strict=False))


@pytest.mark.parametrize("provider", ["anthropic", "openai_chat"])
async def test_partial_replies_arrive_before_the_stored_step_replaces_them(provider: str) -> None:
    alice = await User.objects.acreate(username="alice")
    conversation, turn_id = await sync_to_async(_start)(alice, provider)

    messages = await _watch(alice, conversation, turn_id)

    assert messages[-1]["status"] == "done"
    partials = [m for m in messages if m["type"] == "partial"]
    steps = list(dict.fromkeys(m["step_id"] for m in partials))
    assert len(steps) == 2, "the call and the answer each stream under their own step"
    call_step, answer_step = steps

    # The call: its name first, then its arguments fragment by fragment, never JSON until the end.
    call_partials = [m for m in partials if m["step_id"] == call_step]
    arguments = [m["calls"][0]["arguments"] for m in call_partials if m["calls"]]
    assert {m["calls"][0]["name"] for m in call_partials if m["calls"]} == {"demo__get_weather_forecast"}
    assert _grows(arguments) and len(set(arguments)) > 2
    assert json.loads(arguments[-1]) == {"city": "Beijing", "day": "tomorrow"}
    # The answer: its text growing.
    texts = [m["text"] for m in partials if m["step_id"] == answer_step]
    assert _grows(texts) and len(set(texts)) > 2 and "Beijing" in texts[-1]

    # Each step's stored row (with its recorded exchange) comes after the last partial for it.
    for step in steps:
        last_partial = max(
            i for i, m in enumerate(messages) if m["type"] == "partial" and m["step_id"] == step
        )
        later_rows = [m for m in messages[last_partial:] if m["type"] == "row" and m["step_id"] == step]
        assert later_rows and "exchange-" in later_rows[-1]["html"]


async def test_a_partial_event_is_passed_on_as_data_and_never_as_markup() -> None:
    alice = await User.objects.acreate(username="alice")
    conversation, turn_id = await sync_to_async(_start)(alice, "anthropic")
    communicator = WebsocketCommunicator(
        URLRouter(websocket_urlpatterns), f"/ws/conversations/{conversation.public_id}/"
    )
    communicator.scope["user"] = alice
    assert (await communicator.connect())[0]
    hostile = "<img src=x onerror=alert(1)>"

    await sync_to_async(live.publish_step_partial, thread_sensitive=False)(
        conversation_id=conversation.public_id,
        turn_id=turn_id,
        step_id=7,
        text=hostile,
        calls=[{"index": 0, "id": "toolu_1", "name": hostile, "arguments": '{"a'}],
    )
    message = await communicator.receive_json_from(timeout=5)
    await communicator.disconnect()

    assert message == {
        "type": "partial",
        "turn_id": turn_id,
        "step_id": 7,
        "text": hostile,
        "calls": [{"index": 0, "id": "toolu_1", "name": hostile, "arguments": '{"a'}],
    }
    assert "html" not in message


async def test_another_users_socket_gets_no_partials() -> None:
    alice = await User.objects.acreate(username="alice")
    bob = await User.objects.acreate(username="bob")
    conversation, _ = await sync_to_async(_start)(alice, "anthropic")
    communicator = WebsocketCommunicator(
        URLRouter(websocket_urlpatterns), f"/ws/conversations/{conversation.public_id}/"
    )
    communicator.scope["user"] = bob

    connected, code = await communicator.connect()

    assert not connected and code == 4404
