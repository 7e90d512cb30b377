"""Requests are gated on the capabilities a real server advertised: a method it never offered is
not sent, and the command line and the workbench say why the action is unavailable."""

from __future__ import annotations

import sys
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
