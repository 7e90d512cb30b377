"""OTLP traces recorded from the real OpenLLMetry and OpenInference OpenAI instrumentations
(``recorded_traces/``, their source and versions in its README) import without error, show the
model's tool call and the tool's result, and keep the tools the model was offered."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from conversations.models import Conversation
from conversations.record.transcripts.export import transcript_export
from conversations.services import conversation_import
from tests.factories import UserFactory

RECORDED = Path(__file__).parent / "recorded_traces"
FILES = ["openllmetry-openai-0.62.4.json", "openinference-openai-0.1.66.json"]


@pytest.fixture
def alice() -> User:
    user: User = UserFactory(username="alice")
    return user


@pytest.mark.django_db
@pytest.mark.parametrize("name", FILES)
def test_a_recorded_trace_imports_its_call_result_answer_and_offered_tools(alice: User, name: str) -> None:
    imported = conversation_import(data=(RECORDED / name).read_bytes(), actor=alice, source=name)

    conversation = imported
    turn = conversation.turns.get()
    assert turn.question == "What will the weather be like in Beijing tomorrow?"
    assert turn.answer == "[demo model] get_weather_forecast reports: fog, -1 to 9 °C."
    decide, answer = list(turn.steps.order_by("seq"))
    assert [(c["name"], c["arguments"]) for c in decide.calls] == [
        ("get_weather_forecast", {"city": "Beijing", "day": "tomorrow"})
    ]
    assert "fog, -1 to 9 °C" in answer.prompt
    assert [(t["name"], t["description"], t["inputSchema"]["required"]) for t in turn.tools] == [
        ("get_weather_forecast", "Get the weather forecast for a city and day.", ["city"])
    ]
    assert "llm.tools.0.tool.json_schema" not in " ".join((imported.imported_meta or {})["unmapped"])

    client = Client()
    client.force_login(alice)
    page = client.get(reverse("inspector-conversation", args=[conversation.public_id]))
    assert page.status_code == 200
    assert "get_weather_forecast" in page.content.decode()


@pytest.mark.django_db
def test_the_import_command_takes_both_recorded_traces(
    alice: User, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in FILES:
        call_command("import", str(RECORDED / name), "--user", "alice")
    assert Conversation.objects.filter(owner=alice).count() == 2


@pytest.mark.django_db
@pytest.mark.parametrize("name", FILES)
def test_a_re_exported_recorded_trace_keeps_the_trace_and_span_ids_of_its_model_calls(
    alice: User, name: str
) -> None:
    data = (RECORDED / name).read_bytes()
    source = json.loads(data)
    chats = {
        (s["traceId"], s["spanId"])
        for rs in source["resourceSpans"]
        for ss in rs["scopeSpans"]
        for s in ss["spans"]
        if s["name"] != "turn"
    }
    imported = conversation_import(data=data, actor=alice, source=name)

    exported = json.loads(transcript_export(conversation=imported, fmt="otel"))

    spans = [s for rs in exported["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]
    assert {(s["traceId"], s["spanId"]) for s in spans if s["name"] != "invoke_agent"} == chats
    # The source's own root (the recorder's "turn" span) is the re-export's turn: no new span id,
    # so sending the re-export to the same backend adds no span.
    roots = {
        (s["traceId"], s["spanId"])
        for rs in source["resourceSpans"]
        for ss in rs["scopeSpans"]
        for s in ss["spans"]
        if s["name"] == "turn"
    }
    assert {(s["traceId"], s["spanId"]) for s in spans if s["name"] == "invoke_agent"} == roots
