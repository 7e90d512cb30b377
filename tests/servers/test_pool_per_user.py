"""Pooled sessions are never shared between users: what one user's stdio server keeps in memory
(the demo server's notes) is out of another user's reach, from the workbench and from a turn.
Real parts: the bundled demo server over stdio through the process's pool."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from conversations.loop.llm import ToolDef
from conversations.redaction import redactor
from servers import gateway
from servers.models import Operation
from servers.services import demo_server_ensure
from servers.toolhost import conversation_servers
from tests.factories import ConversationFactory

pytestmark = pytest.mark.django_db

SECRET_NOTE = {"title": "alice-secret", "text": "alice private note 4242"}


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    gateway.close_all()
    yield
    gateway.close_all()


def signed_in(username: str) -> Client:
    """A browser of a non-staff user (the demo server lets non-staff start it)."""
    client = Client()
    client.force_login(User.objects.create_user(username, password="pw"))
    return client


def call(client: Client, tool: str, arguments: dict[str, Any]) -> Operation:
    """Call a demo tool from the workbench's tool page, as the tester did."""
    response = client.post(f"/servers/demo/tools/{tool}", {"arguments": json.dumps(arguments)})
    assert response.status_code == 302, response.content[:500]
    return Operation.objects.get(public_id=response["Location"].rstrip("/").rsplit("/", 1)[-1])


def text(operation: Operation) -> str:
    result = operation.result if isinstance(operation.result, dict) else {}
    return "\n".join(str(block.get("text", "")) for block in result.get("content", []))


def test_one_users_notes_are_out_of_another_users_reach_from_the_workbench(workbench: None) -> None:
    demo_server_ensure()
    alice, bob = signed_in("alice"), signed_in("bob")
    for client in (alice, bob):
        client.post("/servers/demo/list/tools")

    written = call(alice, "write_note", SECRET_NOTE)
    listed = call(bob, "list_notes", {})
    read = call(bob, "read_note", {"title": "alice-secret"})

    assert written.status == "ok" and "Saved note 'alice-secret'" in text(written)
    assert listed.status == "ok", listed.error
    assert text(listed) == "No notes yet. Use write_note to add one."
    assert "alice private note 4242" not in json.dumps(read.result) + read.error
    assert read.is_error
    # Bob's calls ran on a session (a server process) of his own.
    assert listed.session["generation"] != written.session["generation"]


def test_a_users_second_call_reuses_their_own_pooled_session(workbench: None) -> None:
    spawned_before = gateway.spawn_count(demo_server_ensure().pk)
    alice, bob = signed_in("alice"), signed_in("bob")
    alice.post("/servers/demo/list/tools")
    bob.post("/servers/demo/list/tools")

    written = call(alice, "write_note", SECRET_NOTE)
    call(bob, "write_note", {"title": "bob's", "text": "bob's own"})
    read = call(alice, "read_note", {"title": "alice-secret"})
    listed = call(alice, "list_notes", {})

    assert text(read) == "alice private note 4242"
    assert text(listed) == "1 note:\n- alice-secret (23 characters)"
    assert read.session["spawned"] is False and listed.session["spawned"] is False
    assert read.session["generation"] == listed.session["generation"] == written.session["generation"]
    # One process each, none respawned.
    assert gateway.spawn_count(demo_server_ensure().pk) - spawned_before == 2


def _tool(tools: list[ToolDef], name: str) -> ToolDef:
    return next(tool for tool in tools if tool.name == name)


def test_a_turn_reaches_its_conversation_owners_session_only() -> None:
    """What a model in bob's conversation can call is bob's server process, never alice's; a
    second conversation of alice's reaches hers (turns of one user share that user's process)."""
    server = demo_server_ensure()
    alice, bob = User.objects.create_user("alice"), User.objects.create_user("bob")
    hers = conversation_servers(ConversationFactory(owner=alice, servers=[server])).connect(
        redact=redactor(), signal=None
    )
    his = conversation_servers(ConversationFactory(owner=bob, servers=[server])).connect(
        redact=redactor(), signal=None
    )
    again = conversation_servers(ConversationFactory(owner=alice, servers=[server])).connect(
        redact=redactor(), signal=None
    )

    hers.host.call(_tool(hers.tools, "write_note"), dict(SECRET_NOTE))
    listed = his.host.call(_tool(his.tools, "list_notes"), {})
    read = his.host.call(_tool(his.tools, "read_note"), {"title": "alice-secret"})
    own = again.host.call(_tool(again.tools, "read_note"), {"title": "alice-secret"})

    assert listed.result is not None and "alice-secret" not in json.dumps(listed.result)
    assert "No notes yet" in json.dumps(listed.result)
    assert "alice private note 4242" not in json.dumps(read.result) + read.error
    assert own.result is not None and own.result["content"][0]["text"] == "alice private note 4242"
    assert his.sessions["demo"]["spawned"] is True
    assert again.sessions["demo"]["spawned"] is False
    assert again.sessions["demo"]["generation"] == hers.sessions["demo"]["generation"]
