"""Teaching mode's field notes: every field of every payload the demo model (in the four provider
formats, each paradigm, streamed or not, refusals and errors included) and the demo MCP server
(both protocol eras, conversation and workbench) put on the wire has a note; so has every field
real servers beyond the demo send — the asking fixture server's elicitation, sampling, roots and
input_required round trips, an MCP Apps tool, OAuth flows, and server-everything's subscription
and log messages. Real runs: the demo model in-process over HTTP, the MCP servers over stdio or
HTTP, the OAuth fixture server on localhost."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

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
from servers.gateway.oauth import RECORD_LABEL_PREFIX
from servers.models import McpServer, Operation
from tests.factories import UserFactory
from tests.fixtures.oauth_server import PRE_REGISTERED, Knobs, Served
from tests.servers.test_third_party import node_server

pytestmark = pytest.mark.django_db(transaction=True)

REPO_ROOT = Path(__file__).resolve().parents[2]

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

    # Every format but OAuth (the demo server needs none: the test below records a flow).
    assert _formats_seen() == set(teaching.FORMATS) - {"oauth"}
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


def test_an_input_required_maps_keys_are_the_servers_names_and_an_elicitation_answer_is_the_users_data() -> (
    None
):
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {
                "name": "order_coffee",
                "arguments": {"drink": "tea"},
                "inputResponses": {"ask:the-order": {"action": "accept", "content": {"sugars": 2}}},
                "requestState": "opaque",
            },
        }
    )

    names = teaching.field_names(body, "mcp")

    assert "ask:the-order" not in names and "sugars" not in names and "drink" not in names
    assert {"inputResponses", "action", "content", "requestState"} <= set(names)
    # A tool result's content is protocol blocks, walked as ever.
    assert "isError" in teaching.field_names(
        '{"result": {"content": [{"type": "text", "isError": 1}]}}', "mcp"
    )


def test_an_oauth_token_request_is_read_as_a_form_and_hostile_text_as_nothing() -> None:
    form = "grant_type=authorization_code&code=%E2%80%A2%E2%80%A2&code_verifier=x&resource=https%3A%2F%2Fa"

    assert teaching.field_names(form, "oauth") == ["grant_type", "code", "code_verifier", "resource"]
    assert teaching.field_names(form, "mcp") == []
    assert teaching.field_names("not a form at all", "oauth") == []
    assert teaching.field_names("a=1&" * 1000, "oauth") == []  # more fields than a token request has
    assert teaching.field_names("\udcff=\x00", "oauth") == ["\udcff"]


def test_the_oauth_records_are_told_apart_by_the_label_the_gateway_gives_them() -> None:
    label = f"{RECORD_LABEL_PREFIX}: POST https://auth.example/token"

    assert teaching.body_format(channel="mcp", label=label) == "oauth"
    assert teaching.body_format(channel="mcp", label="tools/call") == "mcp"


def test_the_format_of_a_body_follows_its_channel_and_path() -> None:
    assert teaching.body_format(channel="mcp", label="tools/call") == "mcp"
    assert teaching.body_format(channel="llm", label="POST /v1/chat/completions") == "openai_chat"
    assert teaching.body_format(channel="llm", label="POST /v1/responses") == "openai_responses"
    assert teaching.body_format(channel="llm", label="POST /v1/messages") == "anthropic"
    assert teaching.body_format(channel="llm", label="POST /v1beta/models/demo:generateContent") == "gemini"


def _stdio_server(name: str, args: list[str], **fields: Any) -> McpServer:
    return server_services.server_save(
        server=None,
        owner=None,
        fields={
            "name": name,
            "transport": "stdio",
            "command": sys.executable,
            "args": args,
            "cwd": str(REPO_ROOT),
            "call_timeout": 20.0,
            **fields,
        },
        env={},
        secret_env={},
        headers={},
        secret_headers={},
    )


def _app_call(client: Client, server: McpServer, tool: str, arguments: dict[str, Any]) -> Operation:
    client.post(f"/servers/{server.name}/list/tools")
    response = client.post(f"/servers/{server.name}/tools/{tool}", {"arguments": json.dumps(arguments)})
    assert response.status_code == 302, response.content[:300]
    return Operation.objects.get(public_id=response["Location"].rstrip("/").rsplit("/", 1)[-1])


def test_every_field_real_servers_beyond_the_demo_send_has_a_note(settings: Any) -> None:
    """The servers that ask back (elicitation accepted, declined and cancelled; sampling; roots)
    in both eras — at 2026-07-28 the input_required round trip —, an MCP Apps tool with its
    ``ui://`` resource and a call made through the host, and an HTTP server's OAuth flow."""
    settings.WORKBENCH_RUNNER = "inline"
    alice = UserFactory(username="alice", is_staff=True)
    demo = demo_profile_ensure()
    roots = [{"uri": "file:///srv/data", "name": "data"}]
    for era in ("modern", "legacy"):
        asking = _stdio_server(
            f"asking-{era}",
            ["-m", "tests.fixtures.asking_server"],
            era=era,
            sampling_profile=demo,
            roots=roots,
        )
        for tool, arguments, preset in (
            ("order_coffee", {"drink": "latte"}, "accept-defaults"),
            ("delete_record", {"name": "invoice-7"}, "accept-defaults"),  # declined: no default
            ("order_coffee", {"drink": "tea"}, "cancel"),
            ("one_line_about", {"topic": "tea"}, ""),
            ("count_roots", {}, ""),
        ):
            call_command(
                "server",
                "call",
                asking.name,
                tool,
                "--args",
                json.dumps(arguments),
                *(["--elicitation", preset] if preset else []),
                stdout=io.StringIO(),
                stderr=io.StringIO(),
            )
    labels = set(Exchange.objects.values_list("label", flat=True))
    assert {"elicitation/create", "sampling/createMessage", "roots/list"} <= labels
    assert Exchange.objects.filter(response_body__contains='"input_required"').exists()

    # MCP Apps: the tool's UI resource, read and opened, and a tool the app calls through the host.
    client = Client()
    client.force_login(alice)
    apps = _stdio_server("apps", ["tests/servers/app_server.py"])
    operation = _app_call(client, apps, "counter", {"start": 7})
    opened = client.post(f"/servers/op/{operation.public_id}/app")
    assert opened.status_code == 200, opened.content[:300]
    called = client.post(
        f"/servers/op/{operation.public_id}/app/call",
        json.dumps({"name": "increment", "arguments": {"by": 41}}),
        content_type="application/json",
    )
    assert called.status_code == 200, called.content[:300]
    assert Exchange.objects.filter(label="resources/read", response_body__contains="ui://counter").exists()

    # OAuth: discovery, registration, PKCE and the token, then a call with it; OpenID discovery;
    # client credentials.
    with Served() as fake:
        for name, knobs, auth in (
            ("guarded", Knobs(), []),
            ("guarded-oidc", Knobs(www_authenticate=False, oidc=True), []),
            (
                "guarded-machine",
                Knobs(),
                ["--grant", "client_credentials", "--client-id", PRE_REGISTERED[0]]
                + ["--client-secret", PRE_REGISTERED[1]],
            ),
        ):
            fake.knobs = knobs
            quiet = {"stdout": io.StringIO(), "stderr": io.StringIO()}
            call_command("server", "add", name, "--url", fake.mcp_url, **quiet)
            call_command("server", "auth", name, *auth, **quiet)
            call_command("server", "call", name, "whoami", **quiet)
            gateway.close_all()
    assert any(label.startswith("oauth: POST") for label in Exchange.objects.values_list("label", flat=True))

    token = Exchange.objects.filter(label__startswith="oauth: POST", label__endswith="/token").first()
    assert token is not None
    assert {"grant_type", "code", "code_verifier", "resource"} <= set(
        teaching.field_names(token.request_body, "oauth")
    )

    assert {"mcp", "oauth"} <= _formats_seen()
    assert _unannotated() == {}


@pytest.mark.slow
def test_every_field_of_a_subscription_and_a_log_level_change_has_a_note(settings: Any) -> None:
    """server-everything (the reference servers' own, over stdio): a resource subscription with
    its update notifications, and the log level set with the log messages that follow."""
    settings.WORKBENCH_RUNNER = "thread"
    quiet = {"stdout": io.StringIO(), "stderr": io.StringIO()}
    call_command("server", "add", "everything", "--", *node_server("server-everything"), "stdio", **quiet)
    call_command(
        "server",
        "subscribe",
        "everything",
        "demo://resource/static/document/architecture.md",
        "--for",
        "2",
        "--call",
        "toggle-subscriber-updates",
        **quiet,
    )
    call_command("server", "log-level", "everything", "debug", **quiet)
    call_command("server", "call", "everything", "toggle-simulated-logging", **quiet)

    labels = set(Exchange.objects.values_list("label", flat=True))
    assert {
        "resources/subscribe",
        "notifications/resources/updated",
        "resources/unsubscribe",
        "logging/setLevel",
        "notifications/message",
    } <= labels, labels
    assert _unannotated() == {}
