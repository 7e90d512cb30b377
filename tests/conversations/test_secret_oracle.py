"""The oracle for installation-configured secrets: each kind of secret an installation configures
for its servers and models — a stdio server's sealed and ``${VAR}`` env values, an HTTP server's
sealed and ``${VAR}`` headers, a model profile's key from the environment — is repeated back by a
real server on every channel it has (a tool result, a tool error, a JSON-RPC error, a log
notification, stderr, a response header), to workbench calls and to turns; then every text
column of every row of every table, the files under VAR_DIR, the exports and the logs are
scanned: none of them may hold a secret. The channels are checked to have carried each one (as a
marker) so a silent server cannot pass the scan."""

from __future__ import annotations

import logging
import sys
from typing import Any

import pytest
from django.contrib.auth.models import User

from conversations.models import Conversation, Exchange, Turn
from conversations.record.transcripts.export import EXPORT_FORMATS, transcript_export_bytes
from conversations.runner import turn_run
from conversations.services import turn_start
from servers import gateway
from servers.models import McpServer, Operation
from servers.services import operation_start
from servers.vault import seal
from tests.conversations.test_secret_sweep import REPO_ROOT, _database_dump, _var_files
from tests.factories import ConversationFactory, ModelProfileFactory
from tests.fixtures.echo_http_server import TOOLS, EchoServed

pytestmark = pytest.mark.django_db(transaction=True)

SEALED_ENV = "h5-sealed-env-4c7e2a9b1f"
REFERENCED_ENV = "h5-referenced-env-6d1f3b8a2c"
SEALED_HEADER = "h5-sealed-header-9e2b4d6f8a"
REFERENCED_HEADER = "h5-referenced-header-1a3c5e7b"
PROFILE_KEY = "h5-profile-key-2b4d6f8a0c3e"
SECRETS = {
    "stdio env, sealed": SEALED_ENV,
    "stdio env, ${VAR}": REFERENCED_ENV,
    "http header, sealed": SEALED_HEADER,
    "http header, ${VAR}": REFERENCED_HEADER,
    "model profile key": PROFILE_KEY,
}
MARK = "[REDACTED:secret]"


def _call(server: McpServer, user: User, tool: str, **arguments: Any) -> Operation:
    operation = operation_start(
        server=server, user=user, kind=Operation.Kind.TOOLS_CALL, target=tool, arguments=arguments
    )
    operation.refresh_from_db()
    return operation


def _ask(server: McpServer, user: User, tool: str) -> Conversation:
    conversation: Conversation = ConversationFactory(
        owner=user, servers=[server], tool_choice="named", tool_choice_name=f"{server.name}/{tool}"
    )
    turn = turn_start(conversation=conversation, question=f"call {tool}", dispatch=False)
    turn_run(turn_id=turn.pk)
    return conversation


def test_every_installation_secret_repeated_on_every_channel_is_stored_nowhere(
    monkeypatch: pytest.MonkeyPatch,
    settings: Any,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings.WORKBENCH_RUNNER = "inline"
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("H5_REFERENCED_VAR", REFERENCED_ENV)
    monkeypatch.setenv("H5_HEADER_VAR", REFERENCED_HEADER)
    monkeypatch.setenv("H5_PROFILE_KEY", PROFILE_KEY)
    # A profile of a real model whose key is read from the environment (the turns use the demo's).
    ModelProfileFactory(name="h5", api_key_env="H5_PROFILE_KEY")
    admin = User.objects.create_user("admin", is_staff=True, is_superuser=True)
    stdio = McpServer.objects.create(
        name="broken",
        transport="stdio",
        command=sys.executable,
        args=["-m", "tests.fixtures.broken_server"],
        cwd=str(REPO_ROOT),
        env={"H5_SEALED": seal(SEALED_ENV), "H5_REFERENCED": "${H5_REFERENCED_VAR}"},
    )
    with EchoServed() as echoing:
        http = McpServer.objects.create(
            name="echoing",
            transport="http",
            url=echoing.url,
            headers={"X-Api-Key": seal(SEALED_HEADER), "X-Other": "${H5_HEADER_VAR}"},
        )
        calls = {f"http {tool}": _call(http, admin, tool) for tool in TOOLS}
        for name in ("H5_SEALED", "H5_REFERENCED"):
            calls[f"stdio env_value {name}"] = _call(stdio, admin, "env_value", name=name)
            calls[f"stdio tell {name}"] = _call(stdio, admin, "tell", name=name)
            calls[f"stdio shout {name}"] = _call(stdio, admin, "shout", megabytes=0, secret_env=name)
        calls["stdio echo of the profile key"] = _call(stdio, admin, "echo", text=f"key {PROFILE_KEY}")
        conversations = [_ask(http, admin, tool) for tool in TOOLS]
        gateway.close_all()

    # Every channel carried the secrets (masked).
    assert MARK in str(calls["http headers"].result) and MARK in calls["http leak"].error
    assert all(MARK in str(calls[f"stdio env_value {n}"].result) for n in ("H5_SEALED", "H5_REFERENCED"))
    assert all(MARK in str(calls[f"stdio tell {n}"].result) for n in ("H5_SEALED", "H5_REFERENCED"))
    assert calls["stdio echo of the profile key"].arguments == {"text": f"key {MARK}"}
    exchanges = list(Exchange.objects.all())
    assert any(f"configured with x-api-key={MARK}" in e.response_body for e in exchanges)
    assert any(f"the value is {MARK}" in e.response_body for e in exchanges)
    assert any(f"the secret is {MARK}" in e.response_body for e in exchanges)
    assert any(MARK in str(e.response_headers.get("x-echo", "")) for e in exchanges)
    turns = Turn.objects.filter(conversation__in=conversations)
    assert turns.count() == len(TOOLS) and all(turn.status != Turn.Status.RUNNING for turn in turns)
    assert any(MARK in e.response_body for e in Exchange.objects.filter(turn__in=turns)), [
        (t.status, t.error, list(Exchange.objects.filter(turn=t).values_list("label", "response_body")))
        for t in turns
    ]

    logs = capfd.readouterr()
    written = {
        "database": _database_dump(),
        "files under VAR_DIR": _var_files(),
        "exports": "\n".join(
            transcript_export_bytes(conversation=conversation, fmt=fmt).decode("utf-8", errors="replace")
            for conversation in conversations
            for fmt in EXPORT_FORMATS
        ),
        "logs": logs.out + logs.err + caplog.text,
    }
    leaks = [
        (where, kind) for where, text in written.items() for kind, secret in SECRETS.items() if secret in text
    ]
    assert leaks == []
