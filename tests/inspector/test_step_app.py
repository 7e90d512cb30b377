"""The MCP App of a tool call an agent turn made: opened from the conversation page's tool step,
hosted by the workbench with the call's recorded arguments and result (docs/mcp-apps.md)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from conversations.models import Conversation, Step
from conversations.record.verification import conversation_verify
from servers import gateway, services
from servers.models import Operation
from tests.servers.test_mcp_apps import app_server

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


def _asked(admin: User) -> tuple[Conversation, Step]:
    """A turn over the app server that called ``counter`` (the demo model picks it by name)."""
    app_server()
    out = StringIO()
    call_command("ask", "Show the counter", "--server", "apps", "--json", stdout=out)
    printed: dict[str, Any] = json.loads(out.getvalue())
    conversation = Conversation.objects.get(public_id=printed["conversation"]["id"])
    step = Step.objects.get(turn__conversation=conversation, kind=Step.Kind.TOOL)
    assert step.tool_name == "counter", printed
    return conversation, step


def test_a_tool_step_whose_tool_has_a_ui_opens_its_app_with_the_calls_arguments_and_result(
    client: Client, settings: Any
) -> None:
    settings.WORKBENCH_RUNNER = "inline"
    admin = User.objects.create_superuser("admin")
    conversation, step = _asked(admin)
    client.force_login(admin)

    page = client.get(f"/c/{conversation.public_id}/").content.decode()
    opened = client.post(f"/c/{conversation.public_id}/steps/{step.pk}/app")
    again = client.post(f"/c/{conversation.public_id}/steps/{step.pk}/app")
    app_page = client.get(opened["Location"]).content.decode()

    assert "Open its app" in page
    operation = Operation.objects.get(kind=Operation.Kind.APP)
    assert opened["Location"] == again["Location"] == f"/servers/op/{operation.public_id}/"
    assert operation.step == step and operation.result == step.result and operation.user == admin
    assert 'id="mcp-app"' in app_page and "ui://counter/app.html" in app_page
    answered = client.post(
        f"/servers/op/{operation.public_id}/app/call",
        json.dumps({"name": "increment", "arguments": {"by": 2}}),
        content_type="application/json",
    ).json()
    assert answered["result"]["content"][0]["text"] == "counter at 3"
    traffic = {"messages": [{"side": "app", "message": '{"jsonrpc": "2.0", "method": "ui/initialize"}'}]}
    kept = client.post(
        f"/servers/op/{operation.public_id}/app/traffic", json.dumps(traffic), content_type="application/json"
    ).json()
    assert kept["kept"] == 1
    # What the app did lives with the workbench operations: the turn's sealed record is untouched.
    assert conversation_verify(conversation=conversation).intact
    assert not step.turn.exchanges.filter(label__startswith="app → host").exists()


def test_someone_who_cannot_see_the_conversation_cannot_open_its_apps(client: Client, settings: Any) -> None:
    settings.WORKBENCH_RUNNER = "inline"
    admin = User.objects.create_superuser("admin")
    conversation, step = _asked(admin)
    client.force_login(User.objects.create_user("bob", password="pw"))

    assert client.post(f"/c/{conversation.public_id}/steps/{step.pk}/app").status_code == 404
    assert not Operation.objects.filter(kind=Operation.Kind.APP).exists()


def test_a_tool_step_without_a_ui_has_no_app(client: Client, settings: Any) -> None:
    admin = User.objects.create_superuser("admin")
    services.demo_server_ensure()
    out = StringIO()
    call_command("ask", "What is the weather in Paris tomorrow?", "--json", stdout=out)
    conversation = Conversation.objects.get(public_id=json.loads(out.getvalue())["conversation"]["id"])
    step = Step.objects.filter(turn__conversation=conversation, kind=Step.Kind.TOOL).first()
    assert step is not None
    client.force_login(admin)

    assert "Open its app" not in client.get(f"/c/{conversation.public_id}/").content.decode()
    assert client.post(f"/c/{conversation.public_id}/steps/{step.pk}/app").status_code == 404


def test_a_tool_for_apps_only_is_not_offered_to_the_model(settings: Any) -> None:
    # `increment` declares `_meta.ui.visibility: ["app"]`: its app may call it through the host,
    # the model is not shown it (and so cannot call it).
    settings.WORKBENCH_RUNNER = "inline"
    admin = User.objects.create_superuser("admin")
    conversation, step = _asked(admin)

    turn = step.turn
    offered = {tool["name"] for tool in turn.tools}
    assert offered == {"counter", "hostile"}, offered
    connect = turn.steps.get(kind=Step.Kind.CONNECT)
    assert "increment" in connect.text and "apps only" in connect.text, connect.text
