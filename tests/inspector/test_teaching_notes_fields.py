"""Teaching mode's field notes are right where the field is: a name the wire uses at several paths
with different meanings (``message`` in a choice and in an error, ``index`` of a choice and of a
streamed tool call, ``strict`` on a function and on a response format) gets the note of the path it
is at, and no note says what the wire format contradicts (a ``tool`` role the next request
carries, a model that may select several tools). Bodies as the demo model writes them in each
format (docs/wire-formats.md §1–§5); the page test runs the demo model in-process and the demo MCP
server over stdio."""

from __future__ import annotations

import html
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from django.test import Client
from django.urls import reverse

from conversations.runner import turn_run
from conversations.services import comparison_providers_start, conversation_start, demo_profile_ensure
from inspector import teaching
from inspector.preferences import preference_set
from inspector.teaching.loading import NOTES_DIR, NotesError, notes_load
from servers import gateway
from servers.services import demo_server_ensure
from tests.factories import UserFactory

WEATHER = "What will the weather be like in Beijing tomorrow?"
CALL = {"name": "demo__get_weather_forecast", "arguments": '{"city":"Beijing"}'}

CHAT_REPLY = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "demo",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "call_1", "type": "function", "function": CALL}],
            },
            "logprobs": None,
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}
CHAT_STREAM = "\n\n".join(
    "data: " + json.dumps(chunk)
    for chunk in (
        {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"role": "assistant"}}]},
        {
            "object": "chat.completion.chunk",
            "choices": [
                {"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1", "function": CALL}]}}
            ],
        },
    )
)
CHAT_ERROR = {"error": {"message": "no tools", "type": "invalid_request_error", "param": None, "code": None}}
CHAT_NEXT_REQUEST = {
    "model": "demo",
    "messages": [
        {"role": "user", "content": WEATHER},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call_1", "type": "function", "function": CALL}],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"},
    ],
    "tools": [{"type": "function", "function": {"name": CALL["name"], "parameters": {}, "strict": False}}],
    "tool_choice": {"type": "function", "function": {"name": CALL["name"]}},
}
CHAT_STRUCTURED = {
    "model": "demo",
    "messages": [{"role": "user", "content": WEATHER}],
    "response_format": {
        "type": "json_schema",
        "json_schema": {"name": "decision", "strict": True, "schema": {}},
    },
}
RESPONSES_REQUEST = {
    "model": "demo",
    "input": [
        {"role": "user", "content": WEATHER},
        {"type": "function_call", "call_id": "call_1", **CALL},
        {"type": "function_call_output", "call_id": "call_1", "output": "Sunny"},
    ],
    "tools": [{"type": "function", "name": CALL["name"], "parameters": {}, "strict": False}],
    "text": {"format": {"type": "json_schema", "name": "decision", "strict": True, "schema": {}}},
}
RESPONSES_REPLY = {
    "id": "resp_1",
    "object": "response",
    "status": "completed",
    "output": [{"type": "function_call", "id": "fc_1", "call_id": "call_1", **CALL, "status": "completed"}],
}
ANTHROPIC_STREAM = "\n\n".join(
    "data: " + json.dumps(event)
    for event in (
        {"type": "message_start", "message": {"id": "msg_1", "role": "assistant", "content": []}},
        {"type": "error", "error": {"type": "api_error", "message": "overloaded"}},
    )
)
ANTHROPIC_REQUEST = {
    "model": "demo",
    "max_tokens": 10,
    "system": "Be brief.",
    "messages": [{"role": "user", "content": WEATHER}],
    "tools": [{"name": CALL["name"], "input_schema": {}}],
}
GEMINI_REPLY = {
    "candidates": [
        {
            "content": {"role": "model", "parts": [{"functionCall": {"name": CALL["name"], "args": {}}}]},
            "index": 0,
            "finishReason": "STOP",
        }
    ]
}
GEMINI_ERROR = {"error": {"code": 500, "message": "internal", "status": "INTERNAL"}}


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


def _notes(body: object, fmt: str) -> dict[tuple[str, str], str]:
    """Each listed field's note, keyed by its name and where the list says it is."""
    text = body if isinstance(body, str) else json.dumps(body)
    return {
        (field.name, field.where): field.note.text if field.note else ""
        for field in teaching.field_notes(text, fmt)
    }


def test_a_chat_completions_replys_message_and_index_are_the_choices() -> None:
    notes = _notes(CHAT_REPLY, "openai_chat")

    message = notes["message", ""]
    assert "assistant message" in message and "human-readable" not in message
    index = notes["index", ""]
    assert "candidate" in index and "stream" not in index
    assert [name for name, _ in notes] == teaching.field_names(json.dumps(CHAT_REPLY), "openai_chat")


def test_an_errors_message_is_its_explanation() -> None:
    for body, fmt in ((CHAT_ERROR, "openai_chat"), (GEMINI_ERROR, "gemini")):
        message = _notes(body, fmt)["message", ""]
        assert "explanation of the error" in message and "reply" not in message, fmt
    assert "kind of error" in _notes(CHAT_ERROR, "openai_chat")["type", ""]
    gemini = _notes(GEMINI_ERROR, "gemini")
    assert "INVALID_ARGUMENT" in gemini["status", ""] and "completed" not in gemini["status", ""]
    assert "HTTP status" in gemini["code", ""]


