"""Setting a server's log level from the browser or the command line is recorded as an operation
and, because the level is kept for every later session, audited as a change of the server: who,
how, the level before and after. Real run: server-everything over stdio (it offers logging)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from conversations.models import AuditEvent
from servers.models import McpServer, Operation
from tests.servers.test_third_party import node_server, register

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.slow
def test_the_level_set_in_the_browser_and_then_the_shell_is_audited_each_time(
    client: Client, workbench: None, bob: User
) -> None:
    everything = register("everything", [*node_server("server-everything"), "stdio"])
    client.force_login(bob)
    response = client.post("/servers/everything/log-level", {"level": "warning"})
    operation = Operation.objects.get(kind=Operation.Kind.LOG_LEVEL)
    assert response.status_code == 302 and str(operation.public_id) in response["Location"]
    assert operation.status == "ok" and operation.user == bob
    assert "logging/setLevel" in [e.label for e in operation.exchanges.all()]

    call_command("server", "log-level", "everything", "debug")

    changes = list(AuditEvent.objects.filter(action="server.changed", subject="everything").order_by("pk"))
    assert [(e.actor_name, e.via) for e in changes][0] == ("bob", "web logging/setLevel")
    assert changes[1].via == "cli logging/setLevel" and changes[1].actor_name.startswith("system")
    assert [(e.detail["before"]["log_level"], e.detail["after"]["log_level"]) for e in changes] == [
        ("", "warning"),
        ("warning", "debug"),
    ]
    assert McpServer.objects.get(pk=everything.pk).log_level == "debug"


def test_an_unknown_level_is_refused_and_nothing_is_sent_or_audited(client: Client, bob: User) -> None:
    register("lopsided", ["python3", "-c", "pass"])
    client.force_login(bob)
    response = client.post("/servers/lopsided/log-level", {"level": "verbose<script>"})
    assert response.status_code == 400
    assert not Operation.objects.exists()
    assert not AuditEvent.objects.filter(action="server.changed").exists()
