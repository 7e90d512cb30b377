"""The HTTP MCP proxy under a real ASGI server: the official SDK client through
``/proxy/<key>/mcp/<server>`` to server-everything's streamable HTTP and through
``/proxy/<key>/sse/<server>`` to its legacy SSE; bytes unchanged both ways; the host's
credentials forwarded and never stored; 401 for a bad key, 404 for a server the key's user may
not see; an unreachable upstream a 502 and a failed record; a host that leaves mid-stream leaves
a record of what passed; an oversize body passed whole and recorded cut."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any, cast

import httpx
import httpx2
import pytest
from django.contrib.auth import get_user_model
from django.db import connections
from django.test import RequestFactory
from mcp import ClientSession
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

from conversations.models import Exchange
from conversations.proxy.keys import create_key
from conversations.proxy.models import ProxyKey
from inspector.asgi import application
from servers.models import McpServer
from servers.proxy.http import Route, route_resolve, stores_pending
from tests.servers.proxy.http_harness import RawUpstream, everything, served
from tests.servers.proxy.support import recorded
from tests.support import free_port, wait_until

pytestmark = pytest.mark.django_db(transaction=True)
HOST_TOKEN = "host-own-bearer-token-7f3a9c"


@pytest.fixture
def app_url() -> Iterator[str]:
    with served(application) as url:
        yield url


def _key(username: str = "alice") -> tuple[ProxyKey, str]:
    user = get_user_model().objects.create_user(username, password="pw")
    return create_key(user, name="laptop")


def _server(name: str, url: str, transport: str = "http", **fields: Any) -> McpServer:
    return McpServer.objects.create(name=name, transport=transport, url=url, enabled=True, **fields)


def _nowhere_in_storage(*values: str) -> None:
    for row in Exchange.objects.all():
        stored = " ".join(
            [
                row.request_body,
                row.response_body,
                str(row.request_headers),
                str(row.response_headers),
                row.error,
            ]
        )
        for value in values:
            assert value not in stored, f"{value!r} is stored in exchange {row.pk} ({row.label})"


def test_the_sdk_client_through_the_streamable_http_proxy_to_server_everything(app_url: str) -> None:
    key, raw = _key()
    with everything("streamableHttp") as upstream:
        _server("everything", f"{upstream}/mcp")
        headers = {"Authorization": f"Bearer {HOST_TOKEN}", "X-Inspector-Session": "http-desk"}

        async def session() -> tuple[list[str], str]:
            async with (
                httpx2.AsyncClient(headers=headers, timeout=30) as client,
                streamable_http_client(f"{app_url}/proxy/{raw}/mcp/everything", http_client=client) as (
                    read,
                    write,
                ),
                ClientSession(read, write) as mcp,
            ):
                await mcp.initialize()
                tools = await mcp.list_tools()
                result = await mcp.call_tool("echo", {"message": "over http"})
                return [tool.name for tool in tools.tools], result.content[0].text  # type: ignore[union-attr]

        names, text = asyncio.run(session())
    assert "echo" in names and "over http" in text
    expected = {"initialize", "notifications/initialized", "tools/list", "tools/call", "DELETE /mcp"}
    assert wait_until(lambda: expected <= {row.label for row in recorded(key)}, 30)
    rows = recorded(key)
    labels = {row.label for row in rows}
    assert {"initialize", "notifications/initialized", "tools/list", "tools/call"} <= labels, [
        (row.label, row.status, row.error, row.response_body[:300]) for row in rows
    ]
    call = next(row for row in rows if row.label == "tools/call")
    assert call.status == "ok" and "over http" in call.response_body and call.jsonrpc_id
    assert call.request_headers.get("mcp-session-id") and call.response_headers.get(":status") == "200"
    _nowhere_in_storage(HOST_TOKEN, raw)


def test_the_sdk_client_through_the_legacy_sse_proxy_whose_endpoint_is_rewritten(app_url: str) -> None:
    key, raw = _key()
    with everything("sse") as upstream:
        _server("everything-sse", f"{upstream}/sse", transport="sse")

        async def session() -> str:
            url = f"{app_url}/proxy/{raw}/sse/everything-sse"
            async with sse_client(url, headers={"Authorization": f"Bearer {HOST_TOKEN}"}) as (read, write):
                async with ClientSession(read, write) as mcp:
                    await mcp.initialize()
                    result = await mcp.call_tool("echo", {"message": "over sse"})
                    return result.content[0].text  # type: ignore[union-attr]

        assert "over sse" in asyncio.run(session())
    assert wait_until(lambda: any(row.label == "tools/call" and row.status for row in recorded(key)), 30)
    call = next(row for row in recorded(key) if row.label == "tools/call")
    assert call.status == "ok" and "over sse" in call.response_body
    _nowhere_in_storage(HOST_TOKEN, raw)


def test_bytes_pass_unchanged_both_ways_and_the_hosts_headers_reach_the_server(app_url: str) -> None:
    key, raw = _key()
    fake = RawUpstream()
    fake.parts = [
        b'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/progress",',
        b'"params":{"progress":1}}\n\n',
        b"data: \xff\xfe not utf-8 \xc3\x28\n\n",
        b': a comment\n\ndata: {"jsonrpc":"2.0","id":1,"result":{"ok":true}}\n\n',
    ]
    body = (
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"s":"\xc3\xa9"}}}'
    )
    with served(fake) as upstream:
        _server("raw", f"{upstream}/mcp")
        answer = httpx.post(
            f"{app_url}/proxy/{raw}/mcp/raw",
            content=body,
            headers={
                "Authorization": f"Bearer {HOST_TOKEN}",
                "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream",
                "MCP-Protocol-Version": "2025-06-18",
                "Mcp-Session-Id": "host-session",
            },
            timeout=30,
        )
    assert answer.status_code == 200 and answer.content == b"".join(fake.parts)
    assert answer.headers["mcp-session-id"] == "upstream-session"
    assert fake.received == [body]
    sent = fake.headers[0]
    assert sent["authorization"] == f"Bearer {HOST_TOKEN}" and sent["mcp-session-id"] == "host-session"
    assert sent["mcp-protocol-version"] == "2025-06-18" and "x-inspector-session" not in sent
    assert wait_until(lambda: len(recorded(key)) == 3, 30)
    labels = {row.label for row in recorded(key)}
    assert labels == {"notifications/progress", "event (not JSON)", "tools/call"}
    odd = next(row for row in recorded(key) if row.label == "event (not JSON)")
    # Stored as its JSON string literal (conversations.escaping), every byte kept.
    assert json.loads(odd.response_body).encode("utf-8", "surrogateescape") == b"\xff\xfe not utf-8 \xc3\x28"
    _nowhere_in_storage(HOST_TOKEN, raw)


def test_a_malformed_request_is_forwarded_as_it_is_and_the_upstreams_error_recorded(app_url: str) -> None:
    key, raw = _key()
    fake = RawUpstream()
    fake.status, fake.content_type = 400, b"application/json"
    fake.parts = [b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}']
    with served(fake) as upstream:
        _server("raw", f"{upstream}/mcp")
        answer = httpx.post(f"{app_url}/proxy/{raw}/mcp/raw", content=b"{not json", timeout=30)
    assert answer.status_code == 400 and answer.content == fake.parts[0]
    assert fake.received == [b"{not json"]
    assert wait_until(lambda: any(row.status == "error" for row in recorded(key)), 30)
    row = next(row for row in recorded(key) if row.status == "error")
    assert row.request_body == "{not json" and "Parse error" in row.response_body and "HTTP 400" in row.error


def test_a_bad_key_is_401_and_a_server_the_user_may_not_see_is_404(app_url: str) -> None:
    key, raw = _key()
    _server("hidden", "http://127.0.0.1:9/mcp").__class__.objects.filter(name="hidden").update(enabled=False)
    McpServer.objects.create(name="local", transport="stdio", command="true", enabled=True)
    assert httpx.post(f"{app_url}/proxy/tci_not-a-key/mcp/hidden", content=b"{}").status_code == 401
    assert httpx.post(f"{app_url}/proxy/{raw}/mcp/hidden", content=b"{}").status_code == 404
    assert httpx.post(f"{app_url}/proxy/{raw}/mcp/local", content=b"{}").status_code == 404
    assert httpx.post(f"{app_url}/proxy/{raw}/mcp/nobody", content=b"{}").status_code == 404
    key.revoked_at = key.created_at
    key.save()
    _server("open", "http://127.0.0.1:9/mcp")
    assert httpx.post(f"{app_url}/proxy/{raw}/mcp/open", content=b"{}").status_code == 401
    assert not Exchange.objects.exists()


def test_an_unreachable_server_is_a_502_with_a_clear_body_and_a_failed_record(app_url: str) -> None:
    key, raw = _key()
    _server("down", f"http://127.0.0.1:{free_port()}/mcp")
    body = b'{"jsonrpc":"2.0","id":4,"method":"tools/list"}'
    answer = httpx.post(f"{app_url}/proxy/{raw}/mcp/down", content=body, timeout=30)
    assert answer.status_code == 502 and "could not reach the MCP server 'down'" in answer.text
    assert wait_until(lambda: bool(recorded(key)), 30)
    [row] = recorded(key)
    assert row.label == "tools/list" and row.status == "error" and "could not reach" in row.error


def test_a_host_leaving_mid_stream_leaves_a_record_of_what_passed(app_url: str) -> None:
    key, raw = _key()
    fake = RawUpstream()
    fake.hold = True
    fake.parts = [b'data: {"jsonrpc":"2.0","method":"notifications/message","params":{"data":"first"}}\n\n']
    with served(fake) as upstream:
        _server("raw", f"{upstream}/mcp")
        with httpx.stream("GET", f"{app_url}/proxy/{raw}/mcp/raw", timeout=30) as answer:
            first = next(answer.iter_raw())
        # The host has gone; the upstream is still holding its stream open.
        assert b"first" in first
        assert wait_until(lambda: any(row.label.startswith("GET ") for row in recorded(key)), 30)
        fake.release.set()
    rows = recorded(key)
    assert any(row.label == "notifications/message" and "first" in row.response_body for row in rows)
    stream = next(row for row in rows if row.label.startswith("GET "))
    assert "host went away" in stream.error


def test_an_oversize_body_is_passed_whole_and_recorded_cut_and_marked(app_url: str, settings: Any) -> None:
    settings.EXCHANGE_BODY_LIMIT = 1000
    key, raw = _key()
    fake = RawUpstream()
    fake.content_type = b"application/json"
    fake.parts = [b'{"jsonrpc":"2.0","id":1,"result":{"t":"' + b"r" * 50_000 + b'"}}']
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"s":"' + b"q" * 200_000 + b'"}}'
    with served(fake) as upstream:
        _server("raw", f"{upstream}/mcp")
        answer = httpx.post(f"{app_url}/proxy/{raw}/mcp/raw", content=body, timeout=30)
    assert answer.content == fake.parts[0] and fake.received == [body]
    assert wait_until(lambda: bool(recorded(key)), 30)
    rows = recorded(key)
    assert all(len(row.request_body) < 2000 and len(row.response_body) < 2000 for row in rows)
    assert any("cut" in row.request_body and f"{len(body):,}" in row.request_body for row in rows), [
        (row.label, row.request_body[-200:], row.response_body[-200:]) for row in rows
    ]


def _lent(pool: Any) -> int:
    stats = pool.get_stats()
    return int(stats["pool_size"] - stats["pool_available"])


@pytest.mark.postgres
def test_an_open_stream_holds_no_pooled_connection(app_url: str) -> None:
    """A host's GET stream may stay open for hours: the route is resolved in the database, and the
    connection that took is handed back before the stream starts, not when it ends (a pool of
    twenty would otherwise be used up by twenty open streams)."""
    key, raw = _key()
    fake = RawUpstream()
    fake.hold = True
    pool = cast(Any, connections["default"]).pool
    streams = {
        "http": b'data: {"jsonrpc":"2.0","method":"notifications/message","params":{"data":"first"}}\n\n',
        "sse": b"event: endpoint\ndata: /messages?sessionId=first\n\n",
    }
    with served(fake) as upstream:
        _server("raw", f"{upstream}/mcp")
        # At rest: what this test's own thread holds, and nothing a store holds for a moment.
        assert wait_until(lambda: stores_pending() == 0, 15)
        at_rest = _lent(pool)

        def back_to_rest() -> bool:
            # What passed is stored in threads that hand their connection back when done, and a
            # store may start again at any moment (records go in groups): the count is awaited,
            # not read once. A stream that holds a connection never comes back to it.
            return stores_pending() == 0 and _lent(pool) <= at_rest

        for transport, first in streams.items():
            McpServer.objects.filter(name="raw").update(transport=transport)
            fake.parts = [first]
            path = "mcp" if transport == "http" else "sse"
            with httpx.stream("GET", f"{app_url}/proxy/{raw}/{path}/raw", timeout=30) as answer:
                assert answer.status_code == 200 and b"first" in next(answer.iter_raw())
                assert wait_until(back_to_rest, 15), (
                    f"an open {transport} stream holds a pooled connection ({_lent(pool)} lent, {at_rest} at rest)"
                )
            # Closed: its request has ended before the next stream is counted.
            assert wait_until(back_to_rest, 15)
        fake.release.set()


def test_the_route_is_resolved_without_keeping_a_connection() -> None:
    """The route is resolved in the thread that then waits on the stream for as long as it is
    open: the connection its reads opened is closed before it returns, not when the request ends
    (a stream cancelled by a server shutting down never ends its request)."""
    _, raw = _key()
    _server("raw", "http://127.0.0.1:9/mcp")
    request = RequestFactory().get("/")
    seen: dict[str, object] = {}

    def resolve() -> None:
        try:
            seen["route"] = route_resolve(request, raw_key=raw, server_name="raw", transport="http")
            seen["open"] = connections["default"].connection is not None
        finally:
            connections.close_all()

    thread = threading.Thread(target=resolve)
    thread.start()
    thread.join(30)
    assert isinstance(seen["route"], Route)
    assert seen["open"] is False
