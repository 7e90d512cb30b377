"""A long MCP proxy session: each stored group seals its turn from that group's rows, not from the
whole session read back (a session's MCP traffic is one growing turn), and verify still checks
every group of it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.db.models.signals import post_init

from conversations.models import Exchange, Step, Turn
from conversations.proxy.keys import create_key
from conversations.proxy.models import ProxyKey, ProxySession
from conversations.proxy.recording import record_mcp, record_model_call
from conversations.record.verification import conversation_verify
from tests.conversations.proxy.wire import chat_call, tools_call, tools_list

pytestmark = pytest.mark.django_db(transaction=True)
GROUPS = 200
TOKYO = {"timezone": "Asia/Tokyo"}


def _key() -> ProxyKey:
    return create_key(get_user_model().objects.create_user("alice"), name="laptop")[0]


@contextmanager
def _steps_loaded() -> Iterator[list[int]]:
    """Counts the step rows made into objects meanwhile (those read back, and the new ones)."""
    count = [0]

    def seen(**_: object) -> None:
        count[0] += 1

    post_init.connect(seen, sender=Step, weak=False)
    try:
        yield count
    finally:
        post_init.disconnect(seen, sender=Step)


def _group(key: ProxyKey, n: int) -> list[int]:
    return record_mcp(
        key, session="long", server_name="time", records=[tools_call("get_current_time", {"n": n}, rpc_id=n)]
    )


def _session(key: ProxyKey) -> list[int]:
    """A session of ``GROUPS`` groups of one ``tools/call`` each; returns the step rows each
    group's store loaded."""
    record_mcp(key, session="long", server_name="time", records=[tools_list(["get_current_time"])])
    loaded = []
    for n in range(1, GROUPS + 1):
        with _steps_loaded() as count:
            _group(key, n)
        loaded.append(count[0])
    return loaded


def test_each_groups_store_loads_a_bounded_number_of_steps_however_long_the_session() -> None:
    key = _key()
    loaded = _session(key)
    conversation = ProxySession.objects.get(key=key).conversation
    assert Turn.objects.filter(conversation=conversation).count() == 1  # one growing turn
    # Before: the 10th group's store loaded 12 steps, the 200th's 202 (the whole turn again).
    assert max(loaded[GROUPS // 2 :]) <= max(loaded[:10]) <= 4, loaded
    report = conversation_verify(conversation=conversation)
    assert report.intact, report.reason


def test_verify_names_a_forged_exchange_or_step_of_a_late_group_of_a_long_session() -> None:
    key = _key()
    _session(key)
    conversation = ProxySession.objects.get(key=key).conversation
    late = Exchange.objects.filter(turn__conversation=conversation).order_by("-seq")[3]
    Exchange.objects.filter(pk=late.pk).update(response_body='{"jsonrpc":"2.0","id":1,"result":{}}')
    with pytest.raises(CommandError, match=f"BROKEN at exchange {late.pk}"):
        call_command("verify", str(conversation.public_id))

    Exchange.objects.filter(pk=late.pk).update(response_body=late.response_body)
    assert conversation_verify(conversation=conversation).intact
    step = Step.objects.filter(turn__conversation=conversation).order_by("-seq")[3]
    Step.objects.filter(pk=step.pk).update(result={"content": [{"type": "text", "text": "forged"}]})
    report = conversation_verify(conversation=conversation)
    assert not report.intact and report.step_id == step.pk, report.reason


def test_a_forged_step_stays_broken_after_the_sessions_next_store() -> None:
    """A later group's store does not seal a forged earlier step again (it would launder it)."""
    key = _key()
    record_mcp(key, session="long", server_name="time", records=[tools_list(["get_current_time"])])
    for n in range(1, 6):
        _group(key, n)
    conversation = ProxySession.objects.get(key=key).conversation
    step = Step.objects.get(turn__conversation=conversation, seq=3)
    Step.objects.filter(pk=step.pk).update(arguments={"timezone": "forged"})
    _group(key, 6)
    report = conversation_verify(conversation=conversation)
    assert not report.intact and report.step_id == step.pk, report.reason


def test_model_calls_linked_to_earlier_tools_calls_and_a_late_record_still_verify() -> None:
    key = _key()
    record_mcp(key, session="long", server_name="time", records=[tools_list(["get_current_time"])])
    early = tools_call("get_current_time", TOKYO, call_id="c1")
    for n in range(1, 4):
        _group(key, n)
    # A tools/call stored before the model call that asked for it: linked when that one arrives,
    # which changes the earlier tool step (its parent).
    record_mcp(key, session="long", server_name="time", records=[early])
    record_model_call(
        key, session="long", fmt="openai_chat", exchange=chat_call(calls=[("c1", "get_current_time", TOKYO)])
    )
    for n in range(4, 7):
        _group(key, n)
    # Once more, now that the turn has tokens to add to (the first model call's summary could not
    # be added to the MCP-only turn's, which has none).
    paris = {"timezone": "Europe/Paris"}
    record_mcp(
        key, session="long", server_name="time", records=[tools_call("get_current_time", paris, call_id="c2")]
    )
    _group(key, 7)
    record_model_call(
        key,
        session="long",
        fmt="openai_chat",
        exchange=chat_call(calls=[("c2", "get_current_time", paris)], tool_results=[("c1", "12:00")]),
    )
    conversation = ProxySession.objects.get(key=key).conversation
    for arguments in (TOKYO, paris):
        tool = Step.objects.get(turn__conversation=conversation, kind="tool", arguments=arguments)
        assert tool.parent_id is not None
    turn = Turn.objects.get(conversation=conversation)
    assert turn.usage_total == 38 and turn.tools_called == [[None, "time", "get_current_time"]]
    assert conversation_verify(conversation=conversation).intact
    # A second question, then a record of the first turn's time stored late: the later turn is
    # chained and sealed again.
    record_model_call(key, session="long", fmt="openai_chat", exchange=chat_call(question="And in Paris?"))
    late = tools_call("get_current_time", {"late": 1}, rpc_id=99)
    late.started_at = early.started_at
    record_mcp(key, session="long", server_name="time", records=[late])
    assert Turn.objects.filter(conversation=conversation).count() == 2
    report = conversation_verify(conversation=conversation)
    assert report.intact, report.reason
