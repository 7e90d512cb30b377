"""``logging/setLevel`` per server, from the command line and the workbench, against real stdio
servers; the level is kept with the server and sent again on each new session, and the log
messages (``notifications/message``) are shown."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from servers import gateway, selectors
from servers.models import McpServer, Operation
from tests.servers.test_third_party import everything as everything  # noqa: F401 — the fixture
from tests.servers.test_third_party import node_server

LOPSIDED = str(Path(__file__).with_name("lopsided_server.py"))
pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def labels(operation: Operation) -> list[str]:
    return [exchange.label for exchange in selectors.operation_exchanges(operation=operation)]


def test_the_command_line_sets_the_level_keeps_it_and_sends_it_again_on_a_new_session(
    workbench: None, capsys: pytest.CaptureFixture[str]
) -> None:
    call_command("server", "add", "everything-cli", "--", *node_server("server-everything"), "stdio")
    call_command("server", "log-level", "everything-cli", "warning")
    printed = capsys.readouterr().out
    setting = Operation.objects.get(kind="logging/setLevel")
    sent = next(e for e in selectors.operation_exchanges(operation=setting) if e.label == "logging/setLevel")
    # The next command is a new process: its session is told the level right after the handshake.
    gateway.close_all()
    call_command("server", "tools", "everything-cli")
    listing = Operation.objects.get(kind="tools/list")

    assert "log level of everything-cli set to warning" in printed
    assert setting.status == "ok" and json.loads(sent.request_body)["params"] == {"level": "warning"}
    assert McpServer.objects.get(name="everything-cli").log_level == "warning"
    opened = labels(listing)
    assert opened.index("initialize") < opened.index("logging/setLevel") < opened.index("tools/list")


def test_a_server_without_logging_is_not_sent_set_level_and_keeps_no_level(workbench: None) -> None:
    call_command("server", "add", "lopsided", "--", sys.executable, LOPSIDED)
    with pytest.raises(CommandError, match="lopsided does not advertise the logging capability"):
        call_command("server", "log-level", "lopsided", "debug")

    assert McpServer.objects.get(name="lopsided").log_level == ""
    assert "logging/setLevel" not in labels(Operation.objects.get(kind="logging/setLevel"))


def test_the_workbench_sets_the_level_and_shows_the_log_messages_of_a_call(
    client: Client,
    workbench: None,
    bob: User,
    everything: McpServer,  # noqa: F811
) -> None:
    client.force_login(bob)
    client.post(f"/servers/{everything.name}/list/tools")
    client.post(f"/servers/{everything.name}/log-level", {"level": "debug"})
    page = client.get(f"/servers/{everything.name}/").content.decode()
    response = client.post(f"/servers/{everything.name}/tools/toggle-simulated-logging", {"arguments": "{}"})
    shown = client.get(response["Location"]).content.decode()

    everything.refresh_from_db()
    assert everything.log_level == "debug"
    assert '<option value="debug" selected>debug</option>' in page
    operation = Operation.objects.get(kind="tools/call")
    message = next(
        e for e in selectors.operation_exchanges(operation=operation) if e.label == "notifications/message"
    )
    params = json.loads(message.response_body)["params"]
    assert "Log messages" in shown
    assert f'<span class="log-level log-{params["level"]}">{params["level"]}</span>' in shown
    assert params["data"] in shown
