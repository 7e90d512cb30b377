"""Traces that other tools read fully: content on the spans, complete GenAI/MCP attributes for
every wire format, streamed or not, every paradigm, stable ids, and OTLP/protobuf beside OTLP/JSON
— each read back with the official protobuf definitions and checked against the semantic
conventions package."""

from __future__ import annotations

import importlib
import json
import pkgutil
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import override_settings
from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.semconv import attributes as stable_attributes
from opentelemetry.semconv._incubating import attributes as incubating_attributes

from conversations.loop.paradigms import PARADIGMS
from conversations.models import Conversation, ModelProfile, RedactionRule, Step
from conversations.record.transcripts.export import transcript_export, transcript_export_bytes
from conversations.record.transcripts.importing import transcript_import
from conversations.record.transcripts.otel import OPENINFERENCE_SPAN_KIND
from conversations.runner import turn_run
from conversations.services import conversation_start, demo_format_profiles_ensure, demo_profile_ensure
from servers import gateway
from servers.services import demo_server_ensure

WEATHER = "What will the weather be like in Beijing tomorrow?"
CONTENT_KEYS = {
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.definitions",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
}


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


def _run(profile: ModelProfile, *, paradigm: str = "native", question: str = WEATHER) -> Conversation:
    alice = User.objects.get_or_create(username="alice")[0]
    conversation, turn = conversation_start(
        owner=alice,
        model_profile=profile,
        question=question,
        servers=[demo_server_ensure()],
        paradigm=paradigm,
        dispatch=False,
    )
    turn_run(turn_id=turn.pk)
    return conversation


def _value(value: dict[str, Any]) -> Any:
    if "arrayValue" in value:
        return [_value(item) for item in value["arrayValue"].get("values", [])]
    if "intValue" in value:
        return int(value["intValue"])
    return next(iter(value.values()))


def _attrs(span: dict[str, Any]) -> dict[str, Any]:
    return {item["key"]: _value(item["value"]) for item in span.get("attributes", [])}


def _protobuf_spans(conversation: Conversation) -> list[dict[str, Any]]:
    """The ``otlp`` export parsed by the official protobuf definitions, back in protobuf's JSON."""
    message = ExportTraceServiceRequest.FromString(
        transcript_export_bytes(conversation=conversation, fmt="otlp")
    )
    spans = [span for rs in message.resource_spans for ss in rs.scope_spans for span in ss.spans]
    return [MessageToDict(span) for span in spans]


def _json_spans(conversation: Conversation) -> list[dict[str, Any]]:
    document = json.loads(transcript_export(conversation=conversation, fmt="otel"))
    return [span for rs in document["resourceSpans"] for ss in rs["scopeSpans"] for span in ss["spans"]]


def _convention_names() -> set[str]:
    """Every attribute name the installed semantic-conventions package defines (stable and incubating)."""
    names: set[str] = set()
    for package in (stable_attributes, incubating_attributes):
        for module in pkgutil.iter_modules(package.__path__):
            loaded = importlib.import_module(f"{package.__name__}.{module.name}")
            names.update(v for k, v in vars(loaded).items() if k.isupper() and isinstance(v, str))
    return names


CASES = [
    (provider, stream, paradigm)
    for provider in ("openai_chat", "openai_responses", "anthropic", "gemini")
    for stream in (False, True)
    for paradigm in PARADIGMS
]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("provider", "stream", "paradigm"), CASES)
def test_every_format_streamed_or_not_under_every_paradigm_exports_complete_protobuf_spans(
    provider: str, stream: bool, paradigm: str
) -> None:
    profile = next(p for p in demo_format_profiles_ensure(stream=stream) if p.provider == provider)
    conversation = _run(profile, paradigm=paradigm)
    decide = Step.objects.filter(turn__conversation=conversation, kind="decide").first()
    assert decide is not None

    spans = _protobuf_spans(conversation)

    chats = [s for s in spans if _attrs(s).get("gen_ai.operation.name") == "chat"]
    assert len(chats) >= 2
    for chat in chats:
        attrs = _attrs(chat)
        assert attrs["gen_ai.request.stream"] is stream
        assert attrs["gen_ai.response.id"] and attrs["gen_ai.response.model"] == "demo"
        assert attrs["gen_ai.response.finish_reasons"]
        assert attrs["gen_ai.usage.input_tokens"] > 0 and attrs["gen_ai.usage.output_tokens"] > 0
        assert (attrs["server.address"], attrs["server.port"]) == ("127.0.0.1", 80)
        assert attrs.get("gen_ai.output.type") == ("json" if paradigm == "structured" else None)
        inputs = json.loads(attrs["gen_ai.input.messages"])
        assert inputs[0]["parts"][0] == {"type": "text", "content": WEATHER}
        (output,) = json.loads(attrs["gen_ai.output.messages"])
        assert output["role"] == "assistant" and output["parts"]
        assert output["finish_reason"] == attrs["gen_ai.response.finish_reasons"][0]
    first, last = (_attrs(chats[0]), _attrs(chats[-1]))
    if paradigm in {"native", "auto"}:  # auto: the demo model takes native tools
        (call,) = json.loads(first["gen_ai.output.messages"])[0]["parts"]
        assert call["type"] == "tool_call" and call["arguments"] == {"city": "Beijing", "day": "tomorrow"}
        tool_names = [t["name"] for t in json.loads(first["gen_ai.tool.definitions"])]
        assert "demo__get_weather_forecast" in tool_names
        responses = [p for m in json.loads(last["gen_ai.input.messages"]) for p in m["parts"]]
        assert any(p["type"] == "tool_call_response" and p.get("id") == call.get("id") for p in responses)
    else:  # the tools are prompt text
        assert "demo__get_weather_forecast" in first["gen_ai.system_instructions"]
    assert "Beijing tomorrow" in json.loads(last["gen_ai.output.messages"])[0]["parts"][-1]["content"]

    (tool,) = [s for s in spans if _attrs(s).get("gen_ai.operation.name") == "execute_tool"]
    tool_attrs = _attrs(tool)
    assert tool["name"] == "execute_tool get_weather_forecast"
    assert tool_attrs["gen_ai.tool.name"] == "get_weather_forecast"
    assert tool_attrs["gen_ai.tool.description"].startswith("Get a weather forecast")
    assert json.loads(tool_attrs["gen_ai.tool.call.arguments"]) == {"city": "Beijing", "day": "tomorrow"}
    assert "Beijing tomorrow" in tool_attrs["gen_ai.tool.call.result"]
    if paradigm in {"native", "auto"}:  # the id the messages carry, never one made up (Gemini's)
        assert tool_attrs.get("gen_ai.tool.call.id") == call.get("id")
    # The JSON-RPC request under it is the MCP client span, not a second tool span.
    (rpc,) = [s for s in spans if s["name"] == "tools/call get_weather_forecast"]
    assert rpc["parentSpanId"] == tool["spanId"] and rpc["kind"] == "SPAN_KIND_CLIENT"
    assert "gen_ai.operation.name" not in _attrs(rpc) and _attrs(rpc)["mcp.method.name"] == "tools/call"

    names = _convention_names() | {OPENINFERENCE_SPAN_KIND}  # the one OpenInference name (docs/traces.md §1)
    for span in spans:
        unknown = {k for k in _attrs(span) if not k.startswith("inspector.") and k not in names}
        assert not unknown, f"{span['name']}: {unknown} are not semantic-convention attributes"


