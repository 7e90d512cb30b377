"""Registering an MCP server (stdio runs a command on the worker) is for staff only."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from servers.models import McpServer

ADD_URL = "/admin/servers/mcpserver/add/"
FORM = {
    "name": "evil",
    "transport": "stdio",
    "command": "/bin/sh",
    "args": '["-c", "id"]',
    "env": "{}",
    "headers": "{}",
    "era": "legacy",
    "call_timeout": "30",
    "enabled": "on",
}

pytestmark = pytest.mark.django_db


def test_a_non_staff_user_cannot_reach_the_server_registry(client: Client) -> None:
    bob = User.objects.create_user("bob", password="pw")
    client.force_login(bob)

    response = client.post(ADD_URL, FORM)

    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    assert not McpServer.objects.filter(name="evil").exists()


def test_staff_without_the_add_permission_is_refused(client: Client) -> None:
    carol = User.objects.create_user("carol", password="pw", is_staff=True)
    client.force_login(carol)

    response = client.post(ADD_URL, FORM)

    assert response.status_code == 403
    assert not McpServer.objects.filter(name="evil").exists()


def test_staff_with_the_permission_registers_a_stdio_server(client: Client) -> None:
    dave = User.objects.create_user("dave", password="pw", is_staff=True)
    dave.user_permissions.add(Permission.objects.get(codename="add_mcpserver"))
    client.force_login(dave)

    response = client.post(ADD_URL, FORM)

    assert response.status_code == 302
    server = McpServer.objects.get(name="evil")
    assert server.command == "/bin/sh" and server.args == ["-c", "id"]
