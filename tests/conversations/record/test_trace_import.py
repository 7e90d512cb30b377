"""OTLP traces brought in as read-only conversations: this app's own exports (JSON and protobuf)
and a trace the OpenTelemetry SDK's OpenAI instrumentation makes of a real openai client calling
the demo model; JSON Lines refused with a message that names the formats to use."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from conversations.models import Conversation, Exchange
from conversations.record.transcripts.export import transcript_export, transcript_export_bytes
from conversations.record.transcripts.importing import TranscriptError
from conversations.runner import turn_run
from conversations.services import conversation_import, conversation_start, demo_profile_ensure
from servers import gateway
from servers.services import demo_server_ensure

WEATHER = "What will the weather be like in Beijing tomorrow?"
WEATHER_TOOL: Any = {
    "type": "function",
    "function": {
        "name": "demo__get_weather_forecast",
        "description": "Get a weather forecast for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "day": {"type": "string"}},
            "required": ["city"],
        },
    },
}


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


@pytest.fixture
def alice() -> User:
    return User.objects.create_user("alice")


def _recorded(alice: User) -> Conversation:
    conversation, turn = conversation_start(
        owner=alice,
        model_profile=demo_profile_ensure(),
        question=WEATHER,
        servers=[demo_server_ensure()],
        dispatch=False,
    )
    turn_run(turn_id=turn.pk)
    return conversation


def _page(owner: User, conversation: Conversation) -> str:
    client = Client()
    client.force_login(owner)
    return client.get(reverse("inspector-conversation", args=[conversation.public_id])).content.decode()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("fmt", ["otel", "otlp"])
def test_our_own_trace_comes_back_as_a_read_only_conversation_in_the_same_rows(alice: User, fmt: Any) -> None:
    original = _recorded(alice)
    bob = User.objects.create_user("bob")

    imported = conversation_import(
        data=transcript_export_bytes(conversation=original, fmt=fmt), actor=bob, source=f"trace.{fmt}"
    )

    assert imported.read_only and imported.owner == bob
    turn = imported.turns.get()
    assert (turn.question, turn.status, turn.model_name) == (WEATHER, "done", "demo")
    assert "Beijing tomorrow" in turn.answer
    kinds = list(turn.steps.order_by("seq").values_list("kind", flat=True))
    assert kinds.count("tool") == 1 and "connect" in kinds
    tool = turn.steps.get(kind="tool")
    assert (tool.tool_name, tool.arguments) == (
        "get_weather_forecast",
        {"city": "Beijing", "day": "tomorrow"},
    )
    assert "Beijing tomorrow" in json.dumps(tool.result)
    assert tool.parent is not None
    decide = tool.parent
    assert decide.calls[0]["name"] == "demo__get_weather_forecast" and WEATHER in decide.prompt
    assert not Exchange.objects.filter(turn=turn).exists()  # a trace holds no raw bodies
    meta = imported.imported_meta or {}
    assert meta["source"] == "otlp" and any("tools/call" in item for item in meta["unmapped"])
    page = _page(bob, imported)
    assert "get_weather_forecast" in page and "not mapped" in page and "Read-only" in page

    def trace_ids(conversation: Conversation) -> tuple[set[str], set[str]]:
        document = json.loads(transcript_export(conversation=conversation, fmt="otel"))
        spans = [s for rs in document["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]
        named = {
            a["value"]["stringValue"]
            for s in spans
            for a in s["attributes"]
            if a["key"] == "gen_ai.conversation.id"
        }
        steps = {s["spanId"] for s in spans if s["name"].startswith(("execute_tool", "chat", "invoke_agent"))}
        return {s["traceId"] for s in spans} | named, steps

    # Re-exported, the trace is the same trace: same trace id, conversation id, and the same span
    # ids for the turn, each model call and each tool call (a backend deduplicates them).
    assert trace_ids(imported) == trace_ids(original)


@pytest.mark.django_db(transaction=True)
def test_a_trace_the_opentelemetry_sdk_makes_of_an_openai_client_is_imported_and_shown(
    alice: User, live_server: Any
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "weather-app"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = OpenAIInstrumentor()  # type: ignore[no-untyped-call]
    instrumentor.instrument(tracer_provider=provider)
    try:
        client = openai.OpenAI(
            base_url=f"{live_server.url}/demo-model/v1", api_key=settings.DEMO_MODEL_API_KEY
        )
        with provider.get_tracer("weather-app").start_as_current_span("invoke_agent weather"):
            messages: list[Any] = [{"role": "user", "content": WEATHER}]
            first = client.chat.completions.create(model="demo", messages=messages, tools=[WEATHER_TOOL])
            call = first.choices[0].message.tool_calls[0]  # type: ignore[index]
            messages.append(first.choices[0].message.model_dump(exclude_none=True))
            messages.append(
                {"role": "tool", "tool_call_id": call.id, "content": '{"summary": "fog, -1 to 9 °C"}'}
            )
            client.chat.completions.create(model="demo", messages=messages, tools=[WEATHER_TOOL])
    finally:
        instrumentor.uninstrument()
    data = encode_spans(exporter.get_finished_spans()).SerializeToString()

    imported = conversation_import(data=data, actor=alice, source="weather-app.pb")

    turn = imported.turns.get()
    assert imported.title == "Trace from weather-app" and turn.model_name == "demo"
    steps = list(turn.steps.order_by("seq"))
    assert [s.title for s in steps] == ["chat demo", "chat demo"]
    assert all(s.usage["input_tokens"] > 0 and s.usage["output_tokens"] > 0 for s in steps)
    assert imported.model_profile.provider == "openai_chat"
    unmapped = " ".join((imported.imported_meta or {})["unmapped"])
    assert "gen_ai.openai.response.service_tier" in unmapped
    page = _page(alice, imported)
    assert "chat demo" in page and "gen_ai.openai.response.service_tier" in page


@pytest.mark.django_db(transaction=True)
def test_a_jsonl_export_is_refused_with_the_formats_to_use(alice: User) -> None:
    original = _recorded(alice)

    with pytest.raises(TranscriptError, match="jsonl export.*Import the `json` export.*otel or otlp"):
        conversation_import(
            data=transcript_export(conversation=original, fmt="jsonl"), actor=alice, source="x.jsonl"
        )

    assert Conversation.objects.count() == 1


@pytest.mark.django_db
def test_otlp_without_spans_is_refused(alice: User) -> None:
    with pytest.raises(TranscriptError, match="no spans"):
        conversation_import(data=b'{"resourceSpans": []}', actor=alice, source="empty.json")


@pytest.mark.django_db
@pytest.mark.parametrize(
    "data",
    [
        b"[" * 5000 + b"]" * 5000,
        b'{"resourceSpans": ' + b"[" * 5000 + b"]" * 5000 + b"}",
        b'{"resourceSpans": [1]}\n' + b"[" * 5000 + b"]" * 5000,
    ],
    ids=["deep-json", "deep-otlp-json", "deep-second-line"],
)
def test_a_file_nested_thousands_deep_gets_a_clear_error_and_imports_nothing(
    alice: User, data: bytes
) -> None:
    with pytest.raises(TranscriptError):
        conversation_import(data=data, actor=alice, source="deep.json")

    assert Conversation.objects.count() == 0


@pytest.mark.django_db
def test_a_span_attribute_nested_thousands_deep_is_kept_as_its_text(alice: User) -> None:
    deep = "[" * 5000 + "]" * 5000
    span = {
        "traceId": "0" * 31 + "1",
        "spanId": "0" * 15 + "1",
        "name": "chat demo",
        "startTimeUnixNano": "1700000000000000000",
        "endTimeUnixNano": "1700000001000000000",
        "attributes": [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
            {"key": "gen_ai.input.messages", "value": {"stringValue": deep}},
        ],
    }
    data = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}).encode()

    conversation_import(data=data, actor=alice, source="deep-attribute.json")

    assert Conversation.objects.count() == 1
