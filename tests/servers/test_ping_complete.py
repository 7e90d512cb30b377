"""``ping`` and ``completion/complete`` from the terminal (``server ping``, ``server complete``)
and ping from the workbench page: each a recorded operation with its exchanges, as the official
MCP Inspector's command line offers them."""

from __future__ import annotations

import json
import sys
import warnings

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from servers import selectors
from servers.models import McpServer, Operation
from tests.servers.test_third_party import everything as everything  # noqa: F401 — the fixture

pytestmark = [pytest.mark.django_db(transaction=True)]


def _demo() -> McpServer:
    call_command("server", "add", "demo-cli", "--", sys.executable, "-m", "servers.demo_server")
    return McpServer.objects.get(name="demo-cli")


def _sent(operation: Operation) -> list[dict[str, object]]:
    return [
        json.loads(exchange.request_body)
        for exchange in selectors.operation_exchanges(operation=operation)
        if exchange.request_body
    ]


def test_server_ping_prints_the_round_trip_and_records_the_ping_and_its_empty_answer(
    workbench: None, capsys: pytest.CaptureFixture[str]
) -> None:
    _demo()
    capsys.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the SDK's deprecation of ping in the newest era: not here
        call_command("server", "ping", "demo-cli")

    out = capsys.readouterr().out
    assert out.startswith("pong from demo-cli in ") and out.rstrip().endswith(" ms")
    ping = Operation.objects.get(kind=Operation.Kind.PING)
    assert ping.status == Operation.Status.OK and ping.source == Operation.Source.CLI
    assert isinstance(ping.result["round_trip_ms"], float) and ping.result["round_trip_ms"] > 0
    (exchange,) = [e for e in selectors.operation_exchanges(operation=ping) if e.label.startswith("ping")]
    assert json.loads(exchange.request_body)["method"] == "ping"
    assert json.loads(exchange.response_body)["result"] == {}

    call_command("server", "ping", "demo-cli", "--json")
    document = json.loads(capsys.readouterr().out)
    assert document["kind"] == "ping" and document["status"] == "ok" and "round_trip_ms" in document["result"]


def test_server_ping_on_a_server_that_cannot_start_fails_with_its_reason(workbench: None) -> None:
    script = "import sys; sys.stderr.write('boom: no config\\n'); sys.exit(3)"
    call_command("server", "add", "dies", "--", sys.executable, "-c", script)

    with pytest.raises(CommandError, match="ping ended with status error") as failed:
        call_command("server", "ping", "dies")
    assert "boom: no config" in str(failed.value)


def test_ping_from_the_workbench_page_shows_the_round_trip_and_a_user_who_may_not_start_it_is_refused(
    workbench: None, alice: User, bob: User
) -> None:
    server = _demo()
    owner = Client()
    owner.force_login(alice)
    assert 'id="ping"' in owner.get(f"/servers/{server.name}/").content.decode()

    response = owner.post(f"/servers/{server.name}/ping")
    assert response.status_code == 302
    page = owner.get(response["Location"]).content.decode()
    assert "answered <code>ping</code> in" in page
    assert Operation.objects.get(kind=Operation.Kind.PING).user == alice

    other = Client()
    other.force_login(bob)  # no staff: may not start a stdio server's process
    assert other.post(f"/servers/{server.name}/ping").status_code == 403
    assert Operation.objects.filter(kind=Operation.Kind.PING).count() == 1
    assert other.get(f"/servers/{server.name}/ping").status_code == 405


def test_ping_is_not_sent_on_a_session_of_the_era_that_removed_it(workbench: None) -> None:
    call_command(
        "server", "add", "demo-new", "--era", "modern", "--", sys.executable, "-m", "servers.demo_server"
    )
    with pytest.raises(CommandError, match="removed ping"):
        call_command("server", "ping", "demo-new")
    ping = Operation.objects.get(kind=Operation.Kind.PING)
    assert ping.status == Operation.Status.ERROR
    assert not [body for body in _sent(ping) if body.get("method") == "ping"]


@pytest.mark.slow
def test_server_complete_suggests_prompt_arguments_with_context_and_template_variables(
    workbench: None, everything: McpServer, capsys: pytest.CaptureFixture[str]
) -> None:
    name = everything.name
    call_command("server", "complete", name, "--prompt", "completable-prompt", "department", "Eng")
    assert capsys.readouterr().out.split() == ["Engineering"]

    call_command(
        "server",
        "complete",
        name,
        "--prompt",
        "completable-prompt",
        "name",
        "",
        "--context",
        "department=Sales",
    )
    assert capsys.readouterr().out.split() == ["David", "Eve", "Frank"]
    sent = _sent(Operation.objects.filter(kind=Operation.Kind.COMPLETE).order_by("-started_at")[0])
    (request,) = [body for body in sent if body.get("method") == "completion/complete"]
    assert request["params"]["context"] == {"arguments": {"department": "Sales"}}  # type: ignore[index]

    template = "demo://resource/dynamic/text/{resourceId}"
    call_command("server", "complete", name, "--template", template, "resourceId", "1", "--json")
    document = json.loads(capsys.readouterr().out)
    assert document["target"] == template and document["result"]["completion"]["values"] == ["1"]

    with pytest.raises(CommandError, match="NAME=VALUE"):
        call_command("server", "complete", name, "--prompt", "p", "a", "v", "--context", "oops")
    with pytest.raises(CommandError):  # a prompt or a template, not neither
        call_command("server", "complete", name, "a", "v")
