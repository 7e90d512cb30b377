"""One redaction point: secrets planted in every configured place, echoed back by a model and a
tool, are found nowhere the app writes — database, files under VAR_DIR, exports, pages, the API,
the admin and the logs."""

from __future__ import annotations

import json
import logging
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client, override_settings
from django.urls import reverse

from conversations.models import Conversation, Exchange, ModelProfile, Step, Turn
from conversations.record.transcripts.export import EXPORT_FORMATS, transcript_export_bytes
from conversations.runner import turn_run
from conversations.services import conversation_start, turn_start
from servers import gateway
from servers.grants import grant_ensure
from servers.models import McpServer, Operation
from servers.services import operation_start
from servers.vault import seal
from tests.factories import ConversationFactory
from tests.fixtures.oauth_server import Knobs, Served

pytestmark = pytest.mark.django_db(transaction=True)

REPO_ROOT = Path(__file__).resolve().parents[2]
# Distinctive values, most of them matching no built-in pattern: only knowing the configured
# secret values can catch them.
PROFILE_KEY = "h4-profile-key-7f3a9c2e1d5b"
SEALED_ENV = "h4-sealed-env-3b8e1f0a77c1"
REFERENCED_ENV = "h4-referenced-env-9c2d4e6f11"
SEALED_HEADER = "h4-sealed-header-5a1b2c3d4e"
REFERENCED_HEADER = "h4-referenced-header-8e7d6c5b"
PATTERN_KEY = "sk-proj-" + "Zq9Xw8Vu7Ts6Rr5Qp4Oo3Nn2"
EMAIL = "carol.h4-sweep@example.org"
SECRETS = [PROFILE_KEY, SEALED_ENV, REFERENCED_ENV, SEALED_HEADER, REFERENCED_HEADER, PATTERN_KEY, EMAIL]


class _ScriptedModel(BaseHTTPRequestHandler):
    """An OpenAI-compatible model that asks for the server's secret env values, then answers
    with every secret it saw (the key from its Authorization header, the tool results) and more."""

    def do_POST(self) -> None:  # noqa: N802 — the http.server hook
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        key = self.headers.get("Authorization", "").removeprefix("Bearer ")
        tool = next(
            t["function"]["name"] for t in body["tools"] if t["function"]["name"].endswith("env_value")
        )
        results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        asks = ["H4_SEALED", "H4_REFERENCED", key]
        if len(results) < len(asks):
            message: dict[str, Any] = {
                "role": "assistant",
                "content": f"Looking up a value with key {key} for {EMAIL}",
                "tool_calls": [
                    {
                        "id": f"call_{len(results)}",
                        "type": "function",
                        "function": {"name": tool, "arguments": json.dumps({"name": asks[len(results)]})},
                    }
                ],
            }
        else:
            echoed = " | ".join(str(r) for r in results)
            message = {
                "role": "assistant",
                "content": f"key {key}; tools said {echoed}; also {SEALED_HEADER} {REFERENCED_HEADER} "
                f"{PATTERN_KEY} {EMAIL}",
            }
        reply = {
            "id": "chatcmpl-sweep",
            "object": "chat.completion",
            "created": 0,
            "model": "sweep",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 — http.server's name
        pass


@pytest.fixture
def model_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ScriptedModel)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()
    gateway.close_all()


