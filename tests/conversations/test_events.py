"""The recorder's announcements: emitted to whoever subscribed, and never a reason for a write to
fail."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator

import pytest

from conversations import events

CONVERSATION = uuid.UUID("00000000-0000-4000-8000-000000000001")


@pytest.fixture(autouse=True)
def no_subscribers() -> Iterator[None]:
    """Each test starts with nobody listening (not even the live view) and leaves it as it was."""
    before = events._subscribers
    events._subscribers = ()
    yield
    events._subscribers = before


def test_an_event_with_no_subscriber_is_emitted_to_nobody_without_error() -> None:
    events.emit(events.TurnChanged(conversation_id=CONVERSATION, turn_id=1))

    assert events._subscribers == ()


def test_every_subscriber_hears_each_event_in_the_order_they_subscribed() -> None:
    heard: list[tuple[str, events.Event]] = []
    events.subscribe(lambda event: heard.append(("first", event)))
    events.subscribe(lambda event: heard.append(("second", event)))
    step = events.StepChanged(conversation_id=CONVERSATION, turn_id=1, step_id=2)

    events.emit(step)

    assert heard == [("first", step), ("second", step)]


def test_subscribing_twice_hears_each_event_once_and_unsubscribing_hears_no_more() -> None:
    heard: list[events.Event] = []
    events.subscribe(heard.append)
    events.subscribe(heard.append)
    turn = events.TurnChanged(conversation_id=CONVERSATION, turn_id=1)

    events.emit(turn)
    events.unsubscribe(heard.append)
    events.emit(turn)

    assert heard == [turn]


def test_a_failing_subscriber_is_logged_and_the_next_one_still_hears_the_event(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(event: events.Event) -> None:
        raise RuntimeError("the channel layer is away")

    heard: list[events.Event] = []
    events.subscribe(broken)
    events.subscribe(heard.append)
    partial = events.StepPartial(conversation_id=CONVERSATION, turn_id=1, step_id=2, text="Par", calls=[])

    with caplog.at_level(logging.ERROR, logger="conversations.events"):
        events.emit(partial)

    assert heard == [partial]
    assert "the channel layer is away" in caplog.text
    assert "StepPartial" in caplog.text
