"""The server registry in the browser: who may add and change servers, and how secrets are kept."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from conversations.loop.wire import MASK
from servers import services
from servers.models import McpServer
from servers.vault import is_sealed, seal, unseal
from tests.factories import McpServerFactory

pytestmark = pytest.mark.django_db

SECRET = "sk-live-0123456789abcdefSECRET"
STDIO_FORM = {
    "name": "notes",
    "transport": "stdio",
    "command": "python",
    "args": "-m\nservers.demo_server",
    "env": "LOG_LEVEL=debug\nSERVICE_TOKEN=" + SECRET,
    "secret_env": "API_KEY=${NOTES_API_KEY}",
    "era": "legacy",
    "call_timeout": "30",
    "elicitation": "on",
    "enabled": "on",
}


def test_a_secret_is_sealed_and_opens_again() -> None:
    sealed = seal(SECRET)

    assert is_sealed(sealed) and SECRET not in sealed
    assert unseal(sealed) == SECRET
    assert seal(sealed) == sealed


def test_bob_who_is_not_staff_cannot_register_a_server(client: Client, workbench: None, bob: User) -> None:
    client.force_login(bob)

    assert client.get("/servers/new").status_code == 403
    assert client.post("/servers/new", STDIO_FORM).status_code == 403
    assert not McpServer.objects.filter(name="notes").exists()


def test_bob_cannot_edit_disable_or_respawn_a_stdio_server(
    client: Client, workbench: None, bob: User
) -> None:
    server = McpServerFactory(name="files")
    client.force_login(bob)

    assert client.post(f"/servers/{server.name}/edit", STDIO_FORM).status_code == 403
    assert client.post(f"/servers/{server.name}/toggle").status_code == 403
    assert client.post(f"/servers/{server.name}/connect").status_code == 403
    assert client.get(f"/servers/{server.name}/").status_code == 200


def test_a_disabled_server_is_hidden_from_everyone_but_staff(
    client: Client, workbench: None, alice: User, bob: User
) -> None:
    server = services.demo_server_ensure()
    services.server_set_enabled(server=server, enabled=False, actor=None, via="test")

    client.force_login(bob)
    assert client.get(f"/servers/{server.name}/").status_code == 404
    assert b"/servers/demo/" not in client.get("/servers/").content
    client.force_login(alice)
    assert client.get(f"/servers/{server.name}/").status_code == 200


def test_alice_registers_a_stdio_server_whose_secrets_are_stored_sealed_and_shown_masked(
    client: Client, workbench: None, alice: User
) -> None:
    client.force_login(alice)

    response = client.post("/servers/new", STDIO_FORM)

    assert response.status_code == 302 and response["Location"] == "/servers/notes/"
    server = McpServer.objects.get(name="notes")
    assert server.args == ["-m", "servers.demo_server"] and server.owner == alice
    assert server.env["LOG_LEVEL"] == "debug"
    assert is_sealed(server.env["SERVICE_TOKEN"]) and unseal(server.env["SERVICE_TOKEN"]) == SECRET
    assert server.env["API_KEY"] == "${NOTES_API_KEY}"
    for page in (f"/servers/{server.name}/", f"/servers/{server.name}/edit"):
        html = client.get(page).content.decode()
        assert SECRET not in html and server.env["SERVICE_TOKEN"] not in html
        assert MASK in html


def test_saving_the_edit_form_unchanged_keeps_the_sealed_secret(
    client: Client, workbench: None, alice: User
) -> None:
    client.force_login(alice)
    client.post("/servers/new", STDIO_FORM)
    server = McpServer.objects.get(name="notes")
    sealed = server.env["SERVICE_TOKEN"]
    form = client.get("/servers/notes/edit").context["form"]
    data = {name: value for name, value in form.initial.items() if value not in (None, False)}
    data["sampling_profile"] = ""
    data.update({"elicitation": "on", "enabled": "on"})

    response = client.post("/servers/notes/edit", data)

    assert response.status_code == 302
    server.refresh_from_db()
    assert server.env["SERVICE_TOKEN"] == sealed
    assert server.to_config().secrets == (SECRET,)


def test_an_http_server_needs_a_url_and_its_authorization_header_is_sealed(
    client: Client, workbench: None, alice: User
) -> None:
    client.force_login(alice)
    base = {"name": "remote", "transport": "http", "era": "auto", "call_timeout": "10", "enabled": "on"}

    missing = client.post("/servers/new", base)
    saved = client.post(
        "/servers/new",
        base | {"url": "https://mcp.example.com/mcp", "headers": f"Authorization: Bearer {SECRET}"},
    )

    assert missing.status_code == 400 and b"needs its URL" in missing.content
    assert saved.status_code == 302
    server = McpServer.objects.get(name="remote")
    assert is_sealed(server.headers["Authorization"])
    assert dict(server.to_config().headers)["Authorization"] == f"Bearer {SECRET}"


def test_every_workbench_post_needs_the_csrf_token(workbench: None, alice: User) -> None:
    server = services.demo_server_ensure()
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)

    for path in ("/servers/new", f"/servers/{server.name}/connect", f"/servers/{server.name}/list/tools"):
        assert client.post(path, {}).status_code == 403


def test_signed_out_visitors_are_sent_to_log_in(client: Client, workbench: None) -> None:
    services.demo_server_ensure()

    response = client.get("/servers/demo/")

    assert response.status_code == 302 and "/accounts/login/" in response["Location"]
