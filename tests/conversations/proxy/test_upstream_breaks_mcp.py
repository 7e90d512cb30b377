"""The HTTP MCP proxy under daphne, its server breaking off: the host's connection ends within
moments with an answer it can tell is incomplete, and the record names the server as the side
that broke off; an answer stream that ends with no response to the host's request still records
the request, as one that got no response."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model

from conversations.models import Exchange
from conversations.proxy.keys import create_key
from conversations.proxy.models import ProxyKey
from servers.models import McpServer
from tests.conversations.proxy.test_upstream_breaks import RawUpstream, daphne, host_posts
from tests.servers.proxy.support import recorded
from tests.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
NOTE = b'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"hi"}}\n\n'
CALL = json.dumps(
    {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "echo", "arguments": {}}}
).encode()


@pytest.fixture
def web(tmp_path: Path) -> Iterator[int]:
    with daphne(tmp_path / "var") as (port, _):
        yield port


def _key() -> tuple[ProxyKey, str]:
    return create_key(get_user_model().objects.create_user("alice"), name="laptop")


def _call_row(key: ProxyKey) -> Exchange:
    def found() -> Exchange | None:
        return next((row for row in recorded(key) if "tools/call" in row.request_body), None)

    assert wait_until(lambda: found() is not None, 30), [row.label for row in recorded(key)]
    row = found()
    assert row is not None
    return row


def test_a_server_that_breaks_off_mid_chunk_ends_the_hosts_connection_and_is_named_in_the_record(
    web: int,
) -> None:
    def mid_chunk(connection: socket.socket) -> None:
        connection.sendall(
            SSE_HEAD
            + b"Transfer-Encoding: chunked\r\n\r\n"
            + b"%x\r\n" % len(NOTE)
            + NOTE
            + b'\r\n1000\r\nevent: message\ndata: {"jsonrpc"'
        )

    key, raw = _key()
    with RawUpstream(mid_chunk) as upstream:
        McpServer.objects.create(name="raw", transport="http", url=f"{upstream.url}/mcp", enabled=True)
        saw = host_posts(web, f"/proxy/{raw}/mcp/raw", CALL)

    assert not saw.waited_out, f"the host was left waiting after {saw.data!r}"
    assert saw.status == 200 and NOTE in saw.body and saw.closed and not saw.whole
    row = _call_row(key)
    assert "the server broke off its answer" in row.error
    assert "host went away" not in row.error


def test_an_event_stream_that_ends_with_no_response_records_the_request_as_unanswered(web: int) -> None:
    key, raw = _key()
    with RawUpstream(
        lambda connection: connection.sendall(SSE_HEAD + b"Connection: close\r\n\r\n" + NOTE)
    ) as upstream:
        McpServer.objects.create(name="raw", transport="http", url=f"{upstream.url}/mcp", enabled=True)
        saw = host_posts(web, f"/proxy/{raw}/mcp/raw", CALL)

    assert not saw.waited_out and NOTE in saw.body
    row = _call_row(key)
    assert row.status == "no response"
    assert "no JSON-RPC response" in row.error