@pytest.mark.django_db(transaction=True)
def test_the_protobuf_export_is_the_json_export_in_the_other_encoding() -> None:
    conversation = _run(demo_profile_ensure())

    from_protobuf = _protobuf_spans(conversation)
    from_json = _json_spans(conversation)

    assert [s["name"] for s in from_protobuf] == [s["name"] for s in from_json]
    assert [_attrs(s) for s in from_protobuf] == [_attrs(s) for s in from_json]
    hex_ids = [(s["traceId"], s["spanId"]) for s in from_json]
    assert [(bytes.fromhex(t), bytes.fromhex(s)) for t, s in hex_ids] == [
        (Span.FromString(Span(trace_id=bytes.fromhex(t)).SerializeToString()).trace_id, bytes.fromhex(s))
        for t, s in hex_ids
    ]
    assert transcript_export_bytes(conversation=conversation, fmt="otlp") == transcript_export_bytes(
        conversation=conversation, fmt="otlp"
    )


@pytest.mark.django_db(transaction=True)
def test_content_goes_through_the_redactor_and_a_setting_leaves_it_out() -> None:
    conversation = _run(demo_profile_ensure())
    RedactionRule.objects.create(name="city", pattern="Beijing")

    redacted = json.dumps([_attrs(s) for s in _json_spans(conversation)])
    with override_settings(OTEL_EXPORT_CONTENT=False):
        without = [_attrs(s) for s in _json_spans(conversation)]

    assert "Beijing" not in redacted and "[REDACTED:city]" in redacted
    assert all(not CONTENT_KEYS & set(attrs) for attrs in without)
    assert any(attrs.get("gen_ai.operation.name") == "chat" for attrs in without)


@pytest.mark.django_db(transaction=True)
def test_export_import_export_keeps_every_trace_span_and_conversation_id() -> None:
    original = _run(demo_profile_ensure())
    bob = User.objects.create_user("bob")
    imported = transcript_import(data=transcript_export(conversation=original, fmt="json"), owner=bob)

    def ids(conversation: Conversation) -> list[tuple[str, str, str | None, str]]:
        return [
            (s["traceId"], s["spanId"], s.get("parentSpanId"), _attrs(s)["gen_ai.conversation.id"])
            for s in _json_spans(conversation)
        ]

    assert ids(imported) == ids(original)
    assert {conversation_id for *_, conversation_id in ids(original)} == {str(original.public_id)}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("scenario", ["[demo:unknown-tool]", "[demo:missing-argument]"])
def test_a_call_refused_before_sending_is_no_tool_error_and_keeps_the_mcp_name(scenario: str) -> None:
    conversation = _run(demo_profile_ensure(), question=f"{WEATHER} {scenario}")

    tools = [s for s in _json_spans(conversation) if _attrs(s).get("gen_ai.operation.name") == "execute_tool"]

    refused = [s for s in tools if s.get("status", {}).get("code") == 2]
    assert refused, "the scenario refuses the first call"
    for span in refused:
        attrs = _attrs(span)
        assert attrs["error.type"] == "invalid_tool_call"
        assert not attrs["gen_ai.tool.name"].startswith("demo__")
        assert span["name"] == f"execute_tool {attrs['gen_ai.tool.name']}"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("paradigm", ["prompt_xml", "prompt_json", "structured"])
def test_the_chat_spans_of_a_paradigm_that_puts_its_tools_in_the_prompt_carry_their_tool_definitions(
    paradigm: str,
) -> None:
    conversation = _run(demo_profile_ensure(), paradigm=paradigm)

    spans = _json_spans(conversation)

    chats = [_attrs(s) for s in spans if _attrs(s).get("gen_ai.operation.name") == "chat"]
    assert chats
    for chat in chats:
        definitions = json.loads(chat["gen_ai.tool.definitions"])
        weather = next(d for d in definitions if d["name"] == "demo__get_weather_forecast")
        assert weather["type"] == "function" and "city" in weather["parameters"]["properties"]
