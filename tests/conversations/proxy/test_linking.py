"""A model's call is linked to the tools/call that ran it: by the call id in _meta, else by the
tool's name as the host namespaced it and equal arguments; what stays unlinked is shown so."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model

from conversations.models import Exchange, Step
from conversations.proxy import linking
from conversations.proxy.keys import create_key
from conversations.proxy.linking import name_matches
from conversations.proxy.models import ProxyKey, ProxySession
from conversations.proxy.recording import record_mcp, record_model_call
from conversations.record.transcripts.document import transcript_document
from conversations.record.verification import conversation_verify
from tests.conversations.proxy.wire import chat_call, tools_call, tools_list

pytestmark = pytest.mark.django_db(transaction=True)
TOKYO = {"timezone": "Asia/Tokyo"}


def _key() -> ProxyKey:
    alice = get_user_model().objects.create_user("alice")
    return create_key(alice, name="laptop")[0]


@pytest.mark.parametrize(
    "called",
    ["mcp__time__get_current_time", "time_get_current_time", "time.get_current_time", "get_current_time"],
)
def test_a_host_namespaced_name_matches_the_servers_tool(called: str) -> None:
    assert name_matches(called, server="time", tool="get_current_time", server_tools=["get_current_time"])


@pytest.mark.parametrize("called", ["weather_get_current_time", "xget_current_time", "get_current_time_2"])
def test_another_servers_prefix_or_a_longer_name_does_not_match(called: str) -> None:
    assert not name_matches(called, server="time", tool="get_current_time", server_tools=["get_current_time"])


def test_a_name_that_is_another_tool_of_the_server_is_that_tool() -> None:
    tools = ["now", "time_now"]
    assert not name_matches("time_now", server="time", tool="now", server_tools=tools)


def test_without_a_call_id_the_first_tools_call_after_the_reply_with_equal_arguments_is_linked() -> None:
    key = _key()
    record_mcp(key, session="s", server_name="time", records=[tools_list(["get_current_time"])])
    record_model_call(
        key,
        session="s",
        fmt="openai_chat",
        exchange=chat_call(
            calls=[
                ("call_a", "mcp__time__get_current_time", TOKYO),
                ("call_b", "mcp__time__get_current_time", {"timezone": "Europe/Paris"}),
            ]
        ),
    )
    paris, tokyo, stray = record_mcp(
        key,
        session="s",
        server_name="time",
        records=[
            tools_call("get_current_time", {"timezone": "Europe/Paris"}, rpc_id=4),
            tools_call("get_current_time", TOKYO, rpc_id=5),
            tools_call("get_current_time", {"timezone": "America/Lima"}, rpc_id=6),
        ],
    )

    conversation = ProxySession.objects.get(key=key).conversation
    turn = conversation.turns.get()
    decide = Step.objects.get(turn=turn, kind="decide")
    document = transcript_document(conversation=conversation)
    steps = {step["id"]: step for step in document["turns"][0]["steps"]}
    first, second = steps[decide.pk]["calls"]  # type: ignore[misc]
    assert (first["executed_exchange"], first["linked_by"]) == (tokyo, "arguments")
    assert (second["executed_exchange"], second["linked_by"]) == (paris, "arguments")
    unlinked = Step.objects.get(exchanges__pk=stray)
    assert unlinked.parent_id is None and unlinked.kind == "tool"
    assert conversation_verify(conversation=conversation).intact


def test_a_call_id_in_meta_wins_over_equal_arguments() -> None:
    key = _key()
    record_model_call(
        key,
        session="s",
        fmt="openai_chat",
        exchange=chat_call(
            calls=[("call_1", "get_current_time", TOKYO), ("call_2", "get_current_time", TOKYO)]
        ),
    )
    second, first = record_mcp(
        key,
        session="s",
        server_name="time",
        records=[
            tools_call("get_current_time", TOKYO, call_id="call_2", rpc_id=7),
            tools_call("get_current_time", TOKYO, call_id="call_1", rpc_id=8),
        ],
    )

    conversation = ProxySession.objects.get(key=key).conversation
    calls = next(
        step["calls"]
        for step in transcript_document(conversation=conversation)["turns"][0]["steps"]
        if step["kind"] == "decide"
    )
    assert [(c["executed_exchange"], c["linked_by"]) for c in calls] == [
        (first, "call_id"),
        (second, "call_id"),
    ]  # type: ignore[index,union-attr]


def test_a_tools_call_recorded_before_its_model_call_is_linked_when_the_model_call_arrives() -> None:
    key = _key()
    record_model_call(key, session="s", fmt="openai_chat", exchange=chat_call(question="warm up"))
    [ran] = record_mcp(
        key, session="s", server_name="time", records=[tools_call("get_current_time", TOKYO, call_id="late")]
    )
    record_model_call(
        key,
        session="s",
        fmt="openai_chat",
        exchange=chat_call(question="warm up", calls=[("late", "get_current_time", TOKYO)]),
    )

    tool = Step.objects.get(exchanges__pk=ran)
    assert tool.parent is not None and tool.parent.calls[0]["linked_by"] == "call_id"
    assert Exchange.objects.get(pk=ran).step_id == tool.pk


def test_a_call_no_tools_call_ran_is_shown_unlinked() -> None:
    key = _key()
    record_model_call(
        key, session="s", fmt="openai_chat", exchange=chat_call(calls=[("call_x", "get_current_time", TOKYO)])
    )

    conversation = ProxySession.objects.get(key=key).conversation
    [step] = transcript_document(conversation=conversation)["turns"][0]["steps"]
    assert step["calls"][0]["executed_exchange"] is None and step["calls"][0]["linked_by"] is None  # type: ignore[index]


def test_calls_no_tools_call_will_run_cost_a_later_record_no_pass_over_every_tool_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Calls to a host's own tools never link, and tools/calls whose arguments no call asked for
    neither: both stay loose for the rest of the turn. A later record matches each call only
    against the tools its name can be, not against every loose tool step (which made each record
    cost their product: here 150 × 150 name comparisons)."""
    key = _key()
    record_mcp(
        key, session="s", server_name="time", records=[tools_list(["get_current_time", "convert_time"])]
    )
    loose = 150
    record_model_call(
        key,
        session="s",
        fmt="openai_chat",
        exchange=chat_call(calls=[(f"call_{n}", f"host_builtin_{n % 7}", {"n": n}) for n in range(loose)]),
    )
    record_mcp(
        key,
        session="s",
        server_name="time",
        records=[tools_call("convert_time", {"n": n}, rpc_id=100 + n) for n in range(loose)],
    )
    proxy = ProxySession.objects.get(key=key)
    compared = 0
    real = linking.name_matches

    def counted(called: str, **kwargs: Any) -> bool:
        nonlocal compared
        compared += 1
        return real(called, **kwargs)

    monkeypatch.setattr(linking, "name_matches", counted)

    updates = linking.link_turn(proxy.conversation.turns.get(), tools=proxy.tools)

    assert updates == []
    assert compared == loose  # one a call: the one tool the loose steps ran