@pytest.fixture
def planted(monkeypatch: pytest.MonkeyPatch, model_url: str) -> tuple[User, ModelProfile, McpServer]:
    monkeypatch.setenv("H4_PROFILE_KEY_VAR", PROFILE_KEY)
    monkeypatch.setenv("H4_REFERENCED_VAR", REFERENCED_ENV)
    monkeypatch.setenv("H4_HEADER_VAR", REFERENCED_HEADER)
    admin = User.objects.create_user("admin", is_staff=True, is_superuser=True)
    profile = ModelProfile.objects.create(
        name="sweep",
        provider="openai_chat",
        base_url=model_url,
        model="sweep",
        api_key_env="H4_PROFILE_KEY_VAR",
        native_tools="yes",
    )
    server = McpServer.objects.create(
        name="broken",
        transport="stdio",
        command=sys.executable,
        args=["-m", "tests.fixtures.broken_server"],
        cwd=str(REPO_ROOT),
        env={"H4_SEALED": seal(SEALED_ENV), "H4_REFERENCED": "${H4_REFERENCED_VAR}"},
    )
    # Configured, never connected: its header secrets are still known to the redactor.
    McpServer.objects.create(
        name="remote",
        transport="http",
        url="http://127.0.0.1:9/mcp",
        headers={"X-Api-Key": seal(SEALED_HEADER), "X-Other": "${H4_HEADER_VAR}"},
    )
    return admin, profile, server


def _database_dump() -> str:
    """Every row of every table, every column, as text."""
    quote = connection.ops.quote_name
    parts = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f"SELECT * FROM {quote(table)}")  # noqa: S608 — names from introspection
            for row in cursor.fetchall():
                parts.append(
                    " ".join(
                        bytes(value).decode("utf-8", "replace")
                        if isinstance(value, bytes | memoryview)
                        else str(value)
                        for value in row
                    )
                )
    return "\n".join(parts)


# Prints every file under the folder given, a line after each.
_READ_FILES = """
import pathlib, sys
for path in sorted(pathlib.Path(sys.argv[1]).rglob("*")):
    if path.is_file():
        sys.stdout.buffer.write(path.read_bytes() + b"\\n")
"""


def _var_files() -> str:
    """Every file under VAR_DIR, as text: read by a process of its own. On the SQLite pass this
    process holds its test database open there, and a file descriptor this process closes on
    that database (or its ``-wal`` and ``-shm``) drops every POSIX lock SQLite holds on it here
    (sqlite.org/howtocorrupt.html, 2.2.1): see the test below."""
    read = subprocess.run(
        [sys.executable, "-c", _READ_FILES, str(settings.VAR_DIR)],
        capture_output=True,
        check=True,
        timeout=120,
    )
    return read.stdout.decode("utf-8", "replace")


def _pages(client: Client, conversation: Conversation, operation: Operation) -> str:
    public_id = conversation.public_id
    urls = [
        reverse("inspector-conversation", args=[public_id]),
        reverse("inspector-conversation-rows", args=[public_id]) + "?since=2000-01-01T00:00:00Z",
        reverse("inspector-conversation-chain", args=[public_id]),
        reverse("inspector-turns-earlier", args=[public_id]) + "?before=999",
        reverse("api-conversation", args=[public_id]),
        reverse("servers-operation", args=[operation.public_id]),
        reverse("servers-operation-state", args=[operation.public_id]),
        reverse("servers-transcript", args=["broken"]),
        reverse("servers-transcript-export", args=["broken"]),
        reverse("servers-detail", args=["broken"]),
        reverse("servers-detail", args=["remote"]),
        reverse("inspector-conversations"),
    ]
    urls += [
        reverse("inspector-conversation-export", args=[public_id]) + f"?format={fmt}"
        for fmt in EXPORT_FORMATS
    ]
    for turn in conversation.turns.all():
        urls.append(reverse("inspector-turn", args=[public_id, turn.pk]))
        urls.append(reverse("inspector-turn-steps", args=[public_id, turn.pk]) + "?before=999")
        urls.append(reverse("admin:conversations_turn_change", args=[turn.pk]))
    for step in Step.objects.filter(turn__conversation=conversation):
        urls.append(reverse("inspector-step-prompt", args=[public_id, step.pk]) + "?raw=1")
        urls.append(reverse("admin:conversations_step_change", args=[step.pk]))
    for exchange in Exchange.objects.filter(turn__conversation=conversation):
        for part in ("request", "response"):
            urls.append(
                reverse("inspector-exchange-body", args=[public_id, exchange.pk]) + f"?part={part}&raw=1"
            )
        urls.append(reverse("admin:conversations_exchange_change", args=[exchange.pk]))
    urls += [
        reverse("admin:conversations_conversation_change", args=[conversation.pk]),
        reverse("admin:conversations_turn_changelist"),
        reverse("admin:conversations_exchange_changelist"),
        reverse("admin:conversations_auditevent_changelist"),
        reverse("admin:servers_mcpserver_changelist"),
    ]
    texts = []
    for url in urls:
        response = client.get(url)
        assert response.status_code == 200, url
        body = b"".join(response) if response.streaming else response.content
        # A protobuf download is not UTF-8; a planted (ASCII) secret in it still shows.
        texts.append(body.decode("utf-8", errors="replace"))
    return "\n".join(texts)


