"""A streamable HTTP MCP server, the least of it, on a real socket, that answers some messages
late: JSON answers to requests, 202 to notifications (``NOTIFICATION_LATE`` seconds late), and a
session's listening GET answered ``GET_LATE`` seconds late with an event stream that then ends.
Each message's method, and when the GET was answered, is kept in ``seen`` with its time.

Tests use it to make an order certain that a real server leaves to chance: which of two
messages a client has in flight the server sees, or answers, first."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class LateAnswers(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: list[tuple[str, float]] = []
    get_late = 0.0
    notification_late = 0.0

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 — the base's name
        return

    def do_POST(self) -> None:
        message = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
        self.seen.append((str(message.get("method")), time.monotonic()))
        if "id" not in message:
            time.sleep(self.notification_late)
            self.send_response(202)
            self.send_header("content-length", "0")
            self.end_headers()
            return
        result: dict[str, object] = {"content": [{"type": "text", "text": "ok"}]}
        if message["method"] == "initialize":
            result = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "late-answers", "version": "1"},
            }
        elif message["method"] == "tools/list":
            result = {"tools": [{"name": "ping", "inputSchema": {"type": "object"}}]}
        body = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("mcp-session-id", "late-answers")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.seen.append(("GET", time.monotonic()))
        time.sleep(self.get_late)
        self.seen.append(("GET answered", time.monotonic()))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", "0")
        self.end_headers()

    def do_DELETE(self) -> None:
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that closes a kept-alive connection is no error here; anything else is shown."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@dataclass(frozen=True)
class Served:
    url: str  # the MCP endpoint's
    seen: list[tuple[str, float]]


@contextmanager
def late_answers(*, get_late: float = 0.0, notification_late: float = 0.0) -> Iterator[Served]:
    """Serve ``LateAnswers`` with these delays on a free port, until the block ends."""
    seen: list[tuple[str, float]] = []
    delays = {"seen": seen, "get_late": get_late, "notification_late": notification_late}
    handler = type("Handler", (LateAnswers,), delays)
    server = _Server(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Served(url=f"http://127.0.0.1:{server.server_address[1]}/mcp", seen=seen)
    finally:
        server.shutdown()
        server.server_close()
