"""``server hosts`` and ``server check`` against real stdio servers: the bundled demo server,
``@modelcontextprotocol/server-everything``, ``mcp-server-time`` and, for a host's refusal,
``@modelcontextprotocol/server-sequential-thinking`` (docs/hosts.md §3, §4)."""

from __future__ import annotations

import json
import sys

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from conversations.loop.hosts import HOSTS
from servers.models import Operation
from tests.servers.test_third_party import node_server

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
DEMO = ["--", sys.executable, "-m", "servers.demo_server"]


def hosts_json(name: str, *hosts: str, capsys: pytest.CaptureFixture[str]) -> dict:
    capsys.readouterr()
    call_command("server", "hosts", name, "--json", *[arg for host in hosts for arg in ("--host", host)])
    return json.loads(capsys.readouterr().out)


def check(name: str, *args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    capsys.readouterr()
    try:
        call_command("server", "check", name, "--json", *args)
        code = 0
    except CommandError as exc:
        code = exc.returncode
    return code, json.loads(capsys.readouterr().out)


def tool_view(document: dict, host: str, tool: str) -> dict:
    view = next(view for view in document["hosts"] if view["host"] == host)
    return next(shown for shown in view["tools"] if shown["name"] == tool)


def test_hosts_shows_the_demo_server_as_every_host_sends_it(
    workbench: None, capsys: pytest.CaptureFixture[str]
) -> None:
    call_command("server", "add", "demo-cli", *DEMO)
    document = hosts_json("demo-cli", capsys=capsys)

    assert list(document["verdicts"]) == list(HOSTS)
    assert document["tools"] >= 4
    claude = tool_view(document, "claude", "get_weather_forecast")
    assert claude["host_name"] == "mcp__demo-cli__get_weather_forecast"
    assert claude["wire"]["name"] == "mcp__demo-cli__get_weather_forecast"
    assert {
        "kind": "changed",
        "path": "name",
        "before": "get_weather_forecast",
        "after": claude["host_name"],
    } in claude["changes"]
    strict = tool_view(document, "openai-strict", "get_weather_forecast")
    assert strict["verdict"] == "changed" and strict["wire"]["function"]["strict"] is True
    lost = {change["path"] for change in strict["changes"] if change["kind"] == "lost"}
    assert "inputSchema/properties/city/minLength" in lost
    assert tool_view(document, "openai", "get_weather_forecast")["verdict"] == "ok"
    operation = Operation.objects.get(server__name="demo-cli")
    assert operation.kind == "tools/list" and operation.source == "cli"
    assert document["operation"] == str(operation.public_id)


def test_hosts_prints_changes_and_losses_for_one_host(
    workbench: None, capsys: pytest.CaptureFixture[str]
) -> None:
    call_command("server", "add", "demo-cli", *DEMO)
    capsys.readouterr()
    call_command("server", "hosts", "demo-cli", "--host", "openai-strict")
    printed = capsys.readouterr().out

    assert printed.startswith("openai-strict (OpenAI function calling, strict")
    assert "  get_weather_forecast: changed" in printed
    assert "      LOST     inputSchema/properties/city/minLength: 1" in printed
    assert "      added    inputSchema/additionalProperties: false" in printed
    assert "claude" not in printed


def test_check_exit_codes_on_the_demo_server(workbench: None, capsys: pytest.CaptureFixture[str]) -> None:
    call_command("server", "add", "demo-cli", *DEMO)
    code, report = check("demo-cli", capsys=capsys)
    strict_code, strict_report = check("demo-cli", "--strict", capsys=capsys)

    assert code == 0 and report["ready"] is True and report["counts"]["error"] == 0
    assert strict_report["counts"]["warning"] > 0 and strict_code == 1 and strict_report["ready"] is False
    portability = [f for f in report["findings"] if f["area"] == "portability" and f["level"] == "warning"]
    assert any(f["host"] == "openai-strict" and "minLength" in f["message"] for f in portability)


def test_server_everything_is_ready_and_strict_fails_it_for_one_undescribed_parameter(
    workbench: None, capsys: pytest.CaptureFixture[str]
) -> None:
    call_command("server", "add", "everything", "--", *node_server("server-everything"), "stdio")
    code, report = check("everything", capsys=capsys)
    strict_code, strict_report = check("everything", "--strict", capsys=capsys)

    assert code == 0 and report["ready"] is True and report["counts"]["error"] == 0
    assert strict_code == 1 and strict_report["exit_code"] == 1
    warnings = [f for f in report["findings"] if f["level"] == "warning"]
    assert [(f["area"], f["tool"]) for f in warnings] == [("description", "get-resource-reference")]
    assert "resourceType" in warnings[0]["message"]
    # Annotations and re-expressed keywords are notes: $schema dropped by strict mode, a type
    # list sent to Gemini as anyOf.
    assert report["hosts"]["openai-strict"] == "changed" and report["hosts"]["anthropic"] == "ok"


def test_mcp_server_time_is_ready_even_with_strict(
    workbench: None, capsys: pytest.CaptureFixture[str]
) -> None:
    call_command(
        "server", "add", "time", "--", sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"
    )
    code, report = check("time", "--strict", capsys=capsys)

    assert code == 0 and report["ready"] is True
    assert report["counts"] == {"error": 0, "warning": 0, "note": report["counts"]["note"]}
    notes = {(f["tool"], f["host"]) for f in report["findings"]}
    assert ("get_current_time", "claude") in notes and ("convert_time", "vscode") in notes


def test_a_description_past_openais_limit_is_refused_and_exits_2(
    workbench: None, capsys: pytest.CaptureFixture[str]
) -> None:
    # server-sequential-thinking describes its one tool in about 2,800 characters.
    call_command("server", "add", "thinking", "--", *node_server("server-sequential-thinking"))
    code, report = check("thinking", capsys=capsys)
    anthropic_code, _ = check("thinking", "--host", "anthropic", "--host", "claude", capsys=capsys)

    assert code == 2 and report["exit_code"] == 2 and report["ready"] is False
    refused = {(f["host"], f["tool"]) for f in report["findings"] if f["level"] == "error"}
    assert refused == {
        ("openai", "sequentialthinking"),
        ("openai-strict", "sequentialthinking"),
        ("openai-responses", "sequentialthinking"),
    }
    assert report["hosts"]["openai"] == "refused" and report["hosts"]["anthropic"] == "ok"
    assert anthropic_code == 0


def test_check_prints_a_summary_line_and_exits_2_through_the_command_error(
    workbench: None, capsys: pytest.CaptureFixture[str]
) -> None:
    call_command("server", "add", "thinking", "--", *node_server("server-sequential-thinking"))
    capsys.readouterr()
    with pytest.raises(CommandError) as raised:
        call_command("server", "check", "thinking")
    printed = capsys.readouterr().out

    assert raised.value.returncode == 2
    assert "is not ready" in str(raised.value)
    assert printed.splitlines()[-1].startswith("thinking: 3 errors, 0 warnings")
    assert any(
        line.startswith("error   portability  sequentialthinking: [openai] refused: the description is")
        for line in printed.splitlines()
    )


def test_a_server_that_cannot_list_exits_3(workbench: None, capsys: pytest.CaptureFixture[str]) -> None:
    call_command("server", "add", "dies", "--", sys.executable, "-c", "import sys; sys.exit(3)")
    with pytest.raises(CommandError) as raised:
        call_command("server", "check", "dies")
    assert raised.value.returncode == 3
    with pytest.raises(CommandError, match="tools/list failed"):
        call_command("server", "hosts", "dies")
