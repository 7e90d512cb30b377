"""The proxies' recorder: a host's model calls and tools/calls become one linked, sealed record."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from conversations.models import Exchange, Step, Turn
from conversations.proxy.keys import create_key
from conversations.proxy.models import ProxySession
from conversations.proxy.recording import record_mcp, record_model_call
from conversations.record.verification import conversation_verify
from tests.conversations.proxy.wire import chat_call, tools_call, tools_list

pytestmark = pytest.mark.django_db(transaction=True)


def _key():  # type: ignore[no-untyped-def]
    alice = get_user_model().objects.create_user("alice")
    key, _ = create_key(alice, name="laptop")
    return key


def test_a_model_call_and_the_tools_call_it_asked_for_are_one_linked_sealed_turn() -> None:
    key = _key()
    record_mcp(key, session="s1", server_name="time", records=[tools_list(["get_current_time"])])
    llm_id = record_model_call(
        key,
        session="s1",
        fmt="openai_chat",
        exchange=chat_call(calls=[("call_1", "get_current_time", {"timezone": "Asia/Tokyo"})]),
    )
    [call_id] = record_mcp(
        key,
        session="s1",
        server_name="time",
        records=[tools_call("get_current_time", {"timezone": "Asia/Tokyo"}, call_id="call_1")],
    )

    session = ProxySession.objects.get(key=key, hint="s1")
    turn = Turn.objects.get(conversation=session.conversation)
    decide = Step.objects.get(turn=turn, kind="decide")
    tool = Step.objects.get(turn=turn, kind="tool")
    assert Exchange.objects.get(pk=llm_id).step_id == decide.pk
    assert turn.question == "What time is it in Tokyo?"
    assert decide.calls[0]["name"] == "get_current_time"
    assert decide.calls[0]["linked_by"] == "call_id" and decide.calls[0]["tool_step"] == tool.seq
    assert tool.parent_id == decide.pk and Exchange.objects.get(pk=call_id).step_id == tool.pk
    assert decide.usage["prompt_tokens"] == 12
    report = conversation_verify(conversation=session.conversation)
    assert report.intact, report.reason
    out = StringIO()
    call_command("verify", str(session.conversation.public_id), stdout=out)
    assert out.getvalue().startswith("intact:")
