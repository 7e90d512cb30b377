"""The only module that talks to the channel layer: it rings the doorbell, never carries data.

It hears the recorder's events (``conversations.events``; ``on_event`` is subscribed when the app
is ready), so the recorder knows nothing of the UI. Events name a row that changed; consumers
render it from the database. The recorder emits only after the row is committed, and a publish
never blocks it: events go to one long-lived publisher thread per process, which sends them in
order over one persistent connection. A doorbell still waiting to be sent is not queued twice:
the consumer renders the row as it is when the event arrives, so one ring covers every change
made before it.

With the Redis pub/sub layer on one Redis (the scaled deployment) the thread publishes each batch
of waiting events as ``PUBLISH`` commands written together, in the layer's own message format on
the channel its ``group_send`` would use (``_PipelinedPubSub``): one round trip per batch, where
the layer's coroutine costs one per event (a busy worker rings thousands a second). Any other
layer gets ``group_send`` per event on the thread's own event loop (a new loop per send would open
a new Redis connection each time).

The thread builds its sender inside its loop, and builds it again after a failure, so a Redis
that is down when a process first rings, or goes away later, costs the doorbells of that while
and no more: they are logged and dropped (the record is stored; a reconnecting browser catches
up from it), and ``flush`` still returns once they are.

In the embedded default the in-memory layer is not thread-safe across event loops, so its sends
are scheduled on the web server's own loop (bound by the first consumer that connects).

Each doorbell sent carries a ``ring``: an id no other doorbell has (a token of the sending
process, drawn when the module loads and again in a forked child, and a count). Every consumer
of a conversation's group hears the same ring, so the consumers of one web process render the
row it names once between them (``consumers.SharedRenders``).
"""

from __future__ import annotations

import asyncio
import atexit
import itertools
import logging
import os
import secrets
import threading
from collections import deque
from typing import Any, Literal, Protocol, TypedDict, cast
from uuid import UUID

import redis
from channels import DEFAULT_CHANNEL_LAYER
from channels.layers import BaseChannelLayer, InMemoryChannelLayer, get_channel_layer
from channels_redis.pubsub import RedisPubSubChannelLayer  # type: ignore[import-untyped]
from channels_redis.utils import decode_hosts  # type: ignore[import-untyped]
from django.conf import settings

from conversations import events
from conversations.typealias import JSONDict

logger = logging.getLogger(__name__)


class StepChanged(TypedDict):
    type: Literal["step.changed"]
    turn_id: int
    step_id: int
    ring: str


class TurnChanged(TypedDict):
    type: Literal["turn.changed"]
    turn_id: int
    ring: str


class StepPartial(TypedDict):
    """A streamed model reply as far as it has arrived. The one event that carries data: it is
    never stored (the exchange keeps the raw stream), so there is no row to render it from."""

    type: Literal["step.partial"]
    turn_id: int
    step_id: int
    text: str
    calls: list[JSONDict]


Event = StepChanged | TurnChanged | StepPartial

_server_loop: asyncio.AbstractEventLoop | None = None
_lock = threading.Lock()


class _Rings:
    """The rings of this process's doorbells: its token (drawn anew in a forked child) and a count."""

    def __init__(self) -> None:
        self.token = secrets.token_hex(8)
        self.pid = os.getpid()
        self.count = itertools.count()

    def next(self) -> str:
        pid = os.getpid()
        if pid != self.pid:
            with _lock:  # the token before the pid: whoever sees the child's pid sees its token
                if pid != self.pid:
                    self.token = secrets.token_hex(8)
                    self.pid = pid
        return f"{self.token}.{next(self.count)}"


_rings = _Rings()


def conversation_group(public_id: UUID | str) -> str:
    return f"conversation.{public_id}"


