"""The HTTP MCP proxy behind a load balancer: two web processes (daphne, as the scaled deployment
runs them) on one PostgreSQL and one Redis, and a host whose requests land on either. A server's
request that reached the host through one process and that the host answered through the other
is recorded once, paired with its answer; so is a legacy SSE POST served by one process whose
response came on the event stream the other holds."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.contrib.auth import get_user_model

from conversations.models import Exchange
from conversations.proxy.keys import create_key
from conversations.proxy.models import ProxyKey
from servers.models import McpServer
from tests.servers.proxy.http_harness import everything
from tests.servers.proxy.support import REPO, proxy_env
from tests.support import free_port, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres, pytest.mark.slow]
ANSWER_TEXT = "ANSWERED-THROUGH-THE-OTHER-PROCESS"
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def _answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except OSError:
        return False
    return True


@contextmanager
def _web_process(env: dict[str, str], log: Path) -> Iterator[str]:
    """One web process of the scaled deployment (daphne on the app) on a free port."""
    port = free_port()
    with log.open("w") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "daphne",
                "-b",
                "127.0.0.1",
                "-p",
                str(port),
                "inspector.asgi:application",
            ],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            if not wait_until(lambda: _answers(port) or process.poll() is not None, 60) or process.poll():
                pytest.fail(f"the web process did not start:\n{log.read_text()[-3000:]}")
            yield f"http://127.0.0.1:{port}"
        finally:
            process.terminate()
            process.wait(30)


@pytest.fixture
def two_processes(tmp_path: Path, redis_url: str) -> Iterator[tuple[str, str]]:
    env = {**proxy_env(tmp_path / "var"), "REDIS_URL": redis_url}
    with ExitStack() as stack:
        first = stack.enter_context(_web_process(env, tmp_path / "web-a.log"))
        second = stack.enter_context(_web_process(env, tmp_path / "web-b.log"))
        yield first, second


def _key() -> tuple[ProxyKey, str]:
    alice = get_user_model().objects.create_user("alice", password="pw")
    return create_key(alice, name="laptop")


def _messages(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """The JSON-RPC messages of an event stream, as they arrive."""
    for line in lines:
        if line.startswith("data:") and line[5:].strip():
            yield json.loads(line[5:])


def _post(url: str, message: dict[str, Any], session: str = "") -> httpx.Response:
    headers = {**MCP_HEADERS, **({"Mcp-Session-Id": session} if session else {})}
    return httpx.post(url, json=message, headers=headers, timeout=30)


def _rows(key: ProxyKey) -> list[Exchange]:
    return list(Exchange.objects.filter(turn__conversation__proxy_session__key=key).order_by("pk"))


def test_a_servers_request_answered_through_another_process_is_recorded_paired(
    two_processes: tuple[str, str],
) -> None:
    first, second = two_processes
    key, raw = _key()
    with everything("streamableHttp") as upstream:
        McpServer.objects.create(name="everything", transport="http", url=f"{upstream}/mcp", enabled=True)
        on_first, on_second = f"{first}/proxy/{raw}/mcp/everything", f"{second}/proxy/{raw}/mcp/everything"
        hello = {
            "protocolVersion": "2025-06-18",
            "capabilities": {"sampling": {}},
            "clientInfo": {"name": "host", "version": "1"},
        }
        opened = _post(on_first, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello})
        session = opened.headers["mcp-session-id"]
        assert opened.status_code == 200, opened.text
        assert _post(on_first, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session).is_success

        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "trigger-sampling-request", "arguments": {"prompt": "hi", "maxTokens": 5}},
        }
        headers = {**MCP_HEADERS, "Mcp-Session-Id": session}
        with httpx.stream("POST", on_first, json=call, headers=headers, timeout=60) as stream:
            messages = _messages(stream.iter_lines())
            asked = next(message for message in messages if message.get("method") == "sampling/createMessage")
            result = {
                "role": "assistant",
                "content": {"type": "text", "text": ANSWER_TEXT},
                "model": "host-model",
                "stopReason": "endTurn",
            }
            # The host's answer goes to the other web process, as a load balancer may send it.
            answered = _post(on_second, {"jsonrpc": "2.0", "id": asked["id"], "result": result}, session)
            assert answered.status_code == 202, answered.text
            done = next(message for message in messages if message.get("id") == 2)
        assert ANSWER_TEXT in json.dumps(done)

    def paired() -> list[Exchange]:
        return [row for row in _rows(key) if row.label == "sampling/createMessage"]

    assert wait_until(lambda: any(row.label == "tools/call" and row.status for row in _rows(key)), 30)
    assert wait_until(lambda: len(paired()) == 1, 30), [(r.label, r.status, r.error) for r in _rows(key)]
    [row] = paired()
    assert row.direction == "server" and row.status == "ok", (row.status, row.error)
    assert '"sampling/createMessage"' in row.request_body and ANSWER_TEXT in row.response_body
    assert not [row for row in _rows(key) if row.label == "response to unknown id"]


def test_a_legacy_post_served_by_one_process_pairs_with_its_response_on_the_others_stream(
    two_processes: tuple[str, str],
) -> None:
    first, second = two_processes
    key, raw = _key()
    with everything("sse") as upstream:
        McpServer.objects.create(name="legacy", transport="sse", url=f"{upstream}/sse", enabled=True)
        with httpx.stream(
            "GET", f"{first}/proxy/{raw}/sse/legacy", headers={"Accept": "text/event-stream"}, timeout=60
        ) as stream:
            lines = stream.iter_lines()
            endpoint = next(line[5:].strip() for line in lines if line.startswith("data:"))
            assert endpoint.startswith(f"/proxy/{raw}/sse/legacy/messages?to=")
            hello = {
                "protocolVersion": "2024-11-05",
                "capabilities": {},
                "clientInfo": {"name": "host", "version": "1"},
            }
            # The POST goes to the other web process; its response comes on this one's stream.
            posted = _post(
                f"{second}{endpoint}", {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}
            )
            assert posted.status_code == 202, posted.text
            answer = next(message for message in _messages(lines) if message.get("id") == 1)
        assert "serverInfo" in json.dumps(answer)

    def initialize() -> list[Exchange]:
        return [row for row in _rows(key) if row.label == "initialize"]

    assert wait_until(lambda: len(initialize()) == 1 and initialize()[0].status != "", 30), [
        (r.label, r.status, r.error) for r in _rows(key)
    ]
    [row] = initialize()
    assert row.status == "ok" and "serverInfo" in row.response_body and '"initialize"' in row.request_body
    assert not [row for row in _rows(key) if row.label == "response to unknown id"]
