"""``manage.py ask``: one real turn, end to end — the demo model served in-process by the app and
the bundled demo MCP server over stdio — printed as steps or as the API's JSON transcript."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from conversations.models import Conversation
from conversations.record.transcripts.document import transcript_document
from servers import gateway
from tests.factories import McpServerFactory, UserFactory

WEATHER = "What will the weather be like in Beijing tomorrow?"
CALCULATION = "What is 12 * (3 + 4)?"

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def admin() -> User:
    """The superuser ``make run`` creates, whom ``ask`` runs as by default."""
    user: User = UserFactory(username="admin", is_superuser=True, is_staff=True)
    return user


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    """Pooled stdio sessions would otherwise outlive the test (and its database)."""
    yield
    gateway.close_all()


def _ask(*args: str) -> dict[str, Any]:
    out = StringIO()
    call_command("ask", *args, "--json", stdout=out)
    transcript: dict[str, Any] = json.loads(out.getvalue())
    return transcript


def _exchanges(turn: dict[str, Any], *, channel: str, label: str | None = None) -> list[dict[str, Any]]:
    return [
        exchange
        for step in turn["steps"]
        for exchange in step["exchanges"]
        if exchange["channel"] == channel and (label is None or exchange["label"] == label)
    ]


def test_a_weather_question_calls_the_forecast_tool_over_mcp_and_answers() -> None:
    transcript = _ask(WEATHER)

    [turn] = transcript["turns"]
    assert turn["status"] == "done", turn["error"]
    assert "Beijing" in turn["answer"]
    first_llm_request = json.loads(_exchanges(turn, channel="llm")[0]["request_body"])
    assert "demo__get_weather_forecast" in [tool["function"]["name"] for tool in first_llm_request["tools"]]
    [call] = _exchanges(turn, channel="mcp", label="tools/call")
    request = json.loads(call["request_body"])
    assert request["params"]["name"] == "get_weather_forecast"
    assert request["params"]["arguments"]["city"] == "Beijing"
    assert request["params"]["arguments"]["day"] == "tomorrow"
    assert "result" in json.loads(call["response_body"])


@pytest.mark.parametrize("name", ["demo anthropic", "demo gemini streamed", "demo openai_responses streamed"])
def test_a_demo_wire_format_profile_is_there_by_name_on_a_fresh_database(name: str) -> None:
    transcript = _ask(WEATHER, "--model", name)

    [turn] = transcript["turns"]
    assert turn["status"] == "done", turn["error"]
    assert "Beijing" in turn["answer"]
    assert transcript["conversation"]["model_profile"]["name"] == name
    [first_call, *_] = _exchanges(turn, channel="llm")
    body = json.loads(first_call["request_body"])
    if name.startswith("demo gemini"):
        assert "functionDeclarations" in body["tools"][0]
        assert first_call["label"].endswith(":streamGenerateContent"), first_call["label"]
    elif name.startswith("demo anthropic"):
        assert body["tools"][0]["input_schema"]["type"] == "object"
        assert "stream" not in body
    else:
        assert body["tools"][0]["type"] == "function" and body["stream"] is True


def test_the_json_is_the_transcript_the_api_serves() -> None:
    transcript = _ask(WEATHER)

    conversation = Conversation.objects.get(public_id=transcript["conversation"]["id"])
    assert transcript == json.loads(json.dumps(transcript_document(conversation=conversation)))
    assert transcript["conversation"]["model_profile"]["demo"] is True
    assert [server["name"] for server in transcript["conversation"]["servers"]] == ["demo"]
    assert transcript["conversation"]["paradigm"] == "native"


def test_tool_choice_none_answers_in_text_without_calling_a_tool() -> None:
    transcript = _ask(WEATHER, "--tool-choice", "none")

    [turn] = transcript["turns"]
    assert turn["status"] == "done", turn["error"]
    assert turn["answer"].strip()
    assert _exchanges(turn, channel="mcp", label="tools/call") == []
    assert "tool" not in [step["kind"] for step in turn["steps"]]


def test_a_named_tool_choice_makes_the_model_call_that_tool() -> None:
    transcript = _ask("What is 12 * 7?", "--tool-choice", "named", "--tool", "demo/calculate")

    [turn] = transcript["turns"]
    assert turn["status"] == "done", turn["error"]
    assert turn["tool_choice_name"] == "demo/calculate"
    [call] = _exchanges(turn, channel="mcp", label="tools/call")
    assert json.loads(call["request_body"])["params"]["name"] == "calculate"
    assert "84" in turn["answer"]


def test_the_readable_output_shows_each_step_and_where_to_see_it_in_the_browser() -> None:
    out = StringIO()

    call_command("ask", WEATHER, stdout=out)

    text = out.getvalue()
    for kind in ("connect", "decide", "tool", "answer"):
        assert f"] {kind} · " in text
    assert "call demo__get_weather_forecast" in text
    assert "mcp tools/call · ok" in text
    assert re.search(r"llm POST \S*/chat/completions · 200", text)
    assert "Answer:" in text and "Beijing" in text
    conversation = Conversation.objects.get()
    assert f"/c/{conversation.public_id}/" in text


def test_the_conversation_belongs_to_the_first_superuser(admin: User) -> None:
    UserFactory(username="zed", is_superuser=True, is_staff=True)

    _ask(WEATHER)

    assert Conversation.objects.get().owner == admin
    assert not User.objects.filter(username="cli").exists()


def test_without_a_superuser_ask_refuses_and_says_how_to_name_its_user(admin: User) -> None:
    admin.delete()

    with pytest.raises(CommandError, match=r"no superuser.*--user NAME"):
        call_command("ask", WEATHER, stdout=StringIO())

    assert not Conversation.objects.exists()
    assert not User.objects.exists()


def test_by_default_ask_may_start_a_stdio_server_only_staff_may_start() -> None:
    McpServerFactory(name="local-tools", command=sys.executable)

    [turn] = _ask(
        CALCULATION, "--server", "local-tools", "--tool-choice", "named", "--tool", "local-tools/calculate"
    )["turns"]

    assert turn["status"] == "done", turn["error"]
    assert _exchanges(turn, channel="mcp", label="tools/call")


def test_as_a_named_user_who_is_not_staff_the_spawn_rule_applies() -> None:
    UserFactory(username="alice")
    McpServerFactory(name="local-tools", command=sys.executable)
    out = StringIO()

    call_command("ask", CALCULATION, "--server", "local-tools", "--user", "alice", stdout=out)

    assert "local-tools starts a process on the worker" in out.getvalue()
    assert "only staff may start it" in out.getvalue()
    assert Conversation.objects.get().owner.username == "alice"


def test_a_named_user_owns_the_conversation() -> None:
    alice = UserFactory(username="alice")

    _ask(WEATHER, "--user", "alice")

    assert Conversation.objects.get().owner == alice


def test_a_failed_turn_prints_its_transcript_then_exits_non_zero() -> None:
    out = StringIO()

    with pytest.raises(CommandError, match="failed"):
        call_command(
            "ask", WEATHER, "--tool-choice", "named", "--tool", "demo/no_such_tool", "--json", stdout=out
        )

    [turn] = json.loads(out.getvalue())["turns"]
    assert turn["status"] == "failed"
    assert "demo/no_such_tool" in turn["error"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "no-such-model"], r"no model profile named 'no-such-model'; choose one of: demo"),
        (["--server", "no-such-server"], r"no enabled MCP server named no-such-server; choose from: demo"),
        (["--paradigm", "no-such-paradigm"], r"invalid choice: 'no-such-paradigm' \(choose from .*'native'"),
        (["--user", "nobody"], r"no user named 'nobody'"),
        (["--tool-choice", "named"], r"--tool-choice named needs --tool SERVER/TOOL"),
        (["--tool", "demo/calculate"], r"--tool only applies with --tool-choice named"),
    ],
)
def test_unknown_names_are_refused_with_the_valid_ones(args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        call_command("ask", WEATHER, *args, stdout=StringIO())

    assert not Conversation.objects.exists()


HOSTILE = "\x1b]0;PWNED\x07\x1b[31mred\x1b[0m \u202eevil\u202c What is 12 * (3 + 4)?\u2028next"


def test_text_a_model_or_a_user_wrote_reaches_the_terminal_inert() -> None:
    readable, as_json = StringIO(), StringIO()

    call_command("ask", HOSTILE, stdout=readable)
    call_command("ask", HOSTILE, "--json", stdout=as_json)

    shown = readable.getvalue()
    for char in ("\x1b", "\x07", "\u202e", "\u202c", "\u2028"):
        assert char not in shown and char not in as_json.getvalue()
    assert "⟨U+001B⟩]0;PWNED⟨U+0007⟩" in shown and "⟨U+202E⟩evil⟨U+202C⟩" in shown
    # The JSON is the same value: only its spelling is escaped.
    [turn] = json.loads(as_json.getvalue())["turns"]
    assert turn["question"] == HOSTILE
