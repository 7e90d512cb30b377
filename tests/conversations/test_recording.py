"""The recorder against the real database: what the loop saw is written before it waits again,
in one transaction per step, with the exchanges in hash-chain order."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.contrib.auth.models import User
from django.db import connection

from conversations.integrity import conversation_verify
from conversations.models import Conversation, Exchange, ModelProfile, Step, Turn
from conversations.recording import TurnRecorder
from inspector.wire import WireExchange

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def turn() -> Turn:
    alice = User.objects.create_user("alice")
    profile = ModelProfile.objects.create(name="p-alice", model="demo", is_demo=True)
    conversation = Conversation.objects.create(owner=alice, title="weather", model_profile=profile)
    return Turn.objects.create(
        conversation=conversation, seq=1, question="Weather?", paradigm="native", tool_choice="auto"
    )


def _exchange(label: str) -> WireExchange:
    return WireExchange(
        channel="mcp", label=label, started_at=datetime.now(UTC), request_body="{}", response_body="{}"
    )


def test_a_steps_updates_are_written_by_the_time_the_next_step_opens(turn: Turn) -> None:
    recorder = TurnRecorder(turn)
    decide = recorder.step_open(kind="decide", title="model call 1")
    recorder.step_save(decide, text="I will call the weather tool", exchanges=[_exchange("llm")])
    recorder.step_save(decide, title="calls get_weather_forecast", calls=[{"name": "get_weather_forecast"}])

    tool = recorder.step_open(kind="tool", title="demo/get_weather_forecast", parent=decide)

    written = Step.objects.get(pk=decide)
    assert written.text == "I will call the weather tool"
    assert written.title == "calls get_weather_forecast"
    assert written.calls == [{"name": "get_weather_forecast"}]
    assert list(Exchange.objects.filter(step_id=decide).values_list("label", flat=True)) == ["llm"]
    assert Step.objects.get(pk=tool).parent_id == decide


def test_flushing_writes_the_last_close_and_keeps_the_hash_chain_intact(turn: Turn) -> None:
    recorder = TurnRecorder(turn)
    decide = recorder.step_open(kind="decide", title="model call 1")
    recorder.step_save(decide, exchanges=[_exchange("first"), _exchange("second")])
    tool = recorder.step_open(kind="tool", title="demo/calculate", parent=decide)
    recorder.step_close(tool, status="ok", result={"content": []}, exchanges=[_exchange("tools/call")])
    recorder.step_close(decide, status="ok")
    recorder.turn_save("answer")

    recorder.flush()

    assert Step.objects.get(pk=tool).status == "ok"
    assert Step.objects.get(pk=decide).finished_at is not None
    labels = list(Exchange.objects.filter(turn=turn).order_by("seq").values_list("label", flat=True))
    assert labels == ["first", "second", "tools/call"]
    assert conversation_verify(conversation=turn.conversation).intact


def test_a_flush_with_nothing_pending_writes_nothing(turn: Turn, django_assert_num_queries: object) -> None:
    recorder = TurnRecorder(turn)

    with django_assert_num_queries(0):  # type: ignore[operator]
        recorder.flush()


def test_unknown_step_fields_are_refused_before_anything_is_written(turn: Turn) -> None:
    recorder = TurnRecorder(turn)
    step = recorder.step_open(kind="decide", title="model call 1")

    with pytest.raises(TypeError, match="not Step fields: colour"):
        recorder.step_save(step, colour="blue")


@pytest.mark.postgres
def test_between_writes_the_recorder_holds_no_pooled_connection(turn: Turn) -> None:
    if not connection.settings_dict["OPTIONS"].get("pool"):
        pytest.fail("the Postgres pass runs with the connection pool configured")
    recorder = TurnRecorder(turn)

    step = recorder.step_open(kind="decide", title="model call 1")

    assert connection.connection is None
    recorder.step_close(step, status="ok")
    recorder.flush()
    assert connection.connection is None
    assert Step.objects.get(pk=step).status == "ok"
