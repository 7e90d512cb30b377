"""OTLP traces written by other tools than this app and the OpenTelemetry GenAI instrumentations:
whatever can be mapped is mapped, the rest is kept as unmapped, nothing fails on a missing key,
and a file with the traces of several conversations imports several.

The fixtures are small recorded span shapes, written by hand after the attribute names each
instrumentation documents (their packages are not test dependencies here):
- OpenLLMetry (traceloop/openllmetry, ``opentelemetry-instrumentation-openai`` and the
  ``opentelemetry-semantic-conventions-ai`` attribute names): ``llm.request.type``,
  ``gen_ai.prompt.N.*``, ``gen_ai.completion.N.*``, ``gen_ai.usage.prompt_tokens``, and
  ``traceloop.span.kind = tool`` with ``traceloop.entity.input``/``output``;
- OpenInference (Arize-ai/openinference, ``openinference-semantic-conventions``):
  ``openinference.span.kind`` LLM/TOOL, ``llm.input_messages.N.message.*``,
  ``llm.output_messages.N.message.tool_calls.K.tool_call.*``, ``llm.token_count.*``,
  ``tool.name``, ``input.value``, ``output.value``;
- a plain HTTP client span (``http.request.method``, ``url.full``), as any HTTP instrumentation
  writes it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from conversations.models import Conversation
from conversations.record.transcripts.export import transcript_export
from conversations.services import conversation_import

WEATHER = "What will the weather be like in Beijing tomorrow?"
RESULT = '{"summary": "fog, -1 to 9 °C"}'


def _value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    return {"stringValue": value}


def _span(trace: int, span: int, name: str, attrs: dict[str, Any], parent: int = 0, at: int = 0) -> Any:
    return {
        "traceId": f"{trace:032x}",
        "spanId": f"{span:016x}",
        "parentSpanId": f"{parent:016x}" if parent else "",
        "name": name,
        "startTimeUnixNano": str(1_700_000_000_000_000_000 + at * 1_000_000),
        "endTimeUnixNano": str(1_700_000_000_000_000_000 + (at + 1) * 1_000_000),
        "attributes": [{"key": k, "value": _value(v)} for k, v in attrs.items()],
    }


def _otlp(*spans: Any, service: str = "weather-app") -> bytes:
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]}
    return json.dumps(
        {"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": list(spans)}]}]}
    ).encode()


HTTP_ONLY = _otlp(
    _span(1, 1, "GET", {"http.request.method": "GET", "url.full": "https://example.org/forecast"})
)

OPENLLMETRY = _otlp(
    _span(2, 1, "weather.workflow", {"traceloop.span.kind": "workflow"}),
    _span(
        2,
        2,
        "openai.chat",
        {
            "llm.request.type": "chat",
            "gen_ai.system": "openai",
            "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.prompt.0.role": "user",
            "gen_ai.prompt.0.content": WEATHER,
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.finish_reason": "tool_calls",
            "gen_ai.completion.0.tool_calls.0.id": "call_1",
            "gen_ai.completion.0.tool_calls.0.name": "get_weather_forecast",
            "gen_ai.completion.0.tool_calls.0.arguments": '{"city": "Beijing"}',
            "gen_ai.usage.prompt_tokens": 31,
            "gen_ai.usage.completion_tokens": 12,
            "llm.is_streaming": False,
        },
        parent=1,
        at=1,
    ),
    _span(
        2,
        3,
        "get_weather_forecast.tool",
        {
            "traceloop.span.kind": "tool",
            "traceloop.entity.name": "get_weather_forecast",
            "traceloop.entity.input": '{"city": "Beijing"}',
            "traceloop.entity.output": RESULT,
        },
        parent=1,
        at=2,
    ),
    _span(
        2,
        4,
        "openai.chat",
        {
            "llm.request.type": "chat",
            "gen_ai.system": "openai",
            "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.prompt.0.role": "user",
            "gen_ai.prompt.0.content": WEATHER,
            "gen_ai.prompt.1.role": "tool",
            "gen_ai.prompt.1.tool_call_id": "call_1",
            "gen_ai.prompt.1.content": RESULT,
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.content": "Fog in Beijing tomorrow.",
        },
        parent=1,
        at=3,
    ),
)

OPENINFERENCE = _otlp(
    _span(3, 1, "agent", {"openinference.span.kind": "CHAIN", "input.value": WEATHER}),
    _span(
        3,
        2,
        "ChatCompletion",
        {
            "openinference.span.kind": "LLM",
            "llm.provider": "openai",
            "llm.model_name": "gpt-4o-mini",
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.content": WEATHER,
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.tool_calls.0.tool_call.id": "call_9",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "get_weather_forecast",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": '{"city": "Beijing"}',
            "llm.token_count.prompt": 40,
            "llm.token_count.completion": 9,
        },
        parent=1,
        at=1,
    ),
    _span(
        3,
        3,
        "get_weather_forecast",
        {
            "openinference.span.kind": "TOOL",
            "tool.name": "get_weather_forecast",
            "input.value": '{"city": "Beijing"}',
            "output.value": RESULT,
        },
        parent=1,
        at=2,
    ),
)


@pytest.fixture
def alice() -> User:
    return User.objects.create_user("alice")


@pytest.mark.django_db
def test_a_trace_of_one_plain_http_span_imports_with_the_span_kept_as_unmapped(alice: User) -> None:
    imported = conversation_import(data=HTTP_ONLY, actor=alice, source="http.json")

    turn = imported.turns.get()
    assert not turn.steps.exists()
    unmapped = " ".join((imported.imported_meta or {})["unmapped"])
    assert "GET https://example.org/forecast" in unmapped


@pytest.mark.django_db
def test_the_import_command_takes_a_trace_without_genai_spans(alice: User, tmp_path: Any) -> None:
    alice.is_superuser = True
    alice.save()
    path = tmp_path / "http.json"
    path.write_bytes(HTTP_ONLY)

    call_command("import", str(path), "--user", "alice")

    assert Conversation.objects.filter(owner=alice).count() == 1


@pytest.mark.django_db
def test_the_browser_import_of_a_trace_without_genai_spans_is_not_a_server_error(alice: User) -> None:
    client = Client()
    client.force_login(alice)
    upload = SimpleUploadedFile("http.json", HTTP_ONLY, content_type="application/json")

    response = client.post(reverse("inspector-conversation-import"), {"transcript": upload})

    assert response.status_code < 500
    assert Conversation.objects.filter(owner=alice).count() == 1


@pytest.mark.django_db
def test_an_openllmetry_trace_maps_its_prompts_completions_tool_and_usage(alice: User) -> None:
    imported = conversation_import(data=OPENLLMETRY, actor=alice, source="openllmetry.json")

    turn = imported.turns.get()
    assert turn.question == WEATHER and turn.model_name == "gpt-4o-mini"
    steps = list(turn.steps.order_by("seq"))
    assert [s.kind for s in steps] == ["decide", "tool", "answer"]
    decide, tool, answer = steps
    assert decide.calls[0]["name"] == "get_weather_forecast"
    assert decide.calls[0]["arguments"] == {"city": "Beijing"}
    assert decide.usage == {"input_tokens": 31, "output_tokens": 12}
    assert (tool.tool_name, tool.arguments, tool.result) == (
        "get_weather_forecast",
        {"city": "Beijing"},
        json.loads(RESULT),
    )
    assert tool.parent_id == decide.pk
    assert answer.text == "Fog in Beijing tomorrow." and turn.answer == "Fog in Beijing tomorrow."
    unmapped = " ".join((imported.imported_meta or {})["unmapped"])
    assert "llm.is_streaming" in unmapped and "weather.workflow" in unmapped
    assert "gen_ai.prompt.0.content" not in unmapped


@pytest.mark.django_db
def test_an_openinference_trace_maps_its_messages_tool_call_and_token_counts(alice: User) -> None:
    imported = conversation_import(data=OPENINFERENCE, actor=alice, source="openinference.json")

    turn = imported.turns.get()
    assert turn.question == WEATHER and turn.model_name == "gpt-4o-mini"
    decide, tool = list(turn.steps.order_by("seq"))
    assert decide.calls[0]["name"] == "get_weather_forecast" and decide.calls[0]["id"] == "call_9"
    assert decide.usage == {"input_tokens": 40, "output_tokens": 9}
    assert (tool.tool_name, tool.arguments, tool.result) == (
        "get_weather_forecast",
        {"city": "Beijing"},
        json.loads(RESULT),
    )
    assert imported.model_profile.provider == "openai_chat"


@pytest.mark.django_db
def test_a_file_with_the_traces_of_two_conversations_imports_two(alice: User) -> None:
    both = json.loads(OPENLLMETRY)
    both["resourceSpans"] += json.loads(OPENINFERENCE)["resourceSpans"]

    first = conversation_import(data=json.dumps(both).encode(), actor=alice, source="collector.json")

    conversations = Conversation.objects.filter(owner=alice)
    assert conversations.count() == 2 and first in conversations
    assert sorted(c.turns.count() for c in conversations) == [1, 1]


def _exported_ids(conversation: Conversation) -> list[tuple[str, str, str]]:
    document = json.loads(transcript_export(conversation=conversation, fmt="otel"))
    spans = [s for rs in document["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]
    return [(s["name"], s["traceId"], s["spanId"]) for s in spans]


def _ids(data: bytes) -> set[tuple[str, str]]:
    document = json.loads(data)
    return {
        (s["traceId"], s["spanId"])
        for rs in document["resourceSpans"]
        for ss in rs["scopeSpans"]
        for s in ss["spans"]
    }


@pytest.mark.django_db
@pytest.mark.parametrize("data", [OPENLLMETRY, OPENINFERENCE], ids=["openllmetry", "openinference"])
def test_a_re_exported_foreign_trace_keeps_the_trace_and_span_ids_of_its_model_and_tool_spans(
    alice: User, data: bytes
) -> None:
    imported = conversation_import(data=data, actor=alice, source="trace.json")

    exported = _exported_ids(imported)

    steps = [(t, s) for name, t, s in exported if name != "invoke_agent"]
    assert steps and set(steps) <= _ids(data)


@pytest.mark.django_db
def test_the_tool_row_of_an_imported_trace_shows_its_arguments_and_result(alice: User) -> None:
    imported = conversation_import(data=OPENLLMETRY, actor=alice, source="openllmetry.json")
    client = Client()
    client.force_login(alice)

    page = client.get(reverse("inspector-conversation", args=[imported.public_id])).content.decode()

    row = page[page.index('class="tool-call') :]
    shown = row[row.index("no JSON-RPC exchange recorded") : row.index("</div>")]
    assert "arguments and result from the trace" in shown
    assert "Beijing" in shown and "fog, -1 to 9" in shown


@pytest.mark.django_db
def test_a_foreign_trace_goes_through_the_redactor_before_it_is_stored(alice: User) -> None:
    # Another tool's spans never passed this installation's redactor: a key in a prompt or in a
    # plain HTTP span's URL must not reach the database.
    key = "sk-proj-" + "A1b2C3d4" * 4
    google = "AIza" + "Q" * 35
    trace = _otlp(
        _span(
            5,
            1,
            "openai.chat",
            {
                "llm.request.type": "chat",
                "gen_ai.system": "openai",
                "gen_ai.request.model": "gpt-4o-mini",
                "gen_ai.prompt.0.role": "user",
                "gen_ai.prompt.0.content": f"My key is {key}; what is the weather?",
                "gen_ai.completion.0.role": "assistant",
                "gen_ai.completion.0.content": "Fog.",
            },
        ),
        _span(
            5, 2, "GET", {"http.request.method": "GET", "url.full": f"https://example.org/v1?key={google}"}
        ),
    )

    imported = conversation_import(data=trace, actor=alice, source="leaky.json")

    stored = json.dumps(
        [
            list(imported.turns.values()),
            list(Conversation.objects.filter(pk=imported.pk).values("imported_meta")),
            [list(turn.steps.values()) for turn in imported.turns.all()],
        ],
        default=str,
    )
    assert key not in stored and google not in stored
    assert "what is the weather?" in stored and "[REDACTED" in stored
