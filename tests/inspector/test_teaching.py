"""Teaching mode's field notes: every field of every payload the demo model (in the four provider
formats, each paradigm, streamed or not, refusals and errors included) and the demo MCP server
(both protocol eras, conversation and workbench) put on the wire has a note. Real runs: the demo
model in-process over HTTP, the demo MCP server over stdio."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from conversations.models import Exchange
from conversations.runner import turn_run
from conversations.services import (
    comparison_providers_start,
    comparison_start,
    conversation_start,
    demo_format_profiles_ensure,
    demo_profile_ensure,
)
from inspector import teaching
from servers import gateway
from servers import services as server_services
from servers.models import Operation
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)

WEATHER = "What will the weather be like in Beijing tomorrow?"
PARADIGMS = ("native", "prompt_json", "prompt_xml", "structured", "intent", "auto")


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


def _run_all(turns: list[Any]) -> None:
    for turn in turns:
        turn_run(turn_id=turn.pk)


def _unannotated() -> dict[str, set[str]]:
    """Field names in the recorded bodies that the table has no note for, by format."""
    missing: dict[str, set[str]] = {}
    for exchange in Exchange.objects.all():
        fmt = teaching.body_format(channel=exchange.channel, label=exchange.label)
        for body in (exchange.request_body, exchange.response_body):
            for field in teaching.field_notes(body, fmt):
                if field.note is None:
                    missing.setdefault(fmt, set()).add(field.name)
    return missing


def _formats_seen() -> set[str]:
    return {teaching.body_format(channel=e.channel, label=e.label) for e in Exchange.objects.all()}


def test_every_field_the_demo_model_and_the_demo_server_send_has_a_note() -> None:
    alice = UserFactory(username="alice")
    demo_server = server_services.demo_server_ensure()
    for stream in (False, True):
        _run_all(
            comparison_providers_start(
                owner=alice, question=WEATHER, stream=stream, servers=[demo_server], dispatch=False
            )[1]
        )
        # Every paradigm in every format: the prompt paradigms, structured output, intent, auto.
        runs = [
            (profile, paradigm)
            for profile in demo_format_profiles_ensure(stream=stream)
            for paradigm in PARADIGMS
        ]
        _run_all(
            comparison_start(owner=alice, question=WEATHER, runs=runs, servers=[demo_server], dispatch=False)[
                1
            ]
        )
    demo = demo_profile_ensure()
    for choice, name in (("required", ""), ("none", ""), ("named", "demo__get_weather_forecast")):
        _, turn = conversation_start(
            owner=alice,
            model_profile=demo,
            question=WEATHER,
            servers=[demo_server],
            tool_choice=choice,
            tool_choice_name=name,
            dispatch=False,
        )
        turn_run(turn_id=turn.pk)
    # The scenarios: refusals (auto falls back), a server error, repairs.
    for marker in (
        "no-native-tools",
        "no-structured",
        "http-500",
        "malformed-json",
        "unknown-tool",
        "missing-argument",
    ):
        runs = [(profile, "auto") for profile in demo_format_profiles_ensure(stream=False)]
        _run_all(
            comparison_start(
                owner=alice,
                question=f"{WEATHER} [demo:{marker}]",
                runs=runs,
                servers=[demo_server],
                dispatch=False,
            )[1]
        )
    # The workbench, in both protocol eras.
    for era in ("legacy", "modern"):
        demo_server.era = era
        demo_server.save()
        for kind, target, arguments in (
            (Operation.Kind.CONNECT, "", None),
            (Operation.Kind.TOOLS_LIST, "", None),
            (Operation.Kind.TOOLS_CALL, "calculate", {"expression": "2 + 2"}),
            (Operation.Kind.TOOLS_CALL, "read_note", {"title": "nothing here"}),
            (Operation.Kind.TOOLS_CALL, "no_such_tool", {}),
            (Operation.Kind.RESOURCES_LIST, "", None),
            (Operation.Kind.PROMPTS_LIST, "", None),
        ):
            server_services.operation_start(
                server=demo_server, user=None, kind=kind, target=target, arguments=arguments
            )

    assert _formats_seen() == set(teaching.FORMATS)
    assert _unannotated() == {}


def test_a_field_without_a_note_is_reported_as_missing() -> None:
    notes = teaching.field_notes('{"jsonrpc": "2.0", "id": 1, "bogusField": true}', "mcp")

    assert [(field.name, field.note is not None) for field in notes] == [
        ("jsonrpc", True),
        ("id", True),
        ("bogusField", False),
    ]


def test_an_event_stream_is_read_event_by_event_and_a_tools_own_arguments_are_not_fields() -> None:
    body = (
        'event: content_block_start\ndata: {"type": "content_block_start", "index": 0, '
        '"content_block": {"type": "tool_use", "id": "t1", "name": "x", "input": {"city": "Paris"}}}\n\n'
        "data: [DONE]\n"
    )

    names = teaching.field_names(body, "anthropic")

    assert names == ["type", "index", "content_block", "id", "name", "input"]
    assert "city" not in names


def test_the_format_of_a_body_follows_its_channel_and_path() -> None:
    assert teaching.body_format(channel="mcp", label="tools/call") == "mcp"
    assert teaching.body_format(channel="llm", label="POST /v1/chat/completions") == "openai_chat"
    assert teaching.body_format(channel="llm", label="POST /v1/responses") == "openai_responses"
    assert teaching.body_format(channel="llm", label="POST /v1/messages") == "anthropic"
    assert teaching.body_format(channel="llm", label="POST /v1beta/models/demo:generateContent") == "gemini"
