"""What a streamed reply shows while it grows: redacted, and never half a secret."""

from __future__ import annotations

from typing import Any

import pytest

from conversations.loop.providers.streaming import PartialCall, PartialReply
from conversations.record.recording import TurnRecorder
from inspector import live
from tests.factories import TurnFactory

pytestmark = pytest.mark.django_db
KEY = "sk-proj-Abcdefghijklmnopqrstuvwxyz0123456789"


@pytest.fixture
def published(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(live, "publish_step_partial", lambda **event: seen.append(event))
    return seen


def test_a_secret_arriving_in_pieces_is_held_back_until_it_can_be_redacted(
    published: list[dict[str, Any]],
) -> None:
    recorder = TurnRecorder(TurnFactory())
    sink = recorder.partial_sink(1)

    sink(PartialReply(text="The key is " + KEY[:12], calls=()))
    first = published[-1]["text"]
    # A new sink: the first one's throttle would hold a snapshot this close to the last.
    recorder.partial_sink(1)(PartialReply(text="The key is " + KEY + " and more", calls=()))
    second = published[-1]["text"]

    assert first == "The key is " and KEY[:12] not in first
    assert KEY not in second and "REDACTED" in second and second == "The key is [REDACTED:api_key] and "


def test_growing_arguments_show_only_finished_values(published: list[dict[str, Any]]) -> None:
    recorder = TurnRecorder(TurnFactory())

    recorder.partial_sink(1)(
        PartialReply(
            text="", calls=(PartialCall(index=0, id="c1", name="login", arguments='{"token": "' + KEY[:20]),)
        )
    )
    shown = published[-1]["calls"][0]

    assert shown["arguments"] == '{"token": "' and shown["name"] == "login"
