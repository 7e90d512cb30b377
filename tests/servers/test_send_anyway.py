""" "Send anyway": arguments that break a tool's inputSchema, sent on purpose to the bundled demo
server (a real stdio process) so its own validation answers; the record says so."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from conversations.models import Exchange
from servers import selectors, services
from servers.models import McpServer, Operation, SavedCall

pytestmark = pytest.mark.django_db

BROKEN = {"city": 3, "extra": True}


def demo() -> McpServer:
    return services.demo_server_ensure()


def labels(operation: Operation) -> list[str]:
    return [exchange.label for exchange in selectors.operation_exchanges(operation=operation)]


def test_the_refusal_page_offers_a_clearly_labelled_second_button_and_a_json_error_does_not(
    client: Client, workbench: None, bob: User
) -> None:
    client.force_login(bob)
    server = demo()
    client.post(f"/servers/{server.name}/list/tools")

    refused = client.post(
        f"/servers/{server.name}/tools/get_weather_forecast", {"arguments": json.dumps(BROKEN)}
    )
    not_json = client.post(f"/servers/{server.name}/tools/get_weather_forecast", {"arguments": "{city: 3"})

    assert refused.status_code == 400
    assert 'id="send-anyway"' in refused.content.decode()
    assert "Send anyway (breaks the inputSchema)" in refused.content.decode()
    assert not_json.status_code == 400 and "not JSON" in not_json.content.decode()
    assert 'id="send-anyway"' not in not_json.content.decode()


def test_send_anyway_sends_the_arguments_as_typed_and_the_server_answers_with_its_own_validation(
    client: Client, workbench: None, bob: User
) -> None:
    client.force_login(bob)
    server = demo()
    client.post(f"/servers/{server.name}/list/tools")

    response = client.post(
        f"/servers/{server.name}/tools/get_weather_forecast",
        {"arguments": json.dumps(BROKEN), "send_anyway": "1"},
    )

    assert response.status_code == 302
    operation = Operation.objects.get(kind="tools/call")
    # The server's own validation answered (a tool error), not the workbench's refusal.
    assert operation.status == "ok" and operation.is_error, operation.error
    assert any("city: 3 is not of type" in error for error in operation.invalid_arguments)
    sent = next(e for e in selectors.operation_exchanges(operation=operation) if e.label == "tools/call")
    assert json.loads(sent.request_body)["params"]["arguments"] == BROKEN
    # The mark is a record of its own, just before the call, in the operation and the transcript.
    names = labels(operation)
    note = names.index("workbench: arguments sent anyway (they break the tool's inputSchema)")
    assert names[note + 1] == "tools/call"
    marked = next(e for e in selectors.operation_exchanges(operation=operation) if e.direction == "local")
    assert json.loads(marked.request_body)["deliberately_invalid"] is True
    page = client.get(response["Location"]).content.decode()
    assert 'id="deliberately-invalid"' in page and "city: 3 is not of type" in page
    transcript = client.get(f"/servers/{server.name}/transcript").content.decode()
    assert "arguments sent anyway" in transcript


def test_valid_arguments_with_send_anyway_are_an_ordinary_call(
    client: Client, workbench: None, bob: User
) -> None:
    client.force_login(bob)
    server = demo()
    client.post(f"/servers/{server.name}/list/tools")

    client.post(
        f"/servers/{server.name}/tools/calculate",
        {"arguments": json.dumps({"expression": "6*7"}), "send_anyway": "1"},
    )

    operation = Operation.objects.get(kind="tools/call")
    assert operation.status == "ok" and not operation.is_error
    assert operation.invalid_arguments == []
    assert not Exchange.objects.filter(direction="local").exists()


@pytest.mark.parametrize("arguments", ["{city: 3", "[1, 2]", '"text"', "\ufffd{}", ""])
def test_send_anyway_still_refuses_text_that_is_not_a_json_object(
    client: Client, workbench: None, bob: User, arguments: str
) -> None:
    client.force_login(bob)
    server = demo()
    client.post(f"/servers/{server.name}/list/tools")

    response = client.post(
        f"/servers/{server.name}/tools/get_weather_forecast",
        {"arguments": arguments, "send_anyway": "1"},
    )

    assert response.status_code == 400
    assert not Operation.objects.filter(kind="tools/call").exists()


def test_a_second_user_cannot_see_the_deliberately_invalid_call(
    client: Client, workbench: None, bob: User
) -> None:
    client.force_login(bob)
    server = demo()
    client.post(f"/servers/{server.name}/list/tools")
    client.post(
        f"/servers/{server.name}/tools/get_weather_forecast",
        {"arguments": json.dumps(BROKEN), "send_anyway": "1"},
    )
    operation = Operation.objects.get(kind="tools/call")
    User.objects.create_user("carol", password="pw")
    client.force_login(User.objects.get(username="carol"))

    assert client.get(f"/servers/op/{operation.public_id}/").status_code == 404
    assert client.get(f"/servers/op/{operation.public_id}/state").status_code == 404
    transcript = client.get(f"/servers/{server.name}/transcript").content.decode()
    assert "arguments sent anyway" not in transcript


def test_the_command_line_sends_anyway_when_told_and_records_it(workbench: None) -> None:
    server = demo()
    services.operation_start(server=server, user=None, kind="tools/list")

    with pytest.raises(Exception, match="--send-anyway"):
        call_command("server", "call", server.name, "calculate", "--args", '{"expression": 7}')
    # Sent: the server's own validation says no (a tool error, so the command fails too).
    with pytest.raises(CommandError, match="isError"):
        call_command(
            "server", "call", server.name, "calculate", "--args", '{"expression": 7}', "--send-anyway"
        )

    operation = Operation.objects.get(kind="tools/call")
    assert operation.source == "cli" and operation.is_error
    assert operation.invalid_arguments and "expression: 7 is not of type" in operation.invalid_arguments[0]
    names = labels(operation)
    assert names[names.index("tools/call") - 1] == (
        "workbench: arguments sent anyway (they break the tool's inputSchema)"
    )


def test_a_saved_deliberately_invalid_call_runs_again_marked_as_such(
    client: Client, workbench: None, bob: User
) -> None:
    client.force_login(bob)
    server = demo()
    client.post(f"/servers/{server.name}/list/tools")
    client.post(
        f"/servers/{server.name}/tools/get_weather_forecast",
        {"arguments": json.dumps(BROKEN), "send_anyway": "1"},
    )
    first = Operation.objects.get(kind="tools/call")
    client.post(f"/servers/op/{first.public_id}/save", {"name": "broken on purpose"})
    saved = SavedCall.objects.get(name="broken on purpose")

    client.post(f"/servers/saved/{saved.public_id}/run")

    again = Operation.objects.filter(kind="tools/call").exclude(pk=first.pk).get()
    assert again.saved_call == saved and again.is_error
    assert again.invalid_arguments == first.invalid_arguments
