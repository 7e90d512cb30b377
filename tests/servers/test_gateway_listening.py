"""A streamable HTTP session's listening stream comes before its first operation.

After the ``initialize`` handshake the MCP SDK opens the session's listening stream (a GET) in a
task of its own, beside whatever the client sends next. The gateway's first operation waits for
that GET's answer (at most ``pool.LISTEN_SECONDS``), so a server sees the session's requests in
the order the client made them. Without it a busy host could send the first ``tools/call`` before
the GET: the official conformance suite's ``sse-retry`` scenario then took the GET for the
client's reconnection and failed it as 52 ms too early. A real HTTP server on a real socket that
answers its GET late makes the order certain here.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from servers import gateway
from servers.gateway.config import ServerConfig

# How long the server holds its answer to the GET: far longer than a client takes to send its
# next request, far shorter than ``LISTEN_SECONDS``.
GET_LATE = 0.3


class _Server(BaseHTTPRequestHandler):
    """Streamable HTTP, the least of it: JSON answers to requests, 202 to notifications, and a
    GET answered ``GET_LATE`` seconds late with an event stream that then ends."""

    protocol_version = "HTTP/1.1"
    seen: list[tuple[str, float]] = []

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 — the base's name
        return

    def do_POST(self) -> None:
        message = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
        self.seen.append((str(message.get("method")), time.monotonic()))
        if "id" not in message:
            self.send_response(202)
            self.send_header("content-length", "0")
            self.end_headers()
            return
        result: dict[str, object] = {"content": [{"type": "text", "text": "ok"}]}
        if message["method"] == "initialize":
            result = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "late-listener", "version": "1"},
            }
        elif message["method"] == "tools/list":
            result = {"tools": [{"name": "ping", "inputSchema": {"type": "object"}}]}
        body = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("mcp-session-id", "late-listener")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.seen.append(("GET", time.monotonic()))
        time.sleep(GET_LATE)
        self.seen.append(("GET answered", time.monotonic()))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", "0")
        self.end_headers()

    def do_DELETE(self) -> None:
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()


@pytest.fixture
def server_url() -> Iterator[str]:
    _Server.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Server)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/mcp"
    finally:
        gateway.close_all()
        server.shutdown()
        server.server_close()


def test_the_first_operation_of_a_session_waits_for_its_listening_streams_answer(server_url: str) -> None:
    config = ServerConfig(
        server_id=9700, name="late-listener", transport="http", url=server_url, call_timeout=10
    )

    listing = gateway.list_tools(config)

    assert listing.error == "", listing.error
    order = [name for name, _ in _Server.seen]
    assert order.index("GET answered") < order.index("tools/list"), order
