"""Every change to a registered server is in the audit log, whichever way it was made (the web
form, the admin, ``manage.py server``, the demo's setup), with the command, arguments and the
names of env and header entries before and after — never their values."""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from conversations.loop.wire import MASK
from conversations.models import AuditEvent
from servers import services
from servers.models import McpServer

pytestmark = pytest.mark.django_db
SECRET = "tok-audit-5f4e3d2c1b0a"
PLAIN = "plain-value-77aa"


@pytest.fixture
def dave(db: None) -> User:
    return User.objects.create_user("dave", password="pw", is_staff=True, is_superuser=True)


def client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def form(**fields: str) -> dict[str, str]:
    return {
        "name": "files",
        "transport": "stdio",
        "command": sys.executable,
        "args": "-m\nservers.demo_server",
        "env": f"LOG_LEVEL={PLAIN}",
        "secret_env": f"SERVICE_TOKEN={SECRET}",
        "era": "legacy",
        "call_timeout": "30",
        "elicitation": "on",
        "enabled": "on",
        **fields,
    }


def events(action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action).order_by("at", "pk"))


def assert_no_values(event: AuditEvent) -> None:
    text = json.dumps(event.detail)
    assert SECRET not in text and PLAIN not in text


def test_registering_a_server_is_audited_with_names_and_no_values(dave: User) -> None:
    assert client_for(dave).post("/servers/new", form()).status_code == 302

    (created,) = events("server.created")
    assert created.actor == dave and created.via == "web form" and created.subject == "files"
    assert created.detail["before"] is None
    after = created.detail["after"]
    assert after["command"] == sys.executable and after["args"] == ["-m", "servers.demo_server"]
    assert after["env"] == {"LOG_LEVEL": MASK, "SERVICE_TOKEN": MASK}
    assert created.detail["values_changed"]["env"] == ["LOG_LEVEL", "SERVICE_TOKEN"]
    assert_no_values(created)


def test_changing_the_command_is_audited_with_before_and_after(dave: User) -> None:
    client = client_for(dave)
    client.post("/servers/new", form())

    client.post(
        "/servers/files/edit",
        form(command="/usr/bin/env", args="sh\n-c\nrm -rf /", secret_env=f"SERVICE_TOKEN={MASK}"),
    )

    (changed,) = events("server.changed")
    assert changed.detail["before"]["command"] == sys.executable
    assert changed.detail["after"]["command"] == "/usr/bin/env"
    assert changed.detail["after"]["args"] == ["sh", "-c", "rm -rf /"]
    # The secret was left masked: kept, so not reported as changed.
    assert changed.detail["values_changed"] == {"env": [], "headers": []}
    assert_no_values(changed)


def test_a_changed_secret_is_named_but_not_shown(dave: User) -> None:
    client = client_for(dave)
    client.post("/servers/new", form())

    client.post("/servers/files/edit", form(secret_env="SERVICE_TOKEN=another-secret-value"))

    (changed,) = events("server.changed")
    assert changed.detail["values_changed"]["env"] == ["SERVICE_TOKEN"]
    assert "another-secret-value" not in json.dumps(changed.detail)


def test_saving_an_unchanged_server_writes_nothing(dave: User) -> None:
    client = client_for(dave)
    client.post("/servers/new", form())

    client.post("/servers/files/edit", form(secret_env=f"SERVICE_TOKEN={MASK}"))

    assert AuditEvent.objects.count() == 1


def test_disabling_and_enabling_are_audited_as_such(dave: User) -> None:
    client = client_for(dave)
    client.post("/servers/new", form())

    client.post("/servers/files/toggle")
    client.post("/servers/files/toggle")

    assert [e.action for e in AuditEvent.objects.order_by("pk")] == [
        "server.created",
        "server.disabled",
        "server.enabled",
    ]
    assert events("server.disabled")[0].detail["after"]["enabled"] is False


def _admin_form(server: McpServer, **fields: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": server.name,
        "description": server.description,
        "transport": server.transport,
        "command": server.command,
        "args": json.dumps(server.args),
        "env": json.dumps(server.env),
        "cwd": server.cwd,
        "url": server.url,
        "headers": json.dumps(server.headers),
        "era": server.era,
        "call_timeout": server.call_timeout,
        "roots": json.dumps(server.roots),
        "sampling_profile": "",
        "owner": "",
    }
    for flag in ("elicitation", "enabled", "allow_non_staff_spawn", "is_demo"):
        if getattr(server, flag):
            data[flag] = "on"
    data.update(fields)
    return {key: value for key, value in data.items() if value is not False}


