"""The workbench against real stdio servers: the bundled demo server and a deliberately broken one."""

from __future__ import annotations

import json
import math
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connections
from django.test import Client

from conversations.models import Exchange
from servers import selectors, services
from servers.lint import Neighbourhood, lint_catalog
from servers.models import McpServer, Operation
from servers.operations import operation_run
from servers.views import TRANSCRIPT_PER_PAGE
from tests.fixtures import broken_server

REPO_ROOT = Path(__file__).resolve().parents[2]
SECRET = "tok-9f8e7d6c5b4a39281706"
pytestmark = pytest.mark.django_db


def demo(era: str = "legacy") -> McpServer:
    server = services.demo_server_ensure()
    server.era = era
    server.save()
    return server


def broken(**fields: Any) -> McpServer:
    return services.server_save(
        server=None,
        owner=None,
        fields={
            "name": "broken",
            "transport": "stdio",
            "command": sys.executable,
            "args": ["-m", "tests.fixtures.broken_server"],
            "cwd": str(REPO_ROOT),
            "call_timeout": 5.0,
            **fields,
        },
        env={},
        secret_env={"SERVICE_TOKEN": SECRET},
        headers={},
        secret_headers={},
    )


def labels(operation: Operation) -> list[str]:
    return [exchange.label for exchange in selectors.operation_exchanges(operation=operation)]


