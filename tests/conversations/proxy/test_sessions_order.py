"""Records stored in another order than their calls were made: the LLM proxy stores its records
from a pool of threads and the stdio proxy in groups once traffic pauses, so a host that asks its
next question at once can have that question's first model call stored before the last call (or
the ``tools/call``) of the question before. Each record still belongs to the turn of its question,
told by its ``started_at``: when it crossed the proxy (``tests/servers/proxy/test_recorder_times.py``)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from conversations.models import Step
from conversations.proxy.keys import create_key
from conversations.proxy.models import ProxyKey, ProxySession
from conversations.proxy.recording import record_mcp, record_model_call
from conversations.record.verification import conversation_verify
from tests.conversations.proxy.wire import chat_call, tools_call

pytestmark = pytest.mark.django_db(transaction=True)
TOKYO = {"timezone": "Asia/Tokyo"}


def _key() -> ProxyKey:
    return create_key(get_user_model().objects.create_user("alice"), name="laptop")[0]


def test_a_model_call_stored_after_the_next_questions_first_call_stays_in_its_turn() -> None:
    key = _key()
    start = timezone.now()
    asked = chat_call(question="What time is it in Tokyo?", calls=[("call_1", "get_current_time", TOKYO)])
    answered = chat_call(
        question="What time is it in Tokyo?", tool_results=[("call_1", "12:00")], text="Noon."
    )
    second = chat_call(
        question="And in Lima?", calls=[("call_2", "get_current_time", {"timezone": "America/Lima"})]
    )

    record_model_call(key, session="s", fmt="openai_chat", exchange=replace(asked, started_at=start))
    record_mcp(
        key,
        session="s",
        server_name="time",
        records=[replace(tools_call("get_current_time", TOKYO), started_at=start + timedelta(seconds=1))],
    )
    record_model_call(
        key, session="s", fmt="openai_chat", exchange=replace(second, started_at=start + timedelta(seconds=3))
    )
    # Stored last, made second.
    record_model_call(
        key,
        session="s",
        fmt="openai_chat",
        exchange=replace(answered, started_at=start + timedelta(seconds=2)),
    )

    conversation = ProxySession.objects.get(key=key).conversation
    assert [turn.question for turn in conversation.turns.order_by("seq")] == [
        "What time is it in Tokyo?",
        "And in Lima?",
    ]
    first = conversation.turns.get(seq=1)
    assert first.answer == "Noon." and first.steps.filter(kind="decide").count() == 2
    # The late record joined the chain in turn order: the turn after it is chained on and sealed again.
    assert conversation_verify(conversation=conversation).intact


def test_a_tools_call_stored_after_the_next_questions_first_call_is_linked_in_its_turn() -> None:
    key = _key()
    start = timezone.now()
    asked = chat_call(question="What time is it in Tokyo?", calls=[("call_1", "get_current_time", TOKYO)])
    second = chat_call(question="And in Lima?")

    record_model_call(key, session="s", fmt="openai_chat", exchange=replace(asked, started_at=start))
    record_model_call(
        key, session="s", fmt="openai_chat", exchange=replace(second, started_at=start + timedelta(seconds=3))
    )
    # The stdio proxy's batch of the first question's tools/call, stored after the second question.
    record_mcp(
        key,
        session="s",
        server_name="time",
        records=[replace(tools_call("get_current_time", TOKYO), started_at=start + timedelta(seconds=1))],
    )

    tool = Step.objects.get(turn__conversation__proxy_session__key=key, kind="tool")
    assert tool.parent is not None and tool.parent.calls[0]["linked_by"] == "arguments"
    assert tool.turn.question == "What time is it in Tokyo?"
    assert conversation_verify(conversation=tool.turn.conversation).intact


def test_a_late_call_of_a_question_asked_later_joins_that_questions_turn() -> None:
    key = _key()
    start = timezone.now()
    first = chat_call(question="What time is it in Tokyo?", text="Noon.")
    second = chat_call(
        question="And in Lima?", calls=[("call_2", "get_current_time", {"timezone": "America/Lima"})]
    )
    second_answered = chat_call(question="And in Lima?", tool_results=[("call_2", "22:00")], text="Ten.")

    record_model_call(key, session="s", fmt="openai_chat", exchange=replace(first, started_at=start))
    record_model_call(
        key,
        session="s",
        fmt="openai_chat",
        exchange=replace(second_answered, started_at=start + timedelta(seconds=3)),
    )
    # The second question's first call, stored after its second.
    record_model_call(
        key, session="s", fmt="openai_chat", exchange=replace(second, started_at=start + timedelta(seconds=2))
    )

    conversation = ProxySession.objects.get(key=key).conversation
    turns = list(conversation.turns.order_by("seq"))
    assert [turn.question for turn in turns] == ["What time is it in Tokyo?", "And in Lima?"]
    assert turns[1].steps.count() == 2 and turns[1].started_at == start + timedelta(seconds=2)
    assert conversation_verify(conversation=conversation).intact
