"""Requests are gated on the capabilities a real server advertised: a method it never offered is
not sent, and the command line and the workbench say why the action is unavailable."""

from __future__ import annotations

import json
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from servers import selectors
from servers.models import McpServer, Operation
from tests.servers.test_third_party import register

LOPSIDED = str(Path(__file__).with_name("lopsided_server.py"))
pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def sent(operation: Operation) -> list[str]:
    return [exchange.label for exchange in selectors.operation_exchanges(operation=operation)]


def test_the_command_line_does_not_send_prompts_list_to_a_server_without_prompts(
    workbench: None, capsys: pytest.CaptureFixture[str]
) -> None:
    call_command("server", "add", "lopsided", "--", sys.executable, LOPSIDED)
    with pytest.raises(CommandError) as raised:
        call_command("server", "prompts", "lopsided")

    message = str(raised.value)
    assert "lopsided does not advertise the prompts capability" in message
    assert "prompts/list was not sent" in message
    operation = Operation.objects.get(server__name="lopsided", kind="prompts/list")
    assert "initialize" in sent(operation) and "prompts/list" not in sent(operation)


@pytest.fixture
def lopsided() -> McpServer:
    return register("lopsided", [sys.executable, LOPSIDED])


def test_the_workbench_says_why_prompts_and_completion_are_unavailable_and_sends_neither(
    client: Client, workbench: None, bob: User, lopsided: McpServer
) -> None:
    client.force_login(bob)
    client.post("/servers/lopsided/connect")
    page = client.get("/servers/lopsided/").content.decode()
    client.post("/servers/lopsided/list/prompts")
    answer = client.post(
        "/servers/lopsided/complete",
        {
            "ref_type": "ref/resource",
            "ref": "memo://{name}",
            "argument": "name",
            "value": "in",
            "context": "{}",
        },
    ).json()

    assert 'title="lopsided does not advertise the prompts capability"' in page
    assert '<button class="button" type="submit" disabled' in page
    listing = Operation.objects.get(server=lopsided, kind="prompts/list")
    assert listing.status == "error" and "prompts/list was not sent" in listing.error
    assert "prompts/list" not in sent(listing)
    assert "completions capability" in answer["error"] and answer["values"] == []
    complete = Operation.objects.get(server=lopsided, kind="completion/complete")
    assert "completion/complete" not in sent(complete)
    # What it does advertise still goes out.
    client.post("/servers/lopsided/list/resources")
    resources = Operation.objects.get(server=lopsided, kind="resources/list")
    assert resources.status == "ok" and resources.result[0]["uri"] == "memo://insights"


def test_the_command_line_sends_no_tool_request_to_a_server_without_tools(
    workbench: None, capsys: pytest.CaptureFixture[str]
) -> None:
    call_command("server", "add", "lopsided", "--", sys.executable, LOPSIDED)
    with pytest.raises(
        CommandError, match="lopsided does not advertise the tools capability: tools/list was not sent"
    ):
        call_command("server", "tools", "lopsided")
    with pytest.raises(CommandError, match="anything ended with status error"):
        call_command("server", "call", "lopsided", "anything")

    assert (
        "lopsided does not advertise the tools capability: tools/call was not sent" in capsys.readouterr().err
    )

    for kind in ("tools/list", "tools/call"):
        operation = Operation.objects.get(server__name="lopsided", kind=kind)
        assert "initialize" in sent(operation) and kind not in sent(operation)


def test_the_workbench_says_why_tools_are_unavailable_and_lists_none(
    client: Client, workbench: None, bob: User, lopsided: McpServer
) -> None:
    client.force_login(bob)
    client.post("/servers/lopsided/connect")
    page = client.get("/servers/lopsided/").content.decode()
    client.post("/servers/lopsided/list/tools")

    assert 'id="list-tools" disabled title="lopsided does not advertise the tools capability"' in page
    assert "lopsided does not advertise the tools capability: its tools requests are not sent." in page
    listing = Operation.objects.get(server=lopsided, kind="tools/list")
    assert listing.status == "error" and "tools/list was not sent" in listing.error
    assert "tools/list" not in sent(listing)


def test_a_turn_connects_a_server_without_tools_and_says_why_it_offers_none(
    workbench: None, lopsided: McpServer
) -> None:
    User.objects.create_user("admin", is_superuser=True, is_staff=True)
    out = StringIO()
    call_command("ask", "What is 2 + 2?", "--server", "lopsided", "--json", stdout=out)
    transcript = json.loads(out.getvalue())

    [turn] = transcript["turns"]
    connect = next(step for step in turn["steps"] if step["kind"] == "connect")
    assert any(
        "lopsided does not advertise the tools capability: tools/list was not sent" in problem
        for problem in connect["diagnostics"]
    )
    labels = [exchange["label"] for step in turn["steps"] for exchange in step["exchanges"]]
    assert "initialize" in labels and "tools/list" not in labels
    assert turn["status"] == "done"