def test_a_name_at_two_paths_with_two_meanings_is_listed_at_each() -> None:
    stream = _notes(CHAT_STREAM, "openai_chat")
    assert "candidate" in stream["index", "in choices"]
    assert "pieces with the same index" in stream["index", "in tool_calls"]

    anthropic = _notes(ANTHROPIC_STREAM, "anthropic")
    assert "message_start" in anthropic["message", "at the top level"]
    assert "explanation of the error" in anthropic["message", "in error"]

    replayed = _notes(CHAT_NEXT_REQUEST, "openai_chat")
    assert "earlier reply" in replayed["tool_calls", ""]
    assert "must call" in replayed["function", "in tool_choice"]
    assert "name and arguments" in replayed["function", "in tool_calls"]


def test_strict_and_name_follow_what_they_are_on() -> None:
    chat = {**CHAT_NEXT_REQUEST, **CHAT_STRUCTURED}
    notes = _notes(chat, "openai_chat")
    assert "the reply" in notes["strict", "in json_schema"]
    assert "arguments" in notes["strict", "in function"]
    assert "response format" in notes["name", "in json_schema"]
    assert "tool" in notes["name", "in function"]

    responses = _notes(RESPONSES_REQUEST, "openai_responses")
    assert "the reply" in responses["strict", "in format"]
    assert "arguments" in responses["strict", "in tools"]
    assert "response format" in responses["name", "in format"]
    assert "tool's result" in responses["output", ""] and "reply's items" not in responses["output", ""]
    assert "reply's items" in _notes(RESPONSES_REPLY, "openai_responses")["output", ""]
    assert "call_id" in _notes(RESPONSES_REPLY, "openai_responses")["id", ""]


def test_each_formats_roles_are_the_ones_its_wire_carries() -> None:
    chat = _notes(CHAT_NEXT_REQUEST, "openai_chat")["role", ""]
    assert "`tool`" in chat or " tool " in chat
    assert "tool_call_id" in chat
    assert "developer" in _notes(RESPONSES_REQUEST, "openai_responses")["role", ""]
    anthropic = _notes(ANTHROPIC_REQUEST, "anthropic")["role", ""]
    assert "no system role" in anthropic and "tool_result" in anthropic
    gemini = _notes(GEMINI_REPLY, "gemini")
    assert "user or model" in gemini["role", ""] and "assistant" not in gemini["role", ""]
    assert "parts" in gemini["content", ""] and "candidate" in gemini["index", ""]
    assert "stream" not in gemini["index", ""]
    # The text of a turn may be the host's too: a system prompt, a tool's result written as text.
    assert "host" in teaching.note_for("text", "gemini").text  # type: ignore[union-attr]


def test_the_tools_notes_let_the_model_select_several_or_none() -> None:
    for fmt, body in (("openai_chat", CHAT_NEXT_REQUEST), ("anthropic", ANTHROPIC_REQUEST)):
        tools = _notes(body, fmt)["tools", ""]
        assert "only *select* one" not in tools and "only select one" not in tools, fmt
        assert "several" in tools and "none" in tools, fmt


def test_a_reply_that_stopped_may_still_carry_a_call_written_in_its_text() -> None:
    finish = teaching.note_for("finish_reason", "openai_chat")
    stop = teaching.note_for("stop_reason", "anthropic")
    assert finish is not None and stop is not None
    for text in (finish.text, stop.text):
        assert "stop (a final answer)" not in text and "end_turn (final answer)" not in text
        assert "written in its text" in text


@pytest.mark.django_db(transaction=True)
def test_the_page_explains_a_chat_replys_message_as_the_assistant_message() -> None:
    alice = UserFactory(username="alice")
    _, turn = conversation_start(
        owner=alice,
        model_profile=demo_profile_ensure(),
        question=WEATHER,
        servers=[demo_server_ensure()],
        dispatch=False,
    )
    turn_run(turn_id=turn.pk)
    comparison, runs = comparison_providers_start(
        owner=alice, question=WEATHER, stream=True, servers=[demo_server_ensure()], dispatch=False
    )
    for run in runs:
        turn_run(turn_id=run.pk)
    preference_set(user=alice, teaching=True)
    client = Client()
    client.force_login(alice)

    page = client.get(reverse("inspector-conversation", args=[turn.conversation.public_id])).content.decode()
    fields = re.findall(
        r'<div class="teach-field[^"]*"><dt><code>([^<]+)</code>(.*?)</dt><dd>(.*?)</dd></div>', page, re.S
    )
    messages = [html.unescape(note) for name, _, note in fields if name == "message"]
    assert messages and all("assistant message" in note for note in messages), messages
    indexes = [html.unescape(note) for name, _, note in fields if name == "index"]
    assert indexes and not any("stream" in note for note in indexes), indexes

    compare = client.get(reverse("inspector-comparison", args=[comparison.public_id])).content.decode()
    chat = next(
        run
        for run in re.findall(r'<article class="sent-run".*?</article>', compare, re.S)
        if "chat/completions" in run
    )
    listed = re.findall(r"<dt><code>index</code>(.*?)</dt><dd>(.*?)</dd>", chat, re.S)
    assert len(listed) == 2, listed
    where = {html.unescape(re.sub(r"<[^>]+>", "", at)).strip(): note for at, note in listed}
    assert "pieces" in where["in tool_calls"] and "candidate" in where["in choices"]


def test_a_note_at_a_path_is_checked_like_any_note(tmp_path: Path) -> None:
    directory = tmp_path / "notes"
    shutil.copytree(NOTES_DIR, directory)
    path = directory / "openai_chat.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data.setdefault("at", {}).setdefault("choices", {})["finish_reason"] = {"spec": "openai_chat"}
    path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")

    with pytest.raises(NotesError) as raised:
        notes_load(directory)

    assert raised.value.file == "openai_chat.yaml"
    assert raised.value.entry == "at.choices.finish_reason"
    assert "missing text" in raised.value.problem
