"""What the UI app wires when Django is ready: the recorder's events ring the live view's doorbells."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from django.apps import apps

from conversations import events
from inspector import live

CONVERSATION = uuid.UUID("00000000-0000-4000-8000-000000000001")


@pytest.fixture
def rung(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, object]]]:
    """The doorbells the live view would ring, with nobody subscribed until the app is ready."""
    found: list[dict[str, object]] = []
    for name in ("publish_step_changed", "publish_turn_changed", "publish_step_partial"):
        monkeypatch.setattr(live, name, lambda **event: found.append(event))
    monkeypatch.setattr(events, "_subscribers", ())
    yield found


def test_once_the_app_is_ready_each_recorder_event_rings_its_doorbell(rung: list[dict[str, object]]) -> None:
    events.emit(events.TurnChanged(conversation_id=CONVERSATION, turn_id=1))
    assert rung == []

    apps.get_app_config("inspector").ready()
    events.emit(events.StepChanged(conversation_id=CONVERSATION, turn_id=1, step_id=2))
    events.emit(events.TurnChanged(conversation_id=CONVERSATION, turn_id=1))
    events.emit(events.StepPartial(conversation_id=CONVERSATION, turn_id=1, step_id=2, text="Pa", calls=[]))

    assert rung == [
        {"conversation_id": CONVERSATION, "turn_id": 1, "step_id": 2},
        {"conversation_id": CONVERSATION, "turn_id": 1},
        {"conversation_id": CONVERSATION, "turn_id": 1, "step_id": 2, "text": "Pa", "calls": []},
    ]


def test_the_app_being_ready_twice_rings_each_doorbell_once(rung: list[dict[str, object]]) -> None:
    apps.get_app_config("inspector").ready()
    apps.get_app_config("inspector").ready()

    events.emit(events.TurnChanged(conversation_id=CONVERSATION, turn_id=1))

    assert rung == [{"conversation_id": CONVERSATION, "turn_id": 1}]
