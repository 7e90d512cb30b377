"""Doorbells through the real Redis channel layer: sent in order from one publisher thread,
without blocking the caller, and again once a Redis that was away is back."""

from __future__ import annotations

import asyncio
import threading
import uuid
from pathlib import Path

import pytest
import redis
from channels.layers import get_channel_layer
from channels_redis.pubsub import RedisPubSubChannelLayer
from django.test import override_settings

from conversations import events
from inspector import live
from tests.services import PrivateRedis
from tests.support import free_port

pytestmark = [pytest.mark.celery, pytest.mark.usefixtures("redis_url")]


async def _subscribe(conversation_id: uuid.UUID) -> str:
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add(live.conversation_group(conversation_id), channel)
    return channel


async def test_doorbells_from_a_worker_thread_arrive_in_the_order_they_were_rung() -> None:
    conversation_id = uuid.uuid4()
    channel = await _subscribe(conversation_id)

    def ring() -> None:
        for step_id in range(1, 31):
            live.publish_step_changed(conversation_id=conversation_id, turn_id=7, step_id=step_id)
        live.publish_turn_changed(conversation_id=conversation_id, turn_id=7)
        assert live.flush(timeout=10)

    worker = threading.Thread(target=ring)
    worker.start()
    worker.join()

    layer = get_channel_layer()
    received = [await layer.receive(channel) for _ in range(31)]
    assert [event.get("step_id") for event in received[:30]] == list(range(1, 31))
    assert {key: value for key, value in received[30].items() if key != "ring"} == {
        "type": "turn.changed",
        "turn_id": 7,
    }
    # Each doorbell sent has a ring of its own: the consumers hearing it render it once between them.
    rings = [event["ring"] for event in received]
    assert len(set(rings)) == 31


async def test_a_doorbell_rung_again_before_it_was_sent_is_not_sent_twice() -> None:
    conversation_id = uuid.uuid4()
    channel = await _subscribe(conversation_id)

    def ring() -> None:
        for _ in range(50):
            live.publish_step_changed(conversation_id=conversation_id, turn_id=7, step_id=1)
        live.publish_turn_changed(conversation_id=conversation_id, turn_id=7)
        assert live.flush(timeout=10)

    worker = threading.Thread(target=ring)
    worker.start()
    worker.join()

    layer = get_channel_layer()
    received = []
    while True:
        event = await layer.receive(channel)
        received.append(event)
        if event["type"] == "turn.changed":
            break
    steps = [event for event in received if event["type"] == "step.changed"]
    assert 1 <= len(steps) < 50
    assert all(
        {key: value for key, value in event.items() if key != "ring"}
        == {"type": "step.changed", "turn_id": 7, "step_id": 1}
        for event in steps
    )
    assert len({event["ring"] for event in steps}) == len(steps)


def test_a_forked_process_rings_with_a_token_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    rings = live._Rings()
    monkeypatch.setattr(live.os, "getpid", lambda: 100)
    parent = [rings.next(), rings.next()]
    monkeypatch.setattr(live.os, "getpid", lambda: 101)
    child = rings.next()

    tokens = {ring.split(".")[0] for ring in parent}
    assert len(tokens) == 1 and len(set(parent)) == 2
    assert child.split(".")[0] not in tokens


async def test_a_waiting_partial_is_replaced_by_the_newer_one_never_dropped_for_an_older_one() -> None:
    conversation_id = uuid.uuid4()
    channel = await _subscribe(conversation_id)

    def stream() -> None:
        for n in range(1, 51):
            for step_id in (2, 3):
                live.publish_step_partial(
                    conversation_id=conversation_id, turn_id=7, step_id=step_id, text="x" * n, calls=[]
                )
        live.publish_turn_changed(conversation_id=conversation_id, turn_id=7)
        assert live.flush(timeout=10)

    worker = threading.Thread(target=stream)
    worker.start()
    worker.join()

    layer = get_channel_layer()
    received = []
    while True:
        event = await layer.receive(channel)
        received.append(event)
        if event["type"] == "turn.changed":
            break
    for step_id in (2, 3):
        texts = [event["text"] for event in received if event.get("step_id") == step_id]
        # Each step's snapshots arrive growing, and the last one sent is the newest.
        assert texts and texts[-1] == "x" * 50
        assert [len(text) for text in texts] == sorted(len(text) for text in texts)


