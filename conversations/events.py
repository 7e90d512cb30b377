"""What the recorder announces once a row is committed: a turn or a step changed, or a streamed
reply grew. Framework-free, so the recorder needs no UI to announce anything.

Whoever shows the record live subscribes when its app is ready (``inspector.live`` turns each
event into a doorbell on the channel layer). Emitting with no subscriber does nothing; a
subscriber that fails is logged and the next one still hears the event, because the record is
already stored and an announcement must never break the write it follows.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from uuid import UUID

from conversations.typealias import JSONDict

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StepChanged:
    conversation_id: UUID
    turn_id: int
    step_id: int


@dataclass(frozen=True, slots=True)
class TurnChanged:
    conversation_id: UUID
    turn_id: int


@dataclass(frozen=True, slots=True)
class StepPartial:
    """A streamed model reply as far as it has arrived (redacted; never stored as such)."""

    conversation_id: UUID
    turn_id: int
    step_id: int
    text: str
    calls: list[JSONDict]


Event = StepChanged | TurnChanged | StepPartial
Subscriber = Callable[[Event], None]

_subscribers: tuple[Subscriber, ...] = ()
_lock = threading.Lock()


def subscribe(subscriber: Subscriber) -> None:
    """Hear every event emitted from now on, in this process. Subscribing twice is once."""
    global _subscribers
    with _lock:
        if subscriber not in _subscribers:
            _subscribers = (*_subscribers, subscriber)


def unsubscribe(subscriber: Subscriber) -> None:
    global _subscribers
    with _lock:
        _subscribers = tuple(s for s in _subscribers if s != subscriber)


def emit(event: Event) -> None:
    """Tell every subscriber, in the order they subscribed. Never raises: a subscriber's failure
    is logged. Callers emit after the rows the event names are committed."""
    for subscriber in _subscribers:
        try:
            subscriber(event)
        except Exception:  # the record is stored; a lost announcement is caught up on reconnect
            logger.exception("a subscriber failed on %s", type(event).__name__)