def test_planted_secrets_echoed_back_are_written_nowhere(
    planted: tuple[User, ModelProfile, McpServer],
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    admin, profile, server = planted
    caplog.set_level(logging.DEBUG)
    conversation, turn = conversation_start(
        owner=admin,
        model_profile=profile,
        question=f"My key is {PROFILE_KEY}, my mail {EMAIL}: what is in H4_SEALED?",
        servers=[server],
        dispatch=False,
    )
    turn_run(turn_id=turn.pk)
    second = turn_start(conversation=conversation, question=f"Again, with {PATTERN_KEY}", dispatch=False)
    turn_run(turn_id=second.pk)
    operation = operation_start(
        server=server,
        user=admin,
        kind=Operation.Kind.TOOLS_CALL,
        target="env_value",
        arguments={"name": "H4_SEALED"},
    )
    echo = operation_start(
        server=server,
        user=admin,
        kind=Operation.Kind.TOOLS_CALL,
        target="env_value",
        arguments={"name": PROFILE_KEY},
    )
    logging.getLogger("conversations.sweep").warning("a log line with %s and %s", PROFILE_KEY, SEALED_ENV)
    try:
        raise RuntimeError(f"failed with {REFERENCED_ENV}")
    except RuntimeError:
        logging.getLogger("conversations.sweep").exception("a traceback")

    # The run really echoed them: the tool read the secret env values and the model answered.
    turns = list(Turn.objects.filter(conversation=conversation).order_by("seq"))
    assert [t.status for t in turns] == ["done", "done"]
    assert turns[0].answer.count("[REDACTED:") >= 7, turns[0].answer
    stored_result = json.dumps(Operation.objects.get(pk=operation.pk).result)
    assert "[REDACTED:secret]" in stored_result and echo.arguments == {"name": "[REDACTED:secret]"}
    client = Client()
    client.force_login(admin)
    logs = capfd.readouterr()
    written = {
        "database": _database_dump(),
        "files under VAR_DIR": _var_files(),
        # Every format as the file a user downloads (``otlp`` is protobuf: a secret would sit in it
        # as its UTF-8 bytes).
        "exports": "\n".join(
            transcript_export_bytes(conversation=conversation, fmt=fmt).decode("utf-8", errors="replace")
            for fmt in EXPORT_FORMATS
        ),
        "pages, API and admin": _pages(client, conversation, operation),
        "logs": logs.out + logs.err + caplog.text,
    }
    assert "[REDACTED" in written["logs"]
    leaks = [(where, secret) for where, text in written.items() for secret in SECRETS if secret in text]
    assert leaks == []


def test_an_oauth_servers_token_repeated_in_results_errors_and_notifications_is_written_nowhere(
    settings: Any, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """An HTTP MCP server behind OAuth repeats the bearer token it was sent in a tool result, a
    JSON-RPC error and a log notification, to a turn and to workbench calls: the access and
    refresh tokens, and the client's registration, are found nowhere the app writes."""
    settings.WORKBENCH_RUNNER = "inline"
    caplog.set_level(logging.DEBUG)
    admin = User.objects.create_user("admin", is_staff=True, is_superuser=True)
    with Served() as served:
        served.knobs = Knobs(echo_everywhere=True)
        server = McpServer.objects.create(name="guarded", transport="http", url=served.mcp_url)
        grant_ensure(server=server, user=admin)
        connect = operation_start(server=server, user=admin, kind=Operation.Kind.CONNECT)
        assert connect.status == Operation.Status.OK, connect.error
        conversation = ConversationFactory(owner=admin, servers=[server], tool_choice="required")
        turn = turn_start(conversation=conversation, question="whoami", dispatch=False)
        turn_run(turn_id=turn.pk)
        calls = [
            operation_start(
                server=server, user=admin, kind=Operation.Kind.TOOLS_CALL, target=name, arguments={}
            )
            for name in ("whoami", "leak")
        ]
        gateway.close_all()
        issued = [*served.tokens, *served.refresh_tokens]
        client_secrets = [str(client["secret"]) for client in served.clients.values() if client.get("secret")]
    # The pre-registered client's secret (the fixture's first) was never given to this run.
    tokens = issued + client_secrets[1:]

    turn.refresh_from_db()
    assert turn.status == Turn.Status.DONE, turn.error
    stored = json.dumps([Operation.objects.get(pk=call.pk).result for call in calls]) + " ".join(
        Operation.objects.get(pk=call.pk).error for call in calls
    )
    assert "you sent [REDACTED:secret]" in stored and "bad [REDACTED:secret]" in stored
    assert "authorized by [REDACTED:secret]" in " ".join(e.response_body for e in Exchange.objects.all())
    web = Client()
    web.force_login(admin)
    pages = [
        reverse("inspector-conversation", args=[conversation.public_id]),
        reverse("api-conversation", args=[conversation.public_id]),
        reverse("servers-transcript", args=["guarded"]),
        reverse("servers-transcript-export", args=["guarded"]),
        reverse("servers-detail", args=["guarded"]),
        *(reverse("servers-operation", args=[call.public_id]) for call in [connect, *calls]),
    ]
    logs = capfd.readouterr()
    written = {
        "database": _database_dump(),
        "files under VAR_DIR": _var_files(),
        "exports": "\n".join(
            transcript_export_bytes(conversation=conversation, fmt=fmt).decode("utf-8", errors="replace")
            for fmt in EXPORT_FORMATS
        ),
        "pages and API": "\n".join(_page(web, url) for url in pages),
        "logs": logs.out + logs.err + caplog.text,
    }
    assert issued
    leaks = [(where, token[:8]) for where, text in written.items() for token in tokens if token in text]
    assert leaks == []


def _page(client: Client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, url
    body = b"".join(response) if response.streaming else response.content
    return body.decode("utf-8", errors="replace")


def test_reading_the_files_under_var_dir_leaves_this_processs_sqlite_locks_alone(tmp_path: Path) -> None:
    """The sweep reads every file under VAR_DIR, where the SQLite pass keeps this worker's open
    database. A file descriptor of this process closed on that database drops every POSIX lock
    SQLite holds on it for this process; the next process to open it then takes itself for the
    only one, resets the WAL and unlinks it on close, and this process's next connection fails
    with "disk I/O error" while its open one writes to a WAL that is gone."""
    database = tmp_path / "inspector.sqlite3"
    held = sqlite3.connect(database, isolation_level=None)
    held.execute("PRAGMA journal_mode=WAL")
    held.execute("CREATE TABLE t (x)")
    held.execute("INSERT INTO t VALUES (1)")
    with override_settings(VAR_DIR=str(tmp_path)):
        assert "CREATE TABLE t" in _var_files()
    other = "import sqlite3, sys; c = sqlite3.connect(sys.argv[1], isolation_level=None); c.execute('INSERT INTO t VALUES (2)'); c.close()"
    subprocess.run([sys.executable, "-c", other, str(database)], check=True, timeout=60)

    held.execute("INSERT INTO t VALUES (3)")
    fresh = sqlite3.connect(database, isolation_level=None)
    try:
        assert fresh.execute("SELECT count(*) FROM t").fetchone() == (3,)
    finally:
        fresh.close()
        held.close()
