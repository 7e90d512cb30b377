"""The gateway over streamable HTTP, against the bundled demo server served with --http."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from servers import gateway
from servers.gateway.config import ServerConfig
from tests.support import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def demo_http_url() -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "servers.demo_server", "--http", "--port", str(port)],
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail("the demo server did not start over HTTP")
            time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        gateway.close_all()
        process.terminate()
        process.wait(timeout=10)


def _config(url: str, **overrides: object) -> ServerConfig:
    return ServerConfig(
        server_id=9500,
        name="demo-http",
        transport="http",
        url=url,
        call_timeout=10,
        **overrides,  # type: ignore[arg-type]
    )


def test_tools_are_listed_and_called_over_streamable_http_with_every_message_captured(
    demo_http_url: str,
) -> None:
    config = _config(demo_http_url)

    listing = gateway.list_tools(config)
    call = gateway.call_tool(config, "get_weather_forecast", {"city": "Beijing", "day": "tomorrow"})

    assert listing.error == ""
    assert {tool["name"] for tool in listing.tools} >= {"get_weather_forecast", "calculate"}
    assert [r.label for r in listing.records if r.jsonrpc_id or r.label.startswith("notifications/")] == [
        "initialize",
        "notifications/initialized",
        "tools/list",
    ]
    # The HTTP layer is on the records too: status and headers of each POST, and the GET stream.
    initialize = listing.records[0]
    assert initialize.request_headers[":method"] == "POST"
    assert initialize.response_headers[":status"] == "200"
    assert "mcp-session-id" in initialize.response_headers
    get_stream = next(r for r in listing.records if r.label == "GET /mcp")
    assert get_stream.response_headers[":status"] == "200"
    assert all(r.status == "ok" for r in listing.records if r.jsonrpc_id)
    assert call.error == ""
    assert call.result is not None and call.result["structuredContent"]["city"] == "Beijing"
    assert call.session is not None and call.session.spawned is False
    assert [r.label for r in call.records] == ["tools/call"]


def test_the_modern_era_is_adopted_without_a_handshake_over_http(demo_http_url: str) -> None:
    config = _config(demo_http_url, era="modern")

    listing = gateway.list_tools(config)

    assert listing.error == ""
    assert listing.session is not None and listing.session.protocol_version == "2026-07-28"
    assert "initialize" not in [r.label for r in listing.records]


def test_an_unreachable_http_server_is_a_clear_connect_error() -> None:
    config = _config(f"http://127.0.0.1:{free_port()}/mcp")

    listing = gateway.list_tools(config)

    assert "could not connect to demo-http" in listing.error
    assert listing.tools == []
