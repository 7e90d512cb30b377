"""Linking runs in every record of a session, under the session's lock, so what it reads back must
not grow with the replies already stored: it reads the model steps only when a tool step waits
for its link, and of them only what a match compares, never a reply's text or prompt."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models.signals import post_init
from django.test.utils import CaptureQueriesContext

from conversations.models import Step
from conversations.proxy import linking, writing
from conversations.proxy.keys import create_key
from conversations.proxy.models import ProxyKey, ProxySession
from conversations.proxy.recording import record_mcp, record_model_call
from conversations.record.verification import conversation_verify
from tests.conversations.proxy.wire import chat_call, tools_call, tools_list

pytestmark = pytest.mark.django_db(transaction=True)
TOKYO = {"timezone": "Asia/Tokyo"}
# A reply's text as a model step stores it: what linking has no use for.
LONG_REPLY = "It is noon in Tokyo. " * 2_000
STEP_TEXT = f"{connection.ops.quote_name('conversations_step')}.{connection.ops.quote_name('text')}"
STEP_PROMPT = f"{connection.ops.quote_name('conversations_step')}.{connection.ops.quote_name('prompt')}"


def _key() -> ProxyKey:
    alice = get_user_model().objects.create_user("alice")
    return create_key(alice, name="laptop")[0]


def _reads_a_reply(sql: str) -> bool:
    return STEP_TEXT in sql or STEP_PROMPT in sql


def test_a_turn_of_text_replies_is_linked_without_loading_its_model_steps() -> None:
    key = _key()
    for _ in range(3):
        record_model_call(key, session="s", fmt="openai_chat", exchange=chat_call(text=LONG_REPLY))
    turn = ProxySession.objects.get(key=key).conversation.turns.get()
    assert Step.objects.filter(turn=turn, kind="decide").count() == 3
    loaded = [0]

    def seen(**_: object) -> None:
        loaded[0] += 1

    post_init.connect(seen, sender=Step, weak=False)
    try:
        with CaptureQueriesContext(connection) as queries:
            assert linking.link_turn(turn, tools={}) == []
    finally:
        post_init.disconnect(seen, sender=Step)

    # One read, of the model steps that asked for calls (none): no step row is loaded.
    [only] = [query["sql"] for query in queries.captured_queries]
    assert loaded == [0] and not _reads_a_reply(only), only


def test_a_link_made_in_a_record_reads_no_replys_text_or_prompt(monkeypatch: pytest.MonkeyPatch) -> None:
    key = _key()
    record_mcp(key, session="s", server_name="time", records=[tools_list(["get_current_time"])])
    for _ in range(2):
        record_model_call(key, session="s", fmt="openai_chat", exchange=chat_call(text=LONG_REPLY))
    # The model call that asks for the tool began first but is stored after the tools/call that
    # ran it (records are stored in another order than they are made): the link is made then.
    asked = chat_call(text=LONG_REPLY, calls=[("call_a", "mcp__time__get_current_time", TOKYO)])
    [ran] = record_mcp(key, session="s", server_name="time", records=[tools_call("get_current_time", TOKYO)])
    seen: list[str] = []
    real: Callable[..., Any] = linking.link_turn  # what the writer calls

    def link_turn(*args: Any, **kwargs: Any) -> Any:
        with CaptureQueriesContext(connection) as queries:
            made = real(*args, **kwargs)
        seen.extend(query["sql"] for query in queries.captured_queries)
        return made

    monkeypatch.setattr(writing, "link_turn", link_turn)
    record_model_call(key, session="s", fmt="openai_chat", exchange=asked)

    conversation = ProxySession.objects.get(key=key).conversation
    turn = conversation.turns.get()
    asking = Step.objects.get(turn=turn, kind="decide", seq=Step.objects.filter(turn=turn).count())
    tool = Step.objects.get(exchanges__pk=ran)
    assert asking.calls[0]["linked_by"] == "arguments" and asking.calls[0]["tool_step"] == tool.seq
    assert tool.parent_id == asking.pk
    assert len(seen) >= 2 and not any(_reads_a_reply(sql) for sql in seen), seen
    assert conversation_verify(conversation=conversation).intact