def test_the_admin_changes_and_deletes_through_the_audited_service(dave: User) -> None:
    client = client_for(dave)
    client.post("/servers/new", form())
    server = McpServer.objects.get(name="files")

    response = client.post(
        f"/admin/servers/mcpserver/{server.pk}/change/",
        _admin_form(server, command="/bin/sh", allow_non_staff_spawn="on"),
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    deleted = client.post(f"/admin/servers/mcpserver/{server.pk}/delete/", {"post": "yes"})

    assert deleted.status_code == 302 and not McpServer.objects.filter(pk=server.pk).exists()
    (changed,) = events("server.changed")
    assert changed.via == "admin" and changed.actor == dave
    assert (
        changed.detail["before"]["command"] == sys.executable
        and changed.detail["after"]["command"] == "/bin/sh"
    )
    assert changed.detail["before"]["allow_non_staff_spawn"] is False
    assert changed.detail["after"]["allow_non_staff_spawn"] is True
    (gone,) = events("server.deleted")
    assert (
        gone.via == "admin" and gone.detail["before"]["command"] == "/bin/sh" and gone.detail["after"] is None
    )
    for event in AuditEvent.objects.all():
        assert SECRET not in json.dumps(event.detail)


def test_the_admin_bulk_delete_action_is_audited_per_server(dave: User) -> None:
    client = client_for(dave)
    client.post("/servers/new", form())
    client.post("/servers/new", form(name="notes"))
    ids = list(McpServer.objects.values_list("pk", flat=True))

    client.post(
        "/admin/servers/mcpserver/", {"action": "delete_selected", "_selected_action": ids, "post": "yes"}
    )

    assert not McpServer.objects.exists()
    assert sorted(e.subject for e in events("server.deleted")) == ["files", "notes"]


def test_the_command_line_registration_is_audited_as_the_system(dave: User) -> None:
    call_command(
        "server",
        "add",
        "cli-files",
        "--secret-env",
        f"SERVICE_TOKEN={SECRET}",
        "--",
        sys.executable,
        "-m",
        "servers.demo_server",
    )
    call_command("server", "add", "cli-files", "--", "/bin/true")

    created, changed = events("server.created")[0], events("server.changed")[0]
    assert created.via == "cli" and created.actor is None and created.actor_name.startswith("system")
    assert (
        changed.detail["before"]["command"] == sys.executable
        and changed.detail["after"]["command"] == "/bin/true"
    )
    assert changed.detail["values_changed"]["env"] == ["SERVICE_TOKEN"]
    assert_no_values(created)


def test_the_demo_setup_is_audited_once_not_on_every_use() -> None:
    services.demo_server_ensure()
    services.demo_server_ensure()

    (created,) = events("server.created")
    assert created.via == "setup" and created.detail["after"]["allow_non_staff_spawn"] is True
    assert AuditEvent.objects.count() == 1


def test_an_argument_carrying_a_configured_secret_is_redacted_in_the_log(dave: User) -> None:
    client_for(dave).post("/servers/new", form(args=f"--token\n{SECRET}"))

    (created,) = events("server.created")
    assert SECRET not in json.dumps(created.detail)
    assert created.detail["after"]["args"][0] == "--token"


def test_the_server_page_tells_staff_who_changed_it_last(dave: User) -> None:
    client = client_for(dave)
    client.post("/servers/new", form())
    client.post("/servers/files/toggle")

    page = client.get("/servers/files/").content.decode()
    someone = User.objects.create_user("carol")
    McpServer.objects.filter(name="files").update(enabled=True)
    theirs = client_for(someone).get("/servers/files/").content.decode()

    assert "<code>server.disabled</code> by dave via web" in page
    assert 'id="spawn-policy">staff only' in page
    assert 'id="last-change"' not in theirs


def test_staff_allow_everyone_to_start_a_server_from_the_form_and_it_is_audited(dave: User) -> None:
    client = client_for(dave)
    client.post("/servers/new", form())

    client.post("/servers/files/edit", form(secret_env=f"SERVICE_TOKEN={MASK}", allow_non_staff_spawn="on"))

    assert McpServer.objects.get(name="files").allow_non_staff_spawn
    (changed,) = events("server.changed")
    assert (
        changed.detail["before"]["allow_non_staff_spawn"],
        changed.detail["after"]["allow_non_staff_spawn"],
    ) == (False, True)
    edit_page = client.get("/servers/files/edit").content.decode()
    assert re.search(r'<input[^>]*name="allow_non_staff_spawn"[^>]*checked', edit_page)


def test_the_admin_lists_server_changes_by_server(dave: User) -> None:
    client = client_for(dave)
    client.post("/servers/new", form())

    listing = client.get("/admin/conversations/auditevent/", {"q": "files"}).content.decode()

    assert "server.created" in listing and "web form" in listing
