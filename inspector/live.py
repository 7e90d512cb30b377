"""The only module that talks to the channel layer: it rings the doorbell, never carries data.

Events name a row that changed; consumers render it from the database. In the embedded
default the in-memory layer is not thread-safe across event loops, so a send from a worker
thread is scheduled on the web server's own loop (bound by the first consumer that connects).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Literal, TypedDict
from uuid import UUID

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer

from inspector.typealias import JSONDict

logger = logging.getLogger(__name__)


class StepChanged(TypedDict):
    type: Literal["step.changed"]
    turn_id: int
    step_id: int


class TurnChanged(TypedDict):
    type: Literal["turn.changed"]
    turn_id: int


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


def conversation_group(public_id: UUID | str) -> str:
    return f"conversation.{public_id}"


def bind_server_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Remember the loop consumers run on, so in-memory sends can be made on it."""
    global _server_loop
    with _lock:
        _server_loop = loop


def _send(group: str, event: Event) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    loop = _server_loop
    try:
        if isinstance(layer, InMemoryChannelLayer):
            if loop is None or loop.is_closed():
                return  # no consumer has ever connected in this process: nobody to tell
            asyncio.run_coroutine_threadsafe(layer.group_send(group, dict(event)), loop)
        else:
            async_to_sync(layer.group_send)(group, dict(event))
    except Exception:  # noqa: BLE001 — the record is already stored; a lost doorbell is caught up on reconnect
        logger.exception("could not publish %s to %s", event["type"], group)


def publish_step_changed(*, conversation_id: UUID, turn_id: int, step_id: int) -> None:
    _send(
        conversation_group(conversation_id),
        StepChanged(type="step.changed", turn_id=turn_id, step_id=step_id),
    )


def publish_turn_changed(*, conversation_id: UUID, turn_id: int) -> None:
    _send(conversation_group(conversation_id), TurnChanged(type="turn.changed", turn_id=turn_id))


def publish_step_partial(
    *, conversation_id: UUID, turn_id: int, step_id: int, text: str, calls: list[JSONDict]
) -> None:
    _send(
        conversation_group(conversation_id),
        StepPartial(type="step.partial", turn_id=turn_id, step_id=step_id, text=text, calls=calls),
    )