def wait_for(predicate: Any, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail("the condition did not come true in time")
        time.sleep(0.05)


# --- connect: identity and the handshake as it happened -------------------------------------


@pytest.mark.parametrize(
    ("era", "expected", "protocol"),
    [
        ("legacy", ["initialize", "notifications/initialized"], "2025-11-25"),
        ("modern", ["server/discover"], "2026-07-28"),
        ("auto", ["server/discover"], "2026-07-28"),
    ],
)
def test_connect_records_exactly_the_handshake_the_era_asks_for(
    workbench: None, era: str, expected: list[str], protocol: str
) -> None:
    operation = services.operation_start(server=demo(era), user=None, kind=Operation.Kind.CONNECT)

    assert operation.status == "ok", operation.error
    assert [label for label in labels(operation) if label != "stderr"] == expected
    assert operation.session["protocol_version"] == protocol
    assert operation.session["server_name"] == "inspector-demo"
    assert "tools" in operation.session["capabilities"]
    assert "teaching server" in operation.session["instructions"]


def test_the_server_page_shows_identity_capabilities_instructions_and_the_handshake(
    client: Client, workbench: None, alice: User
) -> None:
    client.force_login(alice)
    server = demo("legacy")

    client.post(f"/servers/{server.name}/connect")
    html = client.get(f"/servers/{server.name}/").content.decode()

    assert "inspector-demo" in html and "2025-11-25" in html
    assert "The handshake as it happened (2 messages)" in html
    assert "notifications/initialized" in html and "A teaching server bundled" in html


# --- tools: list, lint, tokens, a manual call ------------------------------------------------


def test_listed_tools_are_shown_with_their_token_cost_and_lint(
    client: Client, workbench: None, bob: User
) -> None:
    client.force_login(bob)
    server = demo()

    client.post(f"/servers/{server.name}/list/tools")
    listing, reports, overall = selectors.server_tool_reports(server=server, user=None)
    html = client.get(f"/servers/{server.name}/").content.decode()

    assert {report.name for report in reports} >= {"get_weather_forecast", "calculate"}
    assert all(report.tokens and report.tokens > 20 for report in reports)
    assert overall == []
    assert "6 listed" in html and "tokens in all" in html and "read-only" in html


def test_lint_names_every_kind_of_problem_a_provider_or_a_model_has_with_a_definition() -> None:
    tools = [
        {
            "name": "files.read",
            "description": "Read a file from the project workspace.",
            "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
        {"name": "x" * 70, "inputSchema": {"type": "object"}},
        {
            "name": "ok_tool",
            "description": "Do it.",
            "inputSchema": {
                "type": "object",
                "properties": {"a": {"type": "string", "description": "A."}},
                "required": ["a"],
            },
        },
        {
            "name": "search",
            "description": "Search the web for a query string.",
            "inputSchema": {
                "type": "object",
                "properties": {"q": {"type": "string", "description": "query"}},
                "required": ["q"],
            },
        },
    ]
    crowd = Neighbourhood("research", {"web": ["search", *[f"t{i}" for i in range(130)]]})

    reports, overall = lint_catalog(tools, server_name="fs", neighbourhoods=[crowd])

    findings = {report.name: " | ".join(f.message for f in report.findings) for report in reports}
    assert "refuse: '.'" in findings["files.read"]
    assert "parameters without a description: path" in findings["files.read"]
    assert "no 'required' list" in findings["files.read"]
    assert "accept at most 64" in findings["x" * 70] and "no description" in findings["x" * 70]
    assert "thin description" in findings["ok_tool"]
    assert "server 'web' also has a tool named 'search'" in findings["search"]
    assert any("135 tools" in finding.message for finding in overall)


def test_a_tool_that_runs_only_as_a_task_is_flagged_and_badged() -> None:
    schema = {
        "type": "object",
        "properties": {"q": {"type": "string", "description": "What to research."}},
        "required": ["q"],
    }
    tools = [
        {
            "name": "research",
            "description": "Research a question in depth, in the background.",
            "inputSchema": schema,
            "execution": {"taskSupport": "required"},
        },
        {
            "name": "quick",
            "description": "Answer a question at once from the local index.",
            "inputSchema": schema,
            "execution": {"taskSupport": "optional"},
        },
    ]

    reports, _ = lint_catalog(tools, server_name="srv")

    research, quick = reports
    assert research.task_support == "required" and quick.task_support == "optional"
    assert any("runs only as a task" in finding.message for finding in research.findings)
    assert quick.findings == []


def test_arguments_that_break_the_input_schema_are_refused_before_anything_is_sent(
    client: Client, workbench: None, bob: User
) -> None:
    client.force_login(bob)
    server = demo()
    client.post(f"/servers/{server.name}/list/tools")
    before = Exchange.objects.count()

    response = client.post(
        f"/servers/{server.name}/tools/get_weather_forecast",
        {"arguments": json.dumps({"city": 3, "extra": True})},
    )

    assert response.status_code == 400
    html = response.content.decode()
    assert "Not sent" in html and "city: 3 is not of type" in html
    assert Exchange.objects.count() == before
    assert not Operation.objects.filter(kind="tools/call").exists()


def test_a_manual_call_shows_the_result_the_checked_structured_content_and_the_paired_messages(
    client: Client, workbench: None, bob: User
) -> None:
    client.force_login(bob)
    server = demo()
    client.post(f"/servers/{server.name}/list/tools")

    response = client.post(
        f"/servers/{server.name}/tools/get_weather_forecast",
        {"arguments": json.dumps({"city": "Paris", "day": "tomorrow"})},
    )
    page = client.get(response["Location"])

    operation = Operation.objects.get(kind="tools/call")
    assert operation.status == "ok" and operation.user == bob
    assert operation.output_check == {"checked": True, "valid": True, "errors": []}
    [call] = [e for e in selectors.operation_exchanges(operation=operation) if e.label == "tools/call"]
    assert json.loads(call.request_body)["id"] == json.loads(call.response_body)["id"]
    assert call.duration_ms is not None and call.status == "ok"
    html = page.content.decode()
    assert "matches the outputSchema" in html and "progressToken" in html and "Paris" in html


# --- secrets ------------------------------------------------------------------------------


def test_a_configured_secret_never_reaches_the_exchanges_the_export_or_a_page(
    client: Client, workbench: None, alice: User
) -> None:
    client.force_login(alice)
    server = broken()
    client.post(f"/servers/{server.name}/list/tools")

    response = client.post(
        f"/servers/{server.name}/tools/env_value", {"arguments": json.dumps({"name": "SERVICE_TOKEN"})}
    )
    operation_page = client.get(response["Location"]).content.decode()

    operation = Operation.objects.get(kind="tools/call")
    assert operation.status == "ok"
    assert "[REDACTED:secret]" in json.dumps(operation.result)
    for exchange in Exchange.objects.all():
        assert SECRET not in json.dumps(
            [
                exchange.request_body,
                exchange.response_body,
                exchange.request_headers,
                exchange.response_headers,
                exchange.error,
            ]
        )
    assert SECRET not in json.dumps(operation.result)
    export = client.get(f"/servers/{server.name}/transcript.json").content.decode()
    assert "[REDACTED:secret]" in export and SECRET not in export
    for html in (
        operation_page,
        client.get(f"/servers/{server.name}/").content.decode(),
        client.get(f"/servers/{server.name}/transcript").content.decode(),
        client.get(f"/servers/{server.name}/edit").content.decode(),
    ):
        assert SECRET not in html


# --- a broken server: clear errors, and the workbench stays usable --------------------------


def test_a_server_that_exits_mid_call_is_a_clear_error_and_the_next_call_respawns_it(
    client: Client, workbench: None, alice: User
) -> None:
    client.force_login(alice)
    server = broken()
    client.post(f"/servers/{server.name}/list/tools")

    crashed = client.post(f"/servers/{server.name}/tools/crash", {"arguments": "{}"})
    crash_page = client.get(crashed["Location"]).content.decode()
    echoed = client.post(
        f"/servers/{server.name}/tools/echo", {"arguments": json.dumps({"text": "still here"})}
    )

    crash, echo = Operation.objects.filter(kind="tools/call").order_by("started_at")
    assert crash.status == "error" and "closed the connection" in crash.error
    assert broken_server.CRASH_STDERR_LINE in crash_page
    assert "no response" in crash_page or "Connection closed" in crash_page
    assert echo.status == "ok" and echo.result["content"][0]["text"] == "still here"
    assert echo.session["spawned"] is True and "died" in echo.session["respawn_reason"]
    assert client.get(echoed["Location"]).status_code == 200


def test_garbage_on_stdout_is_recorded_as_a_transport_error_and_the_call_still_answers(
    client: Client, workbench: None, alice: User
) -> None:
    client.force_login(alice)
    server = broken()
    client.post(f"/servers/{server.name}/list/tools")

    client.post(f"/servers/{server.name}/tools/noisy", {"arguments": "{}"})

    operation = Operation.objects.get(kind="tools/call")
    assert operation.status == "ok"
    transcript = client.get(f"/servers/{server.name}/transcript?errors=1").content.decode()
    assert "transport error" in transcript


def test_a_tool_failure_is_an_is_error_result_not_a_protocol_error(
    client: Client, workbench: None, alice: User
) -> None:
    client.force_login(alice)
    server = broken()
    client.post(f"/servers/{server.name}/list/tools")

    response = client.post(f"/servers/{server.name}/tools/fail", {"arguments": "{}"})

    operation = Operation.objects.get(kind="tools/call")
    assert operation.status == "ok" and operation.is_error
    assert "isError: true" in client.get(response["Location"]).content.decode()


@pytest.mark.django_db(transaction=True)
def test_a_call_that_never_answers_can_be_cancelled_and_the_cancel_is_on_the_wire(workbench: None) -> None:
    server = broken(call_timeout=60.0)
    operation = Operation.objects.create(
        server=server, kind=Operation.Kind.TOOLS_CALL, target="hang", arguments={"seconds": 600}
    )

    def run_then_disconnect() -> None:
        try:
            operation_run(operation_id=operation.pk)
        finally:
            connections.close_all()  # a leftover connection would block dropping the test database

    worker = threading.Thread(target=run_then_disconnect)
    worker.start()
    # The server logs once the call has reached it: cancelling before would stop a call not yet sent.
    wait_for(
        lambda: any(
            broken_server.HANG_LOG_LINE in e.response_body
            for e in selectors.operation_exchanges(operation=operation)
        )
    )

    services.operation_cancel(operation=operation)
    worker.join(timeout=30)

    operation.refresh_from_db()
    assert not worker.is_alive()
    assert operation.status == "cancelled"
    assert "notifications/cancelled" in labels(operation)
    [call] = [e for e in selectors.operation_exchanges(operation=operation) if e.label == "tools/call"]
    assert call.status == "no response"
    assert (
        services.operation_start(
            server=server, user=None, kind="tools/call", target="echo", arguments={"text": "hi"}
        ).status
        == "ok"
    )


def test_a_call_that_never_answers_times_out_with_a_clear_error(workbench: None) -> None:
    server = broken(call_timeout=1.0)

    operation = services.operation_start(
        server=server, user=None, kind=Operation.Kind.TOOLS_CALL, target="hang", arguments={"seconds": 600}
    )

    assert operation.status == "timeout"
    assert "did not answer within 1 s" in operation.error or "-32001" in operation.error
    assert "notifications/cancelled" in labels(operation)


# --- the transcript and saved calls ---------------------------------------------------------


def test_the_transcript_filters_by_method_and_errors_paginates_and_exports(
    client: Client, workbench: None, alice: User
) -> None:
    client.force_login(alice)
    server = broken()
    client.post(f"/servers/{server.name}/list/tools")
    for n in range(30):
        services.operation_start(
            server=server, user=None, kind="tools/call", target="echo", arguments={"text": str(n)}
        )
    services.operation_start(server=server, user=None, kind="tools/call", target="nope", arguments={})

    everything = client.get(f"/servers/{server.name}/transcript")
    calls = client.get(f"/servers/{server.name}/transcript?method=tools/call")
    errors = client.get(f"/servers/{server.name}/transcript.json?errors=1").json()

    assert everything.context["page"].paginator.count > 30
    assert everything.context["page"].paginator.num_pages == math.ceil(
        everything.context["page"].paginator.count / TRANSCRIPT_PER_PAGE
    )
    assert calls.context["page"].paginator.count == 31
    assert all(m["label"] == "tools/call" for m in errors["messages"])
    assert any("nope" in json.dumps(m["request"]) for m in errors["messages"])


def test_a_saved_call_runs_again_and_shows_what_changed(client: Client, workbench: None, alice: User) -> None:
    client.force_login(alice)
    server = demo()
    client.post(f"/servers/{server.name}/list/tools")
    client.post(
        f"/servers/{server.name}/tools/write_note", {"arguments": json.dumps({"title": "a", "text": "one"})}
    )
    client.post(f"/servers/{server.name}/tools/list_notes", {"arguments": "{}"})
    first = Operation.objects.filter(target="list_notes").get()
    client.post(f"/servers/op/{first.public_id}/save", {"name": "notes so far"})
    client.post(
        f"/servers/{server.name}/tools/write_note", {"arguments": json.dumps({"title": "b", "text": "two"})}
    )
    saved = server.saved_calls.get()

    response = client.post(f"/servers/saved/{saved.public_id}/run")
    html = client.get(response["Location"]).content.decode()

    rerun = Operation.objects.filter(target="list_notes").latest("started_at")
    assert rerun.saved_call == saved and rerun.pk != first.pk
    assert "Compared with the saved run" in html and 'class="diff-add"' in html


# --- the command line -------------------------------------------------------------------------


def test_the_command_line_adds_lists_and_calls_a_server_recording_like_the_browser(
    workbench: None, capsys: pytest.CaptureFixture[str]
) -> None:
    call_command("server", "add", "cli-demo", "--", sys.executable, "-m", "servers.demo_server")
    server = McpServer.objects.get(name="cli-demo")
    server.cwd = str(REPO_ROOT)
    server.save()
    call_command("server", "list")
    call_command("server", "tools", "cli-demo", "--json")
    listed = capsys.readouterr().out
    call_command("server", "call", "cli-demo", "calculate", "--args", '{"expression": "6*7"}', "--json")
    called = json.loads(capsys.readouterr().out)

    assert server.args == ["-m", "servers.demo_server"] and server.transport == "stdio"
    assert "cli-demo" in listed and '"calculate"' in listed
    assert called["status"] == "ok" and "42" in json.dumps(called["result"])
    assert [m["label"] for m in called["exchanges"]][-1] == "tools/call"
    assert Operation.objects.filter(server=server, source="cli").count() == 2


def test_the_command_line_refuses_arguments_the_schema_rejects(workbench: None) -> None:
    server = demo()
    services.operation_start(server=server, user=None, kind="tools/list")

    with pytest.raises(Exception, match="not sent"):
        call_command("server", "call", server.name, "calculate", "--args", '{"expression": 7}')


# --- content blocks no installed server sends ---------------------------------------------------


def test_audio_blocks_play_inline_only_for_safe_media_types(client: Client, bob: User) -> None:
    client.force_login(bob)
    wav = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQAAAAA="
    operation = Operation.objects.create(
        server=demo(),
        user=bob,
        kind=Operation.Kind.TOOLS_CALL,
        target="speak",
        status=Operation.Status.OK,
        result={
            "content": [
                {
                    "type": "audio",
                    "data": wav,
                    "mimeType": "audio/wav",
                    "annotations": {"audience": ["user"]},
                },
                {"type": "audio", "data": "PHNjcmlwdD4=", "mimeType": "text/html"},
            ],
            "isError": False,
        },
    )

    html = client.get(f"/servers/op/{operation.public_id}/").content.decode()

    assert f'<audio controls src="data:audio/wav;base64,{wav}">' in html
    assert "audience: user" in html
    assert "text/html is not shown inline" in html and "data:text/html" not in html
