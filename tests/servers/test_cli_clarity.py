"""``manage.py server`` against real stdio servers: partial results kept, empty lists said,
failures explained (a pinned era the server does not offer, a server that dies at start), and a
tool call shown whole (structuredContent and its output-schema check) without extra requests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from servers import gateway, selectors
from servers.models import McpServer, Operation
from tests.servers.test_third_party import node_server

LOPSIDED = str(Path(__file__).with_name("lopsided_server.py"))
OLD_SDK = str(Path(__file__).with_name("discover_refusing_server.py"))
pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def labels(operation: Operation) -> list[str]:
    return [exchange.label for exchange in selectors.operation_exchanges(operation=operation)]


def test_a_failed_template_listing_keeps_the_resources_and_says_which_call_failed(
    workbench: None, capsys: pytest.CaptureFixture[str]
) -> None:
    call_command("server", "add", "lopsided", "--", sys.executable, LOPSIDED)
    capsys.readouterr()
    with pytest.raises(CommandError, match="1 of 2 list calls failed") as raised:
        call_command("server", "resources", "lopsided")
    printed = capsys.readouterr()

    assert "memo://insights  insights  text/plain" in printed.out
    assert "resources/templates/list failed: MCP error -32601: Method not found" in printed.err
    assert raised.value.returncode == 1
    kinds = set(Operation.objects.filter(server__name="lopsided").values_list("kind", "status"))
    assert kinds == {("resources/list", "ok"), ("resources/templates/list", "error")}


def test_empty_lists_are_said_rather_than_printed_as_nothing(
    workbench: None, capsys: pytest.CaptureFixture[str]
) -> None:
    call_command("server", "add", "demo-cli", "--", sys.executable, "-m", "servers.demo_server")
    capsys.readouterr()
    call_command("server", "resources", "demo-cli")
    resources = capsys.readouterr().out
    call_command("server", "prompts", "demo-cli")
    prompts = capsys.readouterr().out

    assert resources.splitlines() == ["no resources", "no resource templates"]
    assert prompts.splitlines() == ["no prompts"]


def test_a_pinned_era_the_server_does_not_offer_is_named_with_no_fallback(
    workbench: None, capsys: pytest.CaptureFixture[str]
) -> None:
    # server-everything speaks the initialize handshake only: it has no server/discover.
    call_command(
        "server",
        "add",
        "everything-modern",
        "--era",
        "modern",
        "--",
        *node_server("server-everything"),
        "stdio",
    )
    with pytest.raises(CommandError) as raised:
        call_command("server", "tools", "everything-modern")

    message = str(raised.value)
    assert "did not offer the pinned protocol version 2026-07-28" in message
    assert "server/discover" in message and "pin mode has no fallback" in message
    operation = Operation.objects.get(server__name="everything-modern")
    assert "server/discover" in labels(operation)


def test_a_server_that_dies_at_start_points_to_what_it_wrote_on_stderr(
    workbench: None, capsys: pytest.CaptureFixture[str]
) -> None:
    script = "import sys; sys.stderr.write('boom: DEMO_KEY is not set\\n'); sys.exit(3)"
    call_command("server", "add", "dies", "--", sys.executable, "-c", script)
    with pytest.raises(CommandError) as raised:
        call_command("server", "tools", "dies")

    message = str(raised.value)
    assert "exited" in message or "closed" in message.lower()
    assert "its stderr" in message and "boom: DEMO_KEY is not set" in message
    operation = Operation.objects.get(server__name="dies")
    assert "stderr" in labels(operation)


def test_a_call_prints_structured_content_and_its_schema_check_and_sends_nothing_else(
    workbench: None, capsys: pytest.CaptureFixture[str]
) -> None:
    call_command("server", "add", "demo-cli", "--", sys.executable, "-m", "servers.demo_server")
    call_command("server", "tools", "demo-cli")
    # A later command is a new process: a new session that has listed nothing.
    gateway.close_all()
    capsys.readouterr()
    call_command("server", "call", "demo-cli", "get_weather_forecast", "--args", '{"city": "Oslo"}')
    printed = capsys.readouterr().out

    assert "structuredContent:" in printed and '"city": "Oslo"' in printed
    assert "output schema: valid" in printed
    operation = Operation.objects.get(server__name="demo-cli", kind="tools/call")
    sent = [label for label in labels(operation) if not label.startswith(("notifications/", "stderr"))]
    assert sent == ["initialize", "tools/call"], labels(operation)
    assert operation.output_check == {"checked": True, "valid": True, "errors": []}
    assert McpServer.objects.filter(name="demo-cli").exists()


@pytest.mark.parametrize("refusal", ["invalid-params", "not-initialized"])
def test_a_pinned_era_refused_with_any_error_answer_is_named_in_the_users_words(
    workbench: None, refusal: str
) -> None:
    # Servers on older SDKs do not answer server/discover with "method not found" but with the
    # error their framework gives any unknown request: a refusal of the pinned era all the same.
    name = f"old-{refusal}"
    call_command("server", "add", name, "--era", "modern", "--", sys.executable, OLD_SDK, refusal)
    with pytest.raises(CommandError) as raised:
        call_command("server", "tools", name)

    message = str(raised.value)
    assert "did not offer the pinned protocol version 2026-07-28" in message, message
    assert "choose the legacy or auto era" in message
    assert {"invalid-params": "Invalid request parameters", "not-initialized": "Server not initialized"}[
        refusal
    ] in message

    # The same server with the legacy era connects (it was the pin, not the server).
    call_command("server", "add", name, "--era", "legacy", "--", sys.executable, OLD_SDK, refusal)
    call_command("server", "tools", name)
