"""P13's floors: the least any relay costs on this host, measured in the same run as the product.

A proxy is one more hop: on a 2-core host where the direct path already keeps both cores busy
(the host, the upstream), any relay between them costs something. These relays do nothing but
pass bytes on, so the product's overhead can be read against them (as P1 reads the product
against its bare loop):

* ``application`` — a bare ASGI app under the same daphne as the product, with the same HTTP
  client (``httpx2``): it reads the request, sends it to ``BENCH_P13_UPSTREAM`` plus the path
  under ``/relay``, and streams the answer's bytes back in the messages they arrived in. No key,
  no capture, no record, no security headers. (``P13.llm``'s floor.)
* ``python -m bench.p13_floors tcp PORT HOST:PORT`` — an asyncio TCP relay: each connection
  piped to a connection of its own to the upstream, bytes both ways, no HTTP parsed at all. The
  least a relay in Python can cost here (P13.llm measures ``socat``, the same relay in C, beside
  it where the host has it).
* ``python -m bench.p13_floors stdio -- COMMAND [ARGS...]`` — a stdio relay: the command
  started with pipes, a thread per direction copying bytes as they come, nothing recorded.
  (``P13.mcp``'s floor.)

And the upstream both P13 halves' model calls go to, in a process of its own as a real upstream
is (in the client's process it would share the client's interpreter lock, which slowed the
direct path to half its speed and made a relay look faster than no relay, decision 0580):

* ``python -m bench.p13_floors upstream SIZE [SIZE...]`` — a stdlib HTTP server on a free port
  of 127.0.0.1 (it prints ``READY PORT`` once each reply is made): a POST to ``/{size}/...``
  answers with an OpenAI Chat Completions event stream whose reply is ``size`` characters
  (``bench.fake_model.stream_body``), ``BLOCK`` bytes to a write; another path is a 404.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx2

from bench.fake_model import stream_body

CHUNK = 65_536
_HOP = {b"connection", b"transfer-encoding", b"keep-alive"}
_DROPPED = {b"host", b"content-length", *_HOP}
_clients: dict[asyncio.AbstractEventLoop, httpx2.AsyncClient] = {}


async def application(
    scope: dict[str, Any],
    receive: Callable[[], Awaitable[Mapping[str, Any]]],
    send: Callable[[Mapping[str, Any]], Awaitable[None]],
) -> None:
    if scope["type"] != "http":
        return
    body = b""
    more = True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    if scope["method"] != "POST" or not scope["path"].startswith("/relay/"):
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})
        return
    loop = asyncio.get_running_loop()
    client = _clients.get(loop) or _clients.setdefault(loop, httpx2.AsyncClient(timeout=120))
    url = os.environ["BENCH_P13_UPSTREAM"] + scope["path"].removeprefix("/relay")
    headers = [(name, value) for name, value in scope["headers"] if name.lower() not in _DROPPED]
    response = await client.send(
        client.build_request("POST", url, content=body, headers=headers), stream=True
    )
    try:
        passed = [(name, value) for name, value in response.headers.raw if name.lower() not in _HOP]
        await send({"type": "http.response.start", "status": response.status_code, "headers": passed})
        async for chunk in response.aiter_raw():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    finally:
        await response.aclose()


async def _tcp(port: int, upstream: str) -> None:
    host, _, upstream_port = upstream.rpartition(":")

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(CHUNK):
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(host, int(upstream_port))
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer), return_exceptions=True)

    server = await asyncio.start_server(connection, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def _stdio(command: list[str]) -> int:
    server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert server.stdin is not None and server.stdout is not None and server.stderr is not None

    def copy(source: int, target: int, close: Callable[[], None] | None) -> None:
        try:
            while data := os.read(source, CHUNK):
                view = memoryview(data)
                while view:
                    view = view[os.write(target, view) :]
        except OSError:
            pass
        if close is not None:
            close()

    threads = [
        threading.Thread(target=copy, args=(0, server.stdin.fileno(), server.stdin.close), daemon=True),
        threading.Thread(target=copy, args=(server.stdout.fileno(), 1, None)),
        threading.Thread(target=copy, args=(server.stderr.fileno(), 2, None)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads[1:]:
        thread.join()
    return server.wait()


BLOCK = 16_384


class _UpstreamHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Upstream

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 — the base class's name
        return

    def do_POST(self) -> None:  # noqa: N802 — the stdlib's handler name
        self.rfile.read(int(self.headers.get("content-length") or 0))
        body = self.server.bodies.get(self.path.split("/")[1])
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        for start in range(0, len(body), BLOCK):
            self.wfile.write(body[start : start + BLOCK])


class _Upstream(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024

    def __init__(self, sizes: list[int]) -> None:
        super().__init__(("127.0.0.1", 0), _UpstreamHandler)
        # Made before the first call, so that no call's time includes making its reply.
        self.bodies = {str(size): stream_body("text", size) for size in sizes}


def _serve_upstream(sizes: list[int]) -> int:
    server = _Upstream(sizes)
    sys.stdout.write(f"READY {server.server_address[1]}\n")
    sys.stdout.flush()
    server.serve_forever()
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["upstream"] and argv[1:] and all(size.isdigit() for size in argv[1:]):
        return _serve_upstream([int(size) for size in argv[1:]])
    if argv[:1] == ["tcp"]:
        asyncio.run(_tcp(int(argv[1]), argv[2]))
        return 0
    if argv[:2] == ["stdio", "--"]:
        return _stdio(argv[2:])
    sys.stderr.write(
        "usage: python -m bench.p13_floors tcp PORT HOST:PORT | stdio -- COMMAND [ARGS...] | upstream SIZE...\n"
    )
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
