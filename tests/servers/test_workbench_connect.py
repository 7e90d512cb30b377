"""The workbench's Connect lands on a page that says why a stdio server did not start."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from servers import services
from servers.models import McpServer

pytestmark = pytest.mark.django_db

STARTUP_WORDS = "cannot start: no configuration file at /etc/example.toml"


def stdio(name: str, command: str, args: list[str]) -> McpServer:
    fields: dict[str, Any] = {"name": name, "transport": "stdio", "command": command, "args": args}
    return services.server_save(
        server=None, owner=None, fields=fields, env={}, secret_env={}, headers={}, secret_headers={}
    )


def connect(client: Client, server: McpServer) -> str:
    response = client.post(f"/servers/{server.name}/connect")
    assert response.status_code == 302
    return client.get(response["Location"]).content.decode()


def test_a_command_that_does_not_exist_is_named_on_the_page_connect_lands_on(
    client: Client, workbench: None, alice: User
) -> None:
    client.force_login(alice)

    page = connect(client, stdio("missing", "/nonexistent/bin/mcp-server-nothing", []))

    assert "The last connect failed" in page
    assert "/nonexistent/bin/mcp-server-nothing" in page


def test_a_server_that_exits_at_start_shows_its_reason_and_its_stderr(
    client: Client, workbench: None, alice: User
) -> None:
    client.force_login(alice)
    script = f"import sys; sys.stderr.write({STARTUP_WORDS!r} + '\\n'); sys.exit(3)"

    page = connect(client, stdio("quitter", sys.executable, ["-c", script]))

    assert "The last connect failed" in page
    assert "What the server wrote on stderr" in page and STARTUP_WORDS in page


def test_a_connect_that_succeeds_after_a_failure_shows_no_failure(
    client: Client, workbench: None, alice: User
) -> None:
    client.force_login(alice)
    server = stdio("fixed", "/nonexistent/bin/mcp-server-nothing", [])
    connect(client, server)
    server.command, server.args = sys.executable, ["-m", "servers.demo_server"]
    server.save()

    page = connect(client, server)

    assert "The last connect failed" not in page
