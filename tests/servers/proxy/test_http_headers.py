"""The HTTP MCP proxy passes header lines as they were sent, both ways: a header the upstream
repeats (``Set-Cookie``, ``Link``) reaches the host as every line it sent, in order, and nothing
that changes how a cache may keep the answer (``Vary``) is added on the way."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import httpx2
import pytest
from django.contrib.auth import get_user_model

from conversations.proxy.keys import create_key
from inspector.asgi import application
from servers.models import McpServer
from servers.proxy.http import _client
from tests.servers.proxy.http_harness import RawUpstream, served
from tests.servers.proxy.support import recorded
from tests.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

ANSWER = b'{"jsonrpc":"2.0","id":1,"result":{}}'
REQUEST = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'


@pytest.fixture
def app_url() -> Iterator[str]:
    with served(application) as url:
        yield url


class LinesUpstream(RawUpstream):
    """A ``RawUpstream`` that also keeps each request's header lines as a list (duplicates kept)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[list[tuple[bytes, bytes]]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.lines.append(list(scope["headers"]))
        await super().__call__(scope, receive, send)


def _proxied(app_url: str, upstream: str, headers: list[tuple[bytes, bytes]]) -> httpx.Response:
    user = get_user_model().objects.create_user("alice", password="pw")
    key, raw = create_key(user, name="laptop")
    McpServer.objects.create(name="raw", transport="http", url=f"{upstream}/mcp", enabled=True)
    answer = httpx.post(f"{app_url}/proxy/{raw}/mcp/raw", content=REQUEST, headers=headers, timeout=30)
    assert wait_until(lambda: len(recorded(key)) == 1, 30)
    return answer


def test_repeated_response_headers_reach_the_host_as_every_line_in_order_and_no_vary_is_added(
    app_url: str,
) -> None:
    fake = LinesUpstream()
    fake.content_type = b"application/json"
    fake.parts = [ANSWER]
    fake.extra_headers = [
        (b"set-cookie", b"m1=1; Path=/"),
        (b"link", b"<a>; rel=next"),
        (b"set-cookie", b"m2=2"),
        (b"link", b"<b>; rel=prev"),
    ]
    with served(fake) as upstream:
        answer = _proxied(app_url, upstream, [(b"content-type", b"application/json")])

    assert answer.status_code == 200 and answer.content == ANSWER
    upstreams = {b"content-type", b"mcp-session-id", b"set-cookie", b"link"}
    lines = [(name.lower(), value) for name, value in answer.headers.raw if name.lower() in upstreams]
    assert lines == [
        (b"content-type", b"application/json"),
        (b"mcp-session-id", b"upstream-session"),
        *fake.extra_headers,
    ]
    assert "vary" not in answer.headers


def test_a_repeated_request_header_reaches_the_server_as_every_line_the_host_sent(app_url: str) -> None:
    fake = LinesUpstream()
    fake.content_type = b"application/json"
    fake.parts = [ANSWER]
    with served(fake) as upstream:
        _proxied(
            app_url,
            upstream,
            [(b"content-type", b"application/json"), (b"x-trace", b"one, two"), (b"x-trace", b"three")],
        )

    [sent] = fake.lines
    assert [value for name, value in sent if name.lower() == b"x-trace"] == [b"one, two", b"three"]


def test_the_shared_client_keeps_no_servers_cookie() -> None:
    """Every key a web process serves shares its client: a server's ``Set-Cookie`` goes back to
    the host it answered (above) and is kept nowhere for another's call."""

    async def kept() -> int:
        client = _client()
        request = httpx2.Request("POST", "http://127.0.0.1:9/mcp")
        answer = httpx2.Response(200, headers=[(b"set-cookie", b"session=alices")], request=request)
        client.cookies.extract_cookies(answer)
        return len(client.cookies.jar)

    assert asyncio.run(kept()) == 0


def test_an_mcp_answer_carries_the_apps_security_headers_where_the_server_sent_none(app_url: str) -> None:
    fake = LinesUpstream()
    fake.content_type = b"application/json"
    fake.parts = [ANSWER]
    fake.extra_headers = [(b"x-frame-options", b"SAMEORIGIN")]
    with served(fake) as upstream:
        answer = _proxied(app_url, upstream, [(b"content-type", b"application/json")])
    page = httpx.get(f"{app_url}/accounts/login/", timeout=30)

    assert answer.headers["x-content-type-options"] == page.headers["x-content-type-options"] == "nosniff"
    assert answer.headers["content-security-policy"] and answer.headers["referrer-policy"]
    # The server's own is kept, and not doubled by the app's.
    assert answer.headers.get_list("x-frame-options") == ["SAMEORIGIN"]
