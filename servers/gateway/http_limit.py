"""A bound on what an HTTP MCP server's responses may make the gateway read.

The MCP SDK reads a streamable-HTTP (or legacy SSE) server's responses through the HTTP client
the gateway gives it (``transports._observed_client``), which undoes the ``content-encoding``
and hands the SDK every byte. A server answering with an endless or huge body (or a small
gzip bomb) would make it hold all of that. ``BoundedTransport`` wraps the client's transport:
each response body is counted as it arrives — after decoding, as the SDK would read it — and
one that passes the tap's ``http_body_limit`` (``RESPONSE_BODY_LIMIT``) is not read further:
the operation it interrupted records the cut, with the bytes that had come over the wire, and
the SDK sees a read error. On an event stream (``text/event-stream``, the long-lived GET stream
or a POST answered as a stream) the bound holds for each event, not for the stream, which may
rightly stay open for hours; a stream sent encoded is bounded as a whole.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator
from typing import Protocol

import httpx2

from servers.gateway.capture import Tap

# How much decoded output one step of the counting decompressor makes at most.
_STEP = 1 << 16
_EVENT_ENDS = (b"\r\n\r\n", b"\n\n", b"\r\r")


class BoundedTransport(httpx2.AsyncBaseTransport):
    """``inner`` (the client's own transport), its response bodies bounded by ``tap``'s limit."""

    def __init__(self, tap: Tap, inner: httpx2.AsyncBaseTransport | None = None) -> None:
        self.tap = tap
        self.inner = inner or httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self.inner.handle_async_request(request)
        if not isinstance(response.stream, httpx2.AsyncByteStream):
            return response
        encoding = response.headers.get("content-encoding", "").strip().lower()
        events = response.headers.get("content-type", "").lower().startswith("text/event-stream")
        return httpx2.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=_BoundedBody(response.stream, self.tap, encoding=encoding, events=events),
            extensions=response.extensions,
            request=request,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


class _BoundedBody(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, tap: Tap, *, encoding: str, events: bool) -> None:
        self.inner = inner
        self.tap = tap
        self.limit = max(tap.http_body_limit, 1)
        self.encoding = encoding
        self.counter = _DecodedCounter(encoding)
        # Per event only where the events can be seen on the wire (not encoded).
        self.events = events and self.counter.identity
        self.wire = 0
        self.size = 0  # decoded bytes of the body, or of the event being read
        self._tail = b""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.inner:
            self.wire += len(chunk)
            self.size += self.counter.count(chunk)
            if self.events:
                self._event_boundaries(chunk)
            if self.size > self.limit:
                what = "one event of an HTTP event stream" if self.events else "an HTTP response body"
                self.tap.http_body_cut(limit=self.limit, wire=self.wire, encoding=self.encoding, what=what)
                raise httpx2.ReadError(f"{what} passed the limit of {self.limit:,} bytes")
            yield chunk

    def _event_boundaries(self, chunk: bytes) -> None:
        """Start counting afresh after the last event boundary (a blank line) in ``chunk``."""
        window = self._tail + chunk
        ends = [window.rfind(mark) + len(mark) for mark in _EVENT_ENDS if mark in window]
        if ends:
            self.size = len(window) - max(ends)
        self._tail = window[-3:]

    async def aclose(self) -> None:
        await self.inner.aclose()


class _Decompressor(Protocol):
    @property
    def unconsumed_tail(self) -> bytes: ...

    def decompress(self, data: bytes, /, max_length: int = 0) -> bytes: ...


class _DecodedCounter:
    """How many bytes each piece of a body decodes to, without keeping them (gzip and deflate;
    a body in another encoding is counted as it came)."""

    def __init__(self, encoding: str) -> None:
        self.identity = encoding in ("", "identity")
        self._decoder: _Decompressor | None = None
        if encoding in ("gzip", "x-gzip"):
            self._decoder = zlib.decompressobj(zlib.MAX_WBITS | 16)
        elif encoding == "deflate":
            self._decoder = zlib.decompressobj(zlib.MAX_WBITS)

    def count(self, chunk: bytes) -> int:
        if self._decoder is None:
            return len(chunk)
        total, data = 0, chunk
        try:
            while data:
                total += len(self._decoder.decompress(data, _STEP))
                data = self._decoder.unconsumed_tail
        except zlib.error:  # the client's own decoder says what is wrong; count what came
            self._decoder = None
            return len(chunk)
        return total