def bind_server_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Remember the loop consumers run on, so in-memory sends can be made on it."""
    global _server_loop
    with _lock:
        _server_loop = loop


_Key = tuple[str, str, int, int]


def _key(group: str, event: Event) -> _Key:
    step_id = event["step_id"] if event["type"] in {"step.changed", "step.partial"} else 0
    return (group, event["type"], event["turn_id"], step_id)


class _Sender(Protocol):
    """How the publisher thread hands a batch of events to the channel layer, in order."""

    def send(self, batch: list[tuple[str, Event]]) -> None: ...


class _GroupSends:
    """``group_send`` per event, on an event loop of the publisher thread's own."""

    def __init__(self, layer: BaseChannelLayer) -> None:
        self.layer = layer
        self.loop = asyncio.new_event_loop()

    def send(self, batch: list[tuple[str, Event]]) -> None:
        self.loop.run_until_complete(self._send_all(batch))

    async def _send_all(self, batch: list[tuple[str, Event]]) -> None:
        """Send a batch in order, in one pass of the loop (not one ``run_until_complete`` each)."""
        for group, event in batch:
            try:
                await self.layer.group_send(group, dict(event))
            except Exception:  # the record is stored; a lost doorbell is caught up on reconnect
                logger.exception("could not publish %s to %s", event["type"], group)


class _RedisConnection(Protocol):
    """What ``_PipelinedPubSub`` uses of a redis-py connection (its methods are untyped)."""

    def pack_commands(self, commands: list[tuple[str, str, bytes]]) -> list[bytes]: ...
    def send_packed_command(self, command: list[bytes]) -> None: ...
    def read_response(self) -> object: ...
    def disconnect(self) -> None: ...


class _PipelinedPubSub:
    """The Redis pub/sub layer's ``group_send`` for a whole batch at once: the ``PUBLISH``
    commands of the batch written together on one connection kept by the publisher thread, each
    message serialized by the layer itself on the channel its ``group_send`` uses
    (tests/inspector/test_live.py holds a consumer of the layer receiving them). The connection
    is used as it is, without a pool or a pipeline object per batch: their bookkeeping cost
    several times the round trip."""

    def __init__(self, layer: RedisPubSubChannelLayer, host: dict[str, Any], *, prefix: str = "asgi") -> None:
        self.prefix = prefix
        self.serialize = layer.serialize
        options = dict(host)
        address = options.pop("address", None)
        pool = (
            redis.ConnectionPool.from_url(address, **options) if address else redis.ConnectionPool(**options)
        )
        # A connection of its own, not lent by the pool: it connects when first written to (so
        # building the sender needs no Redis), and again after ``disconnect``.
        self.connection = cast(_RedisConnection, pool.make_connection())

    @staticmethod
    def usable(layer: BaseChannelLayer, config: dict[str, Any]) -> dict[str, Any] | None:
        """The one Redis host of a pub/sub layer built from ``config`` (None: another layer, or
        sharded over several)."""
        if not isinstance(layer, RedisPubSubChannelLayer):
            return None
        hosts = decode_hosts(config.get("hosts"))
        return dict(hosts[0]) if len(hosts) == 1 else None

    def send(self, batch: list[tuple[str, Event]]) -> None:
        commands = [
            ("PUBLISH", f"{self.prefix}__group__{group}", self.serialize(dict(event)))
            for group, event in batch
        ]
        connection = self.connection
        try:
            connection.send_packed_command(connection.pack_commands(commands))
            for _ in commands:
                connection.read_response()
        except Exception:  # the record is stored; lost doorbells are caught up on reconnect
            logger.exception("could not publish %d event(s)", len(batch))
            # The next batch connects afresh (the connection reconnects when it is used).
            connection.disconnect()


def _sender(layer: BaseChannelLayer) -> _Sender:
    """The sender for the default layer (the one ``_send`` publishes to). Its hosts and prefix are
    read from the settings it was built from: the layer keeps them under private names only."""
    layers: dict[str, dict[str, Any]] = settings.CHANNEL_LAYERS
    config: dict[str, Any] = dict(layers.get(DEFAULT_CHANNEL_LAYER, {}).get("CONFIG", {}))
    host = _PipelinedPubSub.usable(layer, config)
    if host is None:
        return _GroupSends(layer)
    return _PipelinedPubSub(layer, host, prefix=str(config.get("prefix", "asgi")))


