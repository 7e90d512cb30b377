"""A session named outside ASCII is one session whichever way the host names it: the
``X-Inspector-Session`` header of the LLM and MCP HTTP routes (its UTF-8 bytes, as an HTTP client
sends a non-ASCII value) and ``proxy stdio --session``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx2
import pytest
from django.contrib.auth.models import User

from conversations.proxy.keys import create_key
from conversations.proxy.models import ProxySession
from servers.models import McpServer
from tests.conversations.proxy.llm_fakes import FakeUpstream
from tests.servers.proxy.http_harness import RawUpstream, served
from tests.servers.proxy.support import proxy_command, proxy_env
from tests.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

NAME = "café-run"


def _hints(key: object) -> list[str]:
    return sorted(ProxySession.objects.filter(key=key).values_list("hint", flat=True))


def test_a_non_ascii_session_named_on_the_llm_route_the_mcp_route_and_stdio_is_one_session(
    app: str, upstream: tuple[FakeUpstream, str], alice: User, tmp_path: Path
) -> None:
    _fake, base = upstream
    key, raw = create_key(alice, name="laptop", openai_upstream=f"{base}/v1")
    header = (b"x-inspector-session", NAME.encode())

    model = httpx2.post(
        f"{app}/proxy/{raw}/openai/v1/chat/completions",
        content=b'{"model": "fake", "messages": [{"role": "user", "content": "hi"}]}',
        headers=[(b"content-type", b"application/json"), header],
        timeout=30,
    )
    assert model.status_code == 200
    assert wait_until(lambda: _hints(key) != [], 30)

    mcp = RawUpstream()
    mcp.content_type = b"application/json"
    mcp.parts = [b'{"jsonrpc":"2.0","id":1,"result":{}}']
    with served(mcp) as server:
        McpServer.objects.create(name="raw", transport="http", url=f"{server}/mcp", enabled=True)
        tool = httpx2.post(
            f"{app}/proxy/{raw}/mcp/raw",
            content=b'{"jsonrpc":"2.0","id":1,"method":"ping"}',
            headers=[(b"content-type", b"application/json"), header],
            timeout=30,
        )
    assert tool.status_code == 200

    stdio = subprocess.run(
        proxy_command(raw, "echo", "cat", session=NAME),
        input=b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n',
        capture_output=True,
        env=proxy_env(tmp_path / "var"),
        timeout=120,
        check=False,
    )
    assert stdio.returncode == 0, stdio.stderr.decode(errors="replace")

    assert _hints(key) == [NAME]
