"""The proxies' recorder: a host's model calls and tools/calls become one linked, sealed record."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.db import OperationalError
from django.test import override_settings
from django.utils import timezone

from conversations.loop.wire import WireExchange
from conversations.models import Exchange, Step, Turn
from conversations.proxy import writing
from conversations.proxy.keys import create_key
from conversations.proxy.models import ProxyKey, ProxySession
from conversations.proxy.recording import record_mcp, record_model_call
from conversations.record.transcripts.document import transcript_document
from conversations.record.verification import conversation_verify
from servers.proxy.pairing import HOST, SERVER, Pairer
from tests.conversations.proxy.wire import anthropic_call, chat_call, chat_stream, tools_call, tools_list
from tests.factories import ModelProfileFactory

pytestmark = pytest.mark.django_db(transaction=True)
TOKYO = {"timezone": "Asia/Tokyo"}
QWEN_LIKE = (
    Path(__file__).resolve().parents[2] / "fixtures" / "chat_templates" / "qwen_like.jinja"
).read_text()


def _key_of(username: str) -> ProxyKey:
    user = get_user_model().objects.create_user(username)
    return create_key(user, name="laptop")[0]


def _key() -> ProxyKey:
    return _key_of("alice")


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


def test_without_a_hint_a_key_stays_in_one_session_until_a_quiet_gap() -> None:
    key = _key()
    record_model_call(key, session=None, fmt="openai_chat", exchange=chat_call(question="one"))
    record_model_call(key, session=None, fmt="openai_chat", exchange=chat_call(question="two"))
    assert ProxySession.objects.filter(key=key).count() == 1
    with override_settings(PROXY_SESSION_GAP_SECONDS=0):
        record_model_call(key, session=None, fmt="openai_chat", exchange=chat_call(question="three"))

    sessions = list(ProxySession.objects.filter(key=key).order_by("pk"))
    assert len(sessions) == 2
    # A new question is a new turn of the same session; the ones that carry tool results back are not.
    assert list(sessions[0].conversation.turns.values_list("question", flat=True)) == ["one", "two"]


def test_each_hint_is_its_own_session_and_a_tool_result_round_stays_in_its_turn() -> None:
    key = _key()
    record_model_call(
        key, session="a", fmt="openai_chat", exchange=chat_call(calls=[("c1", "get_current_time", {})])
    )
    record_model_call(key, session="b", fmt="openai_chat", exchange=chat_call(question="other"))
    record_model_call(
        key,
        session="a",
        fmt="openai_chat",
        exchange=chat_call(tool_results=[("c1", "12:00")], text="It is noon."),
    )

    a = ProxySession.objects.get(key=key, hint="a").conversation
    [turn] = a.turns.all()
    assert turn.steps.filter(kind="decide").count() == 2 and turn.answer == "It is noon."
    assert ProxySession.objects.get(key=key, hint="b").conversation.turns.get().question == "other"


def test_streamed_and_anthropic_replies_are_read_by_the_providers_parsers() -> None:
    key = _key()
    record_model_call(key, session="s", fmt="openai_chat", exchange=chat_stream(text="Hello there"))
    record_model_call(
        key,
        session="s",
        fmt="anthropic",
        exchange=anthropic_call(calls=[("toolu_1", "get_current_time", TOKYO)]),
    )

    steps = list(Step.objects.filter(turn__conversation__proxy_session__key=key).order_by("turn__seq", "seq"))
    assert steps[0].text == "Hello there" and steps[0].kind == "decide"
    assert steps[1].calls[0]["id"] == "toolu_1" and steps[1].usage["input_tokens"] == 10


def test_an_upstream_error_is_an_error_step_with_its_exchange() -> None:
    key = _key()
    failed = chat_call()
    failed.status, failed.response_body = "401", '{"error": {"message": "bad key"}}'
    exchange_id = record_model_call(key, session="s", fmt="openai_chat", exchange=failed)

    step = Step.objects.get(exchanges__pk=exchange_id)
    assert step.kind == "error" and step.status == "error" and "401" in step.error


def test_with_the_keys_profile_chat_template_the_prompt_is_spliced_exactly() -> None:
    key = _key()
    key.profile = ModelProfileFactory(chat_template=QWEN_LIKE, model="qwen")
    key.save()
    record_model_call(key, session="s", fmt="openai_chat", exchange=chat_call(question="What time is it?"))
    plain = _key_of("bob")
    record_model_call(plain, session="s", fmt="openai_chat", exchange=chat_call(question="What time is it?"))

    exact = Step.objects.get(turn__conversation__proxy_session__key=key)
    assert exact.prompt_exact and "<|im_start|>user\nWhat time is it?" in exact.prompt
    illustrative = Step.objects.get(turn__conversation__proxy_session__key=plain)
    assert not illustrative.prompt_exact and "illustrative" in illustrative.prompt_source


def test_a_failed_write_stores_nothing_of_the_record_and_raises_the_database_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key = _key()

    def unreachable(**kwargs: object) -> None:
        raise OperationalError("the database went away")

    monkeypatch.setattr(writing, "turn_end_save", unreachable)
    with pytest.raises(OperationalError):
        record_model_call(key, session="s", fmt="openai_chat", exchange=chat_call())

    assert not ProxySession.objects.exists() and not Exchange.objects.exists() and not Step.objects.exists()


def test_a_changed_row_of_a_proxy_session_is_named_by_verify() -> None:
    key = _key()
    record_model_call(
        key, session="s", fmt="openai_chat", exchange=chat_call(calls=[("c", "get_current_time", TOKYO)])
    )
    [ran] = record_mcp(
        key, session="s", server_name="time", records=[tools_call("get_current_time", TOKYO, call_id="c")]
    )
    Exchange.objects.filter(pk=ran).update(response_body='{"jsonrpc":"2.0","id":3,"result":{"content":[]}}')

    conversation = ProxySession.objects.get(key=key).conversation
    with pytest.raises(CommandError, match=f"BROKEN at exchange {ran}"):
        call_command("verify", str(conversation.public_id))


def test_gemini_and_responses_replies_and_stderr_lines_are_recorded() -> None:
    key = _key()
    gemini = chat_call()
    gemini.label = "POST /v1beta/models/gemini-test:generateContent"
    gemini.request_body = json.dumps({"contents": [{"role": "user", "parts": [{"text": "Time in Tokyo?"}]}]})
    gemini.response_body = json.dumps(
        {
            "candidates": [
                {
                    "content": {
                        "role": "model",
                        "parts": [{"functionCall": {"name": "get_current_time", "args": TOKYO}}],
                    },
                    "finishReason": "STOP",
                }
            ],
            "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 2},
        }
    )
    responses = chat_call()
    responses.label = "POST /v1/responses"
    responses.request_body = json.dumps({"model": "gpt-test", "input": "Say hi"})
    responses.response_body = json.dumps(
        {
            "id": "resp_1",
            "object": "response",
            "status": "completed",
            "output": [
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hi"}]}
            ],
            "usage": {"input_tokens": 3, "output_tokens": 1},
        }
    )
    stderr = WireExchange(
        channel="mcp",
        label="stderr",
        started_at=timezone.now(),
        direction="local",
        response_body="starting up\n",
    )

    record_model_call(key, session="g", fmt="gemini", exchange=gemini)
    record_model_call(key, session="r", fmt="openai_responses", exchange=responses)
    [line] = record_mcp(key, session="g", server_name="time", records=[stderr])

    turn = ProxySession.objects.get(key=key, hint="g").conversation.turns.get()
    decide = turn.steps.get(kind="decide")
    assert turn.question == "Time in Tokyo?" and turn.model_name == "gemini-test"
    assert decide.calls[0]["name"] == "get_current_time" and decide.calls[0]["arguments"] == TOKYO
    assert Exchange.objects.get(pk=line).direction == "local"
    answered = ProxySession.objects.get(key=key, hint="r").conversation.turns.get()
    assert answered.question == "Say hi" and answered.answer == "hi"


def test_every_mcp_exchange_names_the_server_the_proxy_was_started_for() -> None:
    """``proxy stdio``'s pairer knows no server: its records are named by ``--name``, in the rows
    and in the transcript (the JSON Lines export: one exchange a line, the server on each)."""
    key = _key()
    pairer = Pairer(line_limit=100_000, body_limit=100_000)
    pairer.feed(
        HOST, b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{}}}\n'
    )
    pairer.feed(SERVER, b'{"jsonrpc":"2.0","id":1,"result":{"content":[]}}\n')
    pairer.feed(HOST, b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
    records = pairer.take()
    assert {record.server_name for record in records} == {""}

    record_mcp(key, session="s", server_name="time", records=records)

    conversation = ProxySession.objects.get(key=key).conversation
    assert set(
        Exchange.objects.filter(turn__conversation=conversation).values_list("server_name", flat=True)
    ) == {"time"}
    document = transcript_document(conversation=conversation)
    exchanges = [
        exchange for turn in document["turns"] for step in turn["steps"] for exchange in step["exchanges"]
    ]
    assert len(exchanges) == 2 and {exchange["server"] for exchange in exchanges} == {"time"}