def test_the_scaled_layer_is_sent_to_a_batch_at_a_time_on_its_one_redis() -> None:
    # The tests above then run the pipelined path (one round trip per batch), not the fallback.
    assert isinstance(live._sender(get_channel_layer()), live._PipelinedPubSub)


def test_doorbells_reach_subscribers_again_once_a_restarted_redis_is_back(tmp_path: Path) -> None:
    server = PrivateRedis(free_port(), tmp_path)
    server.start()
    try:
        layer = RedisPubSubChannelLayer(hosts=[server.url])
        sender = live._PipelinedPubSub(layer, {"address": server.url})
        event = live.StepChanged(type="step.changed", turn_id=7, step_id=1)
        group = live.conversation_group(uuid.uuid4())
        listener = redis.Redis.from_url(server.url).pubsub()
        listener.subscribe(f"asgi__group__{group}")
        assert listener.get_message(timeout=5)["type"] == "subscribe"  # type: ignore[index]

        sender.send([(group, event)])
        assert layer.deserialize(listener.get_message(timeout=5)["data"]) == dict(event)  # type: ignore[index]

        server.restart()
        sender.send([(group, event)])  # the connection is gone: lost (and logged), not raised
        listener = redis.Redis.from_url(server.url).pubsub()
        listener.subscribe(f"asgi__group__{group}")
        assert listener.get_message(timeout=5)["type"] == "subscribe"  # type: ignore[index]
        sender.send([(group, event), (group, event)])
        received = [listener.get_message(timeout=5) for _ in range(2)]
        assert [layer.deserialize(message["data"]) for message in received] == [dict(event)] * 2  # type: ignore[index]
    finally:
        server.stop()


async def test_the_recorders_events_arrive_as_doorbells_through_the_layer() -> None:
    conversation_id = uuid.uuid4()
    channel = await _subscribe(conversation_id)

    def emit() -> bool:
        events.emit(events.StepChanged(conversation_id=conversation_id, turn_id=7, step_id=3))
        events.emit(events.TurnChanged(conversation_id=conversation_id, turn_id=7))
        return live.flush(timeout=10)

    assert await asyncio.to_thread(emit)

    layer = get_channel_layer()
    received = [await asyncio.wait_for(layer.receive(channel), timeout=10) for _ in range(2)]
    assert [{key: value for key, value in event.items() if key != "ring"} for event in received] == [
        {"type": "step.changed", "turn_id": 7, "step_id": 3},
        {"type": "turn.changed", "turn_id": 7},
    ]


async def test_a_process_whose_first_doorbells_find_redis_down_rings_again_once_it_is_up(
    tmp_path: Path,
) -> None:
    server = PrivateRedis(free_port(), tmp_path)  # not started: nothing listens on its port yet
    conversation_id = uuid.uuid4()

    def ring(steps: range) -> bool:
        for step_id in steps:
            events.emit(events.StepChanged(conversation_id=conversation_id, turn_id=7, step_id=step_id))
        return live.flush(timeout=30)

    scaled = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [server.url]},
        }
    }
    with override_settings(CHANNEL_LAYERS=scaled):
        # Nobody can hear these (nobody can subscribe to a Redis that is down): they are dropped
        # and logged, and the publisher thread lives on.
        assert await asyncio.to_thread(ring, range(1, 5))

        server.start()
        layer = get_channel_layer()
        try:
            channel = await _subscribe(conversation_id)
            assert await asyncio.to_thread(ring, range(5, 9))
            received = [await asyncio.wait_for(layer.receive(channel), timeout=30) for _ in range(4)]
        finally:
            await layer.flush()
            server.stop()

    assert [event["step_id"] for event in received] == [5, 6, 7, 8]


async def test_a_layer_configured_with_a_prefix_of_its_own_hears_the_doorbells(redis_url: str) -> None:
    conversation_id = uuid.uuid4()
    prefixed = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [redis_url], "prefix": "inspector-test"},
        }
    }
    with override_settings(CHANNEL_LAYERS=prefixed):
        layer = get_channel_layer()
        try:
            channel = await _subscribe(conversation_id)

            def ring() -> bool:
                events.emit(events.TurnChanged(conversation_id=conversation_id, turn_id=7))
                return live.flush(timeout=10)

            assert await asyncio.to_thread(ring)
            received = await asyncio.wait_for(layer.receive(channel), timeout=10)
        finally:
            await layer.flush()

    assert {key: value for key, value in received.items() if key != "ring"} == {
        "type": "turn.changed",
        "turn_id": 7,
    }
