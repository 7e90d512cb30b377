"""MCP transports: one small class each behind one contract, registered in ``TRANSPORTS``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, ClassVar, Protocol, TextIO

import httpx2
from mcp import StdioServerParameters, stdio_client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

from servers.gateway.capture import Tap
from servers.gateway.config import ServerConfig, resolve_references

Streams = tuple[Any, Any]


class Transport(Protocol):
    """Opens the SDK transport for a server.

    ``open`` returns an async context manager yielding the SDK's ``(read_stream, write_stream)``;
    the gateway wraps those streams to capture every message. ``errlog`` is a real file that
    receives a subprocess's stderr (a Celery worker's ``sys.stderr`` has no file descriptor).
    HTTP transports also report each request's headers and each response's status and headers
    to ``tap``.

    Raises (from ``open``):
        ConfigError: an ``${VAR}`` reference in env or headers is not set.
    """

    key: ClassVar[str]
    label: ClassVar[str]
    spawns_process: ClassVar[bool]

    def open(self, config: ServerConfig, errlog: TextIO, tap: Tap) -> AbstractAsyncContextManager[Streams]: ...


class StdioTransport(Transport):
    key = "stdio"
    label = "stdio (spawns a command on the worker)"
    spawns_process = True

    def open(self, config: ServerConfig, errlog: TextIO, tap: Tap) -> AbstractAsyncContextManager[Streams]:
        params = StdioServerParameters(
            command=config.command,
            args=list(config.args),
            env={key: resolve_references(value) for key, value in config.env} or None,
            cwd=config.cwd or None,
            # A server that writes invalid UTF-8 must not wedge the session.
            encoding_error_handler="replace",
        )
        return stdio_client(params, errlog=errlog)


def _http_headers(config: ServerConfig) -> dict[str, str]:
    return {key: resolve_references(value) for key, value in config.headers}


def _observed_client(tap: Tap, **kwargs: Any) -> httpx2.AsyncClient:
    """An HTTP client whose event hooks report every request and response to ``tap``."""
    tap.http = True
    records: dict[int, Any] = {}

    async def on_request(request: httpx2.Request) -> None:
        content = request.content if request.method != "GET" else b""
        records[id(request)] = tap.http_request(request.method, request.url.path, request.headers, content)

    async def on_response(response: httpx2.Response) -> None:
        record = records.pop(id(response.request), None)
        tap.http_response(record, response.status_code, response.headers)

    return httpx2.AsyncClient(event_hooks={"request": [on_request], "response": [on_response]}, **kwargs)


class StreamableHttpTransport(Transport):
    key = "http"
    label = "streamable HTTP"
    spawns_process = False

    def open(self, config: ServerConfig, errlog: TextIO, tap: Tap) -> AbstractAsyncContextManager[Streams]:
        return self._open(config, tap)

    @asynccontextmanager
    async def _open(self, config: ServerConfig, tap: Tap) -> AsyncIterator[Streams]:
        timeout = httpx2.Timeout(config.call_timeout, read=config.call_timeout + 5)
        async with _observed_client(tap, headers=_http_headers(config), timeout=timeout) as http_client:
            async with streamable_http_client(config.url, http_client=http_client) as streams:
                yield streams[0], streams[1]


class SseTransport(Transport):
    key = "sse"
    label = "HTTP+SSE (legacy, deprecated)"
    spawns_process = False

    def open(self, config: ServerConfig, errlog: TextIO, tap: Tap) -> AbstractAsyncContextManager[Streams]:
        def factory(
            headers: dict[str, str] | None = None,
            timeout: httpx2.Timeout | None = None,
            auth: httpx2.Auth | None = None,
        ) -> httpx2.AsyncClient:
            return _observed_client(tap, headers=headers, timeout=timeout, auth=auth)

        return sse_client(
            config.url, headers=_http_headers(config), timeout=config.call_timeout, httpx_client_factory=factory
        )


TRANSPORTS: dict[str, Transport] = {
    transport.key: transport for transport in (StdioTransport(), StreamableHttpTransport(), SseTransport())
}