class _Publisher:
    """A daemon thread that sends queued events in order, a batch at a time."""

    def __init__(self, layer: BaseChannelLayer) -> None:
        self.layer = layer
        self.pid = os.getpid()
        self._pending: deque[tuple[str, Event]] = deque()
        self._queued: set[_Key] = set()
        self._busy = 0  # events taken off the queue and not yet sent
        self._condition = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="live-publisher", daemon=True)
        self._thread.start()

    def put(self, group: str, event: Event) -> None:
        key = _key(group, event)
        with self._condition:
            if key in self._queued:
                if event["type"] == "step.partial":
                    # A partial carries data: the newest snapshot replaces the one still waiting.
                    for index, (waiting_group, waiting) in enumerate(self._pending):
                        if _key(waiting_group, waiting) == key:
                            self._pending[index] = (group, event)
                            break
                return  # the same doorbell is still waiting: it will cover this change too
            self._queued.add(key)
            self._pending.append((group, event))
            self._condition.notify()

    def wait_idle(self, timeout: float) -> bool:
        """Block until every event queued so far has been sent (or ``timeout`` seconds pass)."""
        with self._condition:
            return self._condition.wait_for(lambda: not self._pending and not self._busy, timeout)

    def _take(self) -> list[tuple[str, Event]]:
        with self._condition:
            self._condition.wait_for(lambda: bool(self._pending))
            batch = list(self._pending)
            self._pending.clear()
            self._queued.clear()
            self._busy = len(batch)
            return batch

    def _done(self) -> None:
        with self._condition:
            self._busy = 0
            self._condition.notify_all()

    def _run(self) -> None:
        sender: _Sender | None = None
        while True:
            batch = self._take()
            try:
                if sender is None:
                    sender = _sender(self.layer)
                sender.send(batch)
            except Exception:  # the thread must outlive anything a send (or building one) does
                logger.exception("could not publish %d event(s)", len(batch))
                sender = None  # built afresh for the next batch
            self._done()


_publisher: _Publisher | None = None


def _publisher_for(layer: BaseChannelLayer) -> _Publisher:
    global _publisher
    with _lock:
        if _publisher is None or _publisher.layer is not layer or _publisher.pid != os.getpid():
            _publisher = _Publisher(layer)
        return _publisher


def flush(timeout: float = 5.0) -> bool:
    """Wait until every event published so far in this process has been sent; False on timeout."""
    publisher = _publisher
    if publisher is None or publisher.pid != os.getpid():
        return True
    return publisher.wait_idle(timeout)


atexit.register(flush, 2.0)


def _send(group: str, event: Event) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    if isinstance(layer, InMemoryChannelLayer):
        loop = _server_loop
        if loop is None or loop.is_closed():
            return  # no consumer has ever connected in this process: nobody to tell
        try:
            asyncio.run_coroutine_threadsafe(layer.group_send(group, dict(event)), loop)
        except Exception:  # the record is already stored; a lost doorbell is caught up on reconnect
            logger.exception("could not publish %s to %s", event["type"], group)
        return
    _publisher_for(layer).put(group, event)


def on_event(event: events.Event) -> None:
    """The recorder's events as doorbells (subscribed to ``conversations.events`` by the app)."""
    if isinstance(event, events.StepChanged):
        publish_step_changed(
            conversation_id=event.conversation_id, turn_id=event.turn_id, step_id=event.step_id
        )
    elif isinstance(event, events.TurnChanged):
        publish_turn_changed(conversation_id=event.conversation_id, turn_id=event.turn_id)
    else:
        publish_step_partial(
            conversation_id=event.conversation_id,
            turn_id=event.turn_id,
            step_id=event.step_id,
            text=event.text,
            calls=event.calls,
        )


def publish_step_changed(*, conversation_id: UUID, turn_id: int, step_id: int) -> None:
    _send(
        conversation_group(conversation_id),
        StepChanged(type="step.changed", turn_id=turn_id, step_id=step_id, ring=_rings.next()),
    )


def publish_turn_changed(*, conversation_id: UUID, turn_id: int) -> None:
    _send(
        conversation_group(conversation_id),
        TurnChanged(type="turn.changed", turn_id=turn_id, ring=_rings.next()),
    )


def publish_step_partial(
    *, conversation_id: UUID, turn_id: int, step_id: int, text: str, calls: list[JSONDict]
) -> None:
    _send(
        conversation_group(conversation_id),
        StepPartial(type="step.partial", turn_id=turn_id, step_id=step_id, text=text, calls=calls),
    )
