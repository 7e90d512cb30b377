"""What the HTTP proxy tests run: this app under uvicorn in a thread (the ASGI routes as daphne
serves them), server-everything over streamable HTTP or legacy SSE, and a raw upstream of our own
that answers with exact bytes and keeps what it was sent."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import uvicorn

from servers.proxy.http import stores_pending
from tests.servers.test_third_party import node_server
from tests.support import free_port, wait_until


def _answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except OSError:
        return False
    return True


@contextmanager
def served(app: Any) -> Iterator[str]:
    """``app`` under uvicorn on a free port, in a thread; yields its base URL."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    if not wait_until(lambda: server.started, 30):
        pytest.fail("uvicorn did not start")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        # The proxy stores its records off the byte path, after a stream ends: let what the
        # test's last exchanges left be stored before the server (and the test's database) go.
        wait_until(lambda: stores_pending() == 0, 15)
        server.should_exit = True
        thread.join(10)
        wait_until(lambda: stores_pending() == 0, 5)


@contextmanager
def everything(mode: str) -> Iterator[str]:
    """server-everything in ``mode`` (streamableHttp or sse) on a free port; yields its base URL."""
    port = free_port()
    process = subprocess.Popen(
        [*node_server("server-everything"), mode],
        env={**os.environ, "PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        if not wait_until(lambda: _answers(port), 30):
            pytest.fail(f"server-everything ({mode}) did not start")
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(10)


class RawUpstream:
    """An upstream that keeps each request's body and answers with ``parts`` (each sent as its
    own write), ``status`` and ``headers``; with ``hold``, it then waits until released."""

    def __init__(self) -> None:
        self.received: list[bytes] = []
        self.headers: list[dict[str, str]] = []
        self.parts: list[bytes] = []
        self.status = 200
        self.content_type = b"text/event-stream"
        self.extra_headers: list[tuple[bytes, bytes]] = []
        self.hold = False
        self.sent_all = threading.Event()
        self.release = threading.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = bytearray()
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.received.append(bytes(body))
        # Latin-1: each byte a character, so a test sees exactly the bytes the proxy sent.
        self.headers.append({k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]})
        await send(
            {
                "type": "http.response.start",
                "status": self.status,
                "headers": [
                    (b"content-type", self.content_type),
                    (b"mcp-session-id", b"upstream-session"),
                    *self.extra_headers,
                ],
            }
        )
        for part in self.parts:
            await send({"type": "http.response.body", "body": part, "more_body": True})
        self.sent_all.set()
        if self.hold:
            await asyncio.to_thread(self.release.wait, 60)
        await send({"type": "http.response.body", "body": b"", "more_body": False})
