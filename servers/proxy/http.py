"""The HTTP MCP proxy: ``/proxy/<key>/mcp/<server>`` (streamable HTTP) and ``/proxy/<key>/sse/<server>``
(the legacy HTTP+SSE transport) forward to a registered server's URL and record what passed.

A request goes upstream with the host's own headers (its credentials included; hop-by-hop
headers and ``X-Inspector-Session`` left out) and its body streamed as it is; the answer comes
back with the upstream's status and headers, its body streamed chunk by chunk as it arrives
(``Mcp-Session-Id`` and ``MCP-Protocol-Version`` cross both ways like any header). Nothing is
parsed on the way: a copy of each chunk is read afterwards, off the byte path, into records
(``servers.proxy.pairing``), which are stored with ``record_mcp`` in the background, batched and
bounded (``servers.proxy.storing``), the host's credentials (and the proxy key) passed as
secrets to mask.

The one change the proxy makes to traffic: the legacy transport's ``endpoint`` event, which
tells the host where to POST its messages, is rewritten to point back through the proxy
(otherwise the host would post straight to the server, unrecorded). docs/proxy-mcp.md.

Behind a load balancer a JSON-RPC request and its response may cross different web processes:
a server's request arrives on one process's stream and the host answers it in a POST that
another serves; a legacy POST is answered on the event stream another holds. Such requests wait
in the cache (``CACHES``: Redis shared by every web process in the scaled deployment), read
before the answer is passed on, so they pair in whichever process sees the answer.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import sys
import time
import weakref
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import quote, urljoin, urlsplit

import httpx2
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse, HttpResponseBase, StreamingHttpResponse

from conversations.loop.wire import SECRET_HEADER_RE, WireExchange, decode_body
from conversations.proxy.forward import HOP_BY_HOP, no_cookies
from conversations.proxy.keys import authenticate
from conversations.proxy.models import ProxyKey
from conversations.proxy.requests import header_lines, session_name
from conversations.record.connections import handed_back
from servers.models import McpServer
from servers.proxy.pairing import HOST, SERVER, TOO_DEEP, Pairer, Shared, cut, read_json
from servers.proxy.sse import Event, EventReader
from servers.proxy.storing import store as _store
from servers.proxy.storing import stores_pending as stores_pending  # what a test or a shutdown waits on
from servers.selectors import server_get

log = logging.getLogger(__name__)

CHUNK = 64 * 1024
SESSION_HEADER = "x-inspector-session"
# Not forwarded: what describes one hop (the LLM proxy's set, RFC 9110 §7.6.1), what the
# client sets anew for the upstream's connection, and the proxy's own session hint.
HOP_HEADERS = HOP_BY_HOP | {"host", "content-length", SESSION_HEADER}
# The pairers of the sessions seen lately (their requests in flight, their unfinished lines).
MAX_SCOPES = 1000
# How long a request handed to the shared store waits there for its answer. The stream that
# carried a server's request takes back what is unanswered when it ends (recorded as such); this
# bounds what a process that died mid-stream leaves behind.
SHARED_PENDING_SECONDS = 24 * 3600
_pairers: OrderedDict[tuple[object, ...], Pairer] = OrderedDict()
_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx2.AsyncClient] = (
    weakref.WeakKeyDictionary()
)


@dataclass
class Route:
    """One proxied request's key, server and what to mask in its record."""

    key: ProxyKey
    raw_key: str
    server: McpServer
    session: str | None
    secrets: tuple[str, ...]


def route_resolve(
    request: HttpRequest, *, raw_key: str, server_name: str, transport: str
) -> Route | HttpResponse:
    """The route of a proxied request, or the answer that refuses it: 401 for an unknown or revoked
    key, 404 for a server the key's user may not see or that does not speak ``transport``.

    The request's thread then waits on a stream that may stay open for hours: a connection this
    opened is handed back first (``handed_back``), not when the request ends."""
    with handed_back():
        key = authenticate(raw_key)
        if key is None:
            return HttpResponse(
                "proxy: unknown or revoked proxy key\n", status=401, content_type="text/plain"
            )
        try:
            server = server_get(user=key.user, name=server_name)
        except McpServer.DoesNotExist:
            server = None
    if server is None or server.transport != transport or not server.url:
        return HttpResponse(
            f"proxy: no {transport} MCP server named {server_name!r} for this key\n",
            status=404,
            content_type="text/plain",
        )
    secrets = [raw_key]
    lines = header_lines(request)
    for name, value in lines:
        if SECRET_HEADER_RE.search(name) and value:
            secrets.append(value)
            # "Bearer abc…": the token alone, wherever the host's traffic repeats it.
            secrets.append(value.split(" ", 1)[-1])
    hint = next((value for name, value in lines if name.lower() == SESSION_HEADER), "")
    return Route(key=key, raw_key=raw_key, server=server, session=session_name(hint), secrets=tuple(secrets))


def _client() -> httpx2.AsyncClient:
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None:
        timeout = httpx2.Timeout(connect=10.0, read=None, write=None, pool=10.0)
        # Shared by every key the process serves: it keeps no server's cookie (``forward.no_cookies``).
        client = httpx2.AsyncClient(
            timeout=timeout, follow_redirects=False, trust_env=False, cookies=no_cookies()
        )
        _clients[loop] = client
    return client


class CachePending:
    """The requests of one proxied session that wait for an answer any web process may see, in
    Django's cache (``pairing.SharedPending``). ``pop`` is a get and a delete: the cache's delete
    says whether it removed the entry, so of two processes popping one key one gets it."""

    def __init__(self, scope: tuple[object, ...]) -> None:
        self.scope = repr(scope)

    def _name(self, key: str) -> str:
        # A JSON-RPC id is the host's or the server's text, of any length: hashed into the name.
        digest = hashlib.sha256(f"{self.scope}\n{key}".encode("utf-8", "surrogatepass")).hexdigest()
        return f"proxy-pending:{digest}"

    def put(self, key: str, entry: Shared) -> None:
        cache.set(self._name(key), entry, timeout=SHARED_PENDING_SECONDS)

    def pop(self, key: str) -> Shared | None:
        name = self._name(key)
        found = cache.get(name)
        if found is None or not cache.delete(name):
            return None
        record, sent_at = found
        return record, sent_at


def _pairer(scope: tuple[object, ...]) -> Pairer:
    pairer = _pairers.get(scope)
    if pairer is None:
        pairer = Pairer(
            line_limit=settings.MCP_STDOUT_LINE_LIMIT,
            body_limit=settings.EXCHANGE_BODY_LIMIT,
            not_json=("request (not JSON)", "event (not JSON)"),
            shared=CachePending(scope),
        )
        _pairers[scope] = pairer
        while len(_pairers) > MAX_SCOPES:
            _pairers.popitem(last=False)
    _pairers.move_to_end(scope)
    return pairer


def _wire(text: str) -> bytes:
    """A header as its bytes: the ASGI server handed them over decoded as Latin-1 (ASGI
    specification, and Django keeps them so), so Latin-1 gives back exactly what the host sent —
    bytes that are not UTF-8 and control characters included."""
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError:  # not from the wire (set by a middleware): its UTF-8
        return text.encode("utf-8", "surrogatepass")


def _outgoing_headers(request: HttpRequest) -> list[tuple[bytes, bytes]]:
    """The host's headers as it sent them, as bytes (a value is forwarded as it is, whatever its
    bytes), less the hop-by-hop ones and the proxy's own."""
    headers = [
        (_wire(name), _wire(value))
        for name, value in header_lines(request)
        if name.lower() not in HOP_HEADERS
    ]
    length = request.headers.get("content-length")
    if length:
        headers.append((b"content-length", _wire(length)))
    return headers


def _stored(headers: Sequence[tuple[bytes, bytes]]) -> dict[str, str]:
    """Headers as the record keeps them: each name and value as text, every byte kept
    (``decode_body``: bytes that are not UTF-8 become escapes the store keeps recoverable)."""
    return {decode_body(name).lower(): decode_body(value) for name, value in headers}


def _incoming_headers(response: httpx2.Response) -> list[tuple[str, str]]:
    """The server's header lines for the host, in order, a repeated one as each of its lines, their
    bytes unchanged (each byte one Latin-1 character, as ASGI and Django write a header's text)."""
    return [
        (name.decode("latin-1"), value.decode("latin-1"))
        for name, value in response.headers.raw
        if name.decode("latin-1").lower() not in HOP_HEADERS
    ]


@dataclass
class Answer:
    """The server's answer as the host gets it: its status, every header line it sent (less the
    hop-by-hop ones) in order, and its body as it arrives (recorded as it passes)."""

    status: int
    headers: list[tuple[str, str]]
    body: AsyncGenerator[bytes, None]


def as_response(answer: Answer | HttpResponse) -> HttpResponseBase:
    """``answer`` as a Django response, for a request Django itself serves (WSGI, the test client;
    the web process sends answers as they are: ``inspector.proxy_front``). Django keeps one value
    per header name: of a repeated header, the last line."""
    if isinstance(answer, HttpResponse):
        return answer
    response = StreamingHttpResponse(answer.body, status=answer.status)
    for name, value in answer.headers:
        response.headers[name] = value
    return response


class _Body:
    """The host's request body, streamed upstream; its first ``limit`` bytes kept for the record."""

    def __init__(self, request: HttpRequest, limit: int) -> None:
        self.request = request
        self.limit = limit
        self.kept = bytearray()
        self.total = 0
        self.read_ahead = False

    def _next(self) -> bytes:
        chunk = self.request.read(CHUNK)
        self.total += len(chunk)
        room = self.limit - len(self.kept)
        if room > 0:
            self.kept += chunk[:room]
        return chunk

    def start(self) -> bool:
        """Read the body ahead when its length is known and it fits in the record, so that its
        record is made (and a response in it paired) before it is passed on: once the server has
        it, the server may answer on another stream at once. Django's ASGI handler has read the
        body before calling the view, so this waits on nothing. False for a larger body or one of
        unknown length: it is streamed and recorded once sent."""
        length = self.request.headers.get("content-length", "")
        if not length.isdigit() or int(length) > self.limit:
            return False
        while self._next():
            pass
        self.read_ahead = True
        return True

    async def chunks(self) -> AsyncIterator[bytes]:
        if self.read_ahead:
            view = memoryview(self.kept)
            for start in range(0, len(view), CHUNK):
                yield bytes(view[start : start + CHUNK])
            return
        while chunk := self._next():
            yield chunk

    def rest(self) -> None:
        """Read what was not sent (the upstream could not be reached), for the record."""
        if not self.read_ahead:
            while self._next():
                pass


async def forward(
    request: HttpRequest,
    route: Route,
    *,
    url: str,
    scope: tuple[object, ...],
    rewrite_endpoint: Callable[[str], str] | None = None,
    answered_on_stream: bool = False,
) -> Answer | HttpResponse:
    """Forward ``request`` to ``url`` and stream the answer back, recording both (an
    ``HttpResponse``: the proxy's own answer, the server not reached).

    ``answered_on_stream``: the request's JSON-RPC response comes on an event stream (the legacy
    transport's), which another web process may hold: the request waits for it in the shared
    store."""
    body = _Body(request, _kept_limit())
    method = request.method or "GET"
    has_body = method not in ("GET", "HEAD", "DELETE") or bool(request.headers.get("content-length"))
    read_ahead = body.start() if has_body else True
    outgoing = _outgoing_headers(request)
    upstream_request = _client().build_request(
        method, url, headers=outgoing, content=body.chunks() if has_body else None
    )
    # httpx adds defaults (its user agent, accept-encoding…): the server gets the host's own
    # (the framing headers for this hop aside).
    sent = {name.lower() for name, _ in outgoing} | {b"host", b"content-length", b"transfer-encoding"}
    for name in list(upstream_request.headers.keys()):
        if _wire(name.lower()) not in sent:
            del upstream_request.headers[name]
    path = urlsplit(url).path or "/"
    stored_headers = {":method": method, ":path": path, **_stored(outgoing)}
    pairer = _pairer(scope)
    started = time.monotonic()
    record = _request_record(pairer, body, method, path, stored_headers) if read_ahead else None
    handed = pairer.hand_off(record) if record is not None and answered_on_stream else None
    # Not a request waiting for its JSON-RPC response: finished by its HTTP answer.
    awaits_http = record is not None and handed is None and not pairer.pending(record)
    try:
        upstream = await _client().send(upstream_request, stream=True)
    except httpx2.HTTPError as exc:
        return _unreachable(route, pairer, body, method, path, stored_headers, exc, started, record, handed)
    if record is None:
        record = _request_record(pairer, body, method, path, stored_headers)
        awaits_http = not pairer.pending(record)
    record.response_headers = {":status": str(upstream.status_code), **_stored(upstream.headers.raw)}
    event_stream = upstream.headers.get("content-type", "").startswith("text/event-stream")
    stream = _relay(
        route,
        pairer,
        record,
        upstream,
        event_stream=event_stream,
        rewrite_endpoint=rewrite_endpoint,
        awaits_http=awaits_http,
        handed=handed,
    )
    return Answer(status=upstream.status_code, headers=_incoming_headers(upstream), body=stream)


def _kept_limit() -> int:
    """The most bytes of a body kept for the record: EXCHANGE_BODY_LIMIT, less room for the mark
    that says how much more there was (so the recorder does not cut the mark off)."""
    return max(1, settings.EXCHANGE_BODY_LIMIT - 200)


def _request_record(
    pairer: Pairer, body: _Body, method: str, path: str, headers: dict[str, str]
) -> WireExchange:
    kept = bytes(body.kept)
    whole = body.total == len(kept)
    value, why = read_json(kept) if body.total and whole else (None, "")
    if body.total and whole and not why and isinstance(value, dict | list):
        record = pairer.message(HOST, kept)
    elif body.total:
        # Not a message (or too large to read as one): recorded as the host sent it, with the answer.
        text = cut(decode_body(kept), pairer.body_limit)
        if not whole:
            text += f"\n… [cut: {body.total:,} bytes in all; the first {len(kept):,} are kept]"
        label = "not JSON-RPC" if whole else f"{method} {path} (cut)"
        record = WireExchange(
            channel="mcp",
            label=label,
            started_at=datetime.now(UTC),
            request_body=text,
            error=why if why == TOO_DEEP else "",
        )
    else:
        record = WireExchange(channel="mcp", label=f"{method} {path}", started_at=datetime.now(UTC))
    record.request_headers = headers
    # A record that is not a request waiting for its JSON-RPC response (a notification, a
    # response of the host's, a body that is no message, a GET, a DELETE) is finished by its HTTP
    # answer: held until then.
    pairer.finished[:] = [done for done in pairer.finished if done is not record]
    return record


def _unreachable(
    route: Route,
    pairer: Pairer,
    body: _Body,
    method: str,
    path: str,
    headers: dict[str, str],
    exc: httpx2.HTTPError,
    started: float,
    record: WireExchange | None,
    handed: str | None,
) -> HttpResponse:
    why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    message = f"proxy: could not reach the MCP server {route.server.name!r} ({why})"
    body.rest()
    if record is None:
        record = _request_record(pairer, body, method, path, headers)
    if handed is not None:
        pairer.take_back(handed, record)
    if pairer.pending(record):
        pairer.settle(record, body="", error=message)
    else:
        pairer.finished.append(record)
        record.status, record.error = "error", message
        record.duration_ms = (time.monotonic() - started) * 1000
    _store(route, pairer.take())
    return HttpResponse(message + "\n", status=502, content_type="text/plain")


async def _relay(
    route: Route,
    pairer: Pairer,
    record: WireExchange,
    upstream: httpx2.Response,
    *,
    event_stream: bool,
    rewrite_endpoint: Callable[[str], str] | None,
    awaits_http: bool,
    handed: str | None,
) -> AsyncGenerator[bytes, None]:
    """The upstream's body as it arrives; recorded as it streams (events) or once it ends."""
    limit = _kept_limit()
    events = EventReader(limit) if event_stream else None
    kept, total = bytearray(), 0
    carried: list[tuple[str, WireExchange]] = []  # the server's requests this stream brought
    held = EndpointRewrite(rewrite_endpoint) if rewrite_endpoint is not None else None
    ended = False
    stopped = broke = ""
    try:
        async for chunk in upstream.aiter_raw():
            total += len(chunk)
            if len(kept) < limit:
                kept += chunk[: limit - len(kept)]
            if held is not None:
                released = held.feed(chunk)
                if released is None and len(held.held) > limit:
                    # A server that never names its endpoint must not fill the proxy's memory:
                    # what it sent is passed on as it came, and the stream ends with it.
                    stopped = (
                        f"the server sent {len(held.held):,} bytes before its endpoint event, more than "
                        "a record keeps (EXCHANGE_BODY_LIMIT): the proxy stopped waiting and ended the stream"
                    )
                    chunk, held = bytes(held.held), None
                elif released is None:
                    continue
                else:
                    (chunk, endpoint), held = released, None
                    # The session's POSTs are answered on this stream: pair them in one place.
                    pairer = _pairer(sse_scope(route, endpoint))
            yield chunk
            if events is not None:
                for event in events.feed(chunk):
                    carried.extend(_event(route, pairer, event))
            if stopped:
                break
        ended = True
    except httpx2.HTTPError as exc:
        # The server broke off (the host's connection is then ended: inspector.proxy_front).
        broke = (
            f"the server broke off its answer: {type(exc).__name__}: {exc}"
            if str(exc)
            else type(exc).__name__
        )
        raise
    finally:
        await upstream.aclose()
        _finish(
            route,
            pairer,
            record,
            upstream,
            bytes(kept),
            total,
            events,
            ended=ended,
            awaits_http=awaits_http,
            handed=handed,
            carried=carried,
            stopped=stopped or broke,
        )


class EndpointRewrite:
    """The start of a legacy SSE stream, held back until its ``endpoint`` event has fully arrived
    and then passed on with that event pointed back through the proxy.

    Each chunk is read once, as it comes, not the whole held start again at every chunk. ``held``
    is what the server sent before its endpoint event; the relay bounds it (a record's limit)."""

    def __init__(self, rewrite: Callable[[str], str]) -> None:
        self.rewrite = rewrite
        self.held = bytearray()
        self.events = EventReader(sys.maxsize)  # an endpoint event is read whole, however long

    def feed(self, chunk: bytes) -> tuple[bytes, str] | None:
        """What is held, ``chunk`` included, with the endpoint event rewritten, and the endpoint
        the server named; None while that event has not fully arrived."""
        self.held += chunk
        for event in self.events.feed(chunk):
            if event.name == "endpoint":
                # Where the reader found it, not a search for its bytes: an earlier event may
                # hold the same bytes inside its data.
                start = event.start
                original = event.data.decode("utf-8", "replace")
                replaced = f"event: endpoint\ndata: {self.rewrite(original)}\n\n".encode()
                end = start + len(event.raw)
                return b"".join((self.held[:start], replaced, self.held[end:])), original
        return None


def _event(route: Route, pairer: Pairer, event: Event) -> list[tuple[str, WireExchange]]:
    """Record one event of the server's; a request of the server's is handed to the shared store
    (the host answers it in a POST of its own, which any web process may serve) and returned
    with its key there."""
    if event.name not in ("", "message") or not event.data.strip():
        return []
    message = pairer.message(SERVER, event.data)
    handed = pairer.hand_off(message) if pairer.pending(message) else None
    _store(route, pairer.take())
    return [(handed, message)] if handed is not None else []


def _finish(
    route: Route,
    pairer: Pairer,
    record: WireExchange,
    upstream: httpx2.Response,
    kept: bytes,
    total: int,
    events: EventReader | None,
    *,
    ended: bool,
    awaits_http: bool,
    handed: str | None,
    carried: Sequence[tuple[str, WireExchange]],
    stopped: str = "",
) -> None:
    status = upstream.status_code
    for key, request in carried:
        # Unanswered (else an answer, in whichever process, took it): recorded as such now.
        if pairer.take_back(key, request):
            pairer.settle(
                request,
                body="",
                error="the stream that carried this request ended before the host answered it",
                status="no response",
            )
    if events is not None:
        for event, size in events.cut:
            pairer.message(SERVER, event.data, cut_at=size)
    text = decode_body(kept)
    if total > len(kept):
        text += f"\n… [cut: {total:,} bytes in all; the first {len(kept):,} are kept]"
    note = stopped or ("" if ended else "the host went away before the answer ended; this is what had passed")
    json_answer = upstream.headers.get("content-type", "").startswith("application/json")
    # The legacy transport answers a POST "202 Accepted" and sends the response on its stream.
    later = events is None and status == 202
    if handed is not None and not (later and ended):
        # Its response will not come on the stream: finished here, unless it came already.
        pairer.take_back(handed, record)
    if not awaits_http:
        if not pairer.pending(record):
            _store(route, pairer.take())  # answered on its stream, already recorded
            return
        if events is None and json_answer and kept and status < 400 and total == len(kept) and ended:
            pairer.message(SERVER, kept)  # the response, read as a message (it pairs with the request)
        # Its response comes later only on the legacy transport's stream (a 202 here); else the
        # answer has ended without it, and the request is recorded with none.
        if pairer.pending(record) and (not ended or not later):
            if status >= 400:
                error = f"HTTP {status}"
            elif total > len(kept):
                error = "the answer was too large to keep whole (EXCHANGE_BODY_LIMIT): recorded cut"
            elif events is not None and ended:
                error = "the event stream ended with no JSON-RPC response to this request"
            else:
                error = "" if not ended else "no JSON-RPC response in the answer"
            pairer.settle(
                record,
                body=text if events is None else "",
                error="; ".join(filter(None, [error, note])),
                status="no response" if ended and status < 400 and events is not None else "error",
            )
    else:
        # A notification or a response of the host's, a body that is no message, a GET stream, a
        # DELETE: completed by its HTTP answer.
        if not record.status or record.status == "ok":
            record.status = "ok" if status < 400 else "error"
        record.error = "; ".join(
            filter(None, [record.error, f"HTTP {status}" if status >= 400 else "", note])
        )
        if events is None and not record.response_body:
            record.response_body = text
        if record.label.startswith(("GET ", "DELETE ")):
            record.direction = "client"
        pairer.finished.append(record)
    _store(route, pairer.take())


def _endpoint_rewriter(raw_key: str, server_name: str) -> Callable[[str], str]:
    def rewrite(endpoint: str) -> str:
        return f"/proxy/{raw_key}/sse/{quote(server_name)}/messages?to={quote(endpoint, safe='')}"

    return rewrite


def same_origin(base: str, target: str) -> str | None:
    """``target`` resolved against ``base`` when it stays on ``base``'s origin, else None (the
    proxy posts only to the server it was registered for)."""
    resolved = urljoin(base, target)
    a, b = urlsplit(base), urlsplit(resolved)
    return resolved if (a.scheme, a.netloc) == (b.scheme, b.netloc) else None


async def _streamable(request: HttpRequest, route: Route) -> Answer | HttpResponse:
    scope = (route.key.pk, route.server.name, request.headers.get("mcp-session-id", ""))
    return await forward(request, route, url=route.server.url, scope=scope)


async def _sse_stream(request: HttpRequest, route: Route) -> Answer | HttpResponse:
    scope = (route.key.pk, route.server.name, "sse-stream", id(request))
    return await forward(
        request,
        route,
        url=route.server.url,
        scope=scope,
        rewrite_endpoint=_endpoint_rewriter(route.raw_key, route.server.name),
    )


async def _sse_post(request: HttpRequest, route: Route, to: str) -> Answer | HttpResponse:
    """A legacy session's POST, to the endpoint the stream named (on the server's origin only)."""
    target = same_origin(route.server.url, to) if to else None
    if target is None:
        return HttpResponse(
            "proxy: the message endpoint must be the one the server's stream named, on its origin\n",
            status=400,
            content_type="text/plain",
        )
    return await forward(request, route, url=target, scope=sse_scope(route, to), answered_on_stream=True)


async def forward_streamable(request: HttpRequest, route: Route) -> HttpResponseBase:
    return as_response(await _streamable(request, route))


async def forward_sse_stream(request: HttpRequest, route: Route) -> HttpResponseBase:
    return as_response(await _sse_stream(request, route))


async def forward_sse_post(request: HttpRequest, route: Route, to: str) -> HttpResponseBase:
    return as_response(await _sse_post(request, route, to))


async def _sse_messages(request: HttpRequest, route: Route) -> Answer | HttpResponse:
    return await _sse_post(request, route, request.GET.get("to", ""))


# Each route of servers/proxy/urls.py: the transport its server must speak and what forwards it.
ROUTES: dict[str, tuple[str, Callable[[HttpRequest, Route], Awaitable[Answer | HttpResponse]]]] = {
    "mcp": ("http", _streamable),
    "sse": ("sse", _sse_stream),
    "sse/messages": ("sse", _sse_messages),
}


async def serve(request: HttpRequest, *, raw_key: str, server_name: str, kind: str) -> Answer | HttpResponse:
    """What the route ``kind`` (a key of ``ROUTES``) answers ``request`` with, as the views of
    ``servers.proxy.views`` do; the web process serves these routes this way, ahead of Django's
    middleware (``inspector.proxy_front``), so the answer is sent as the server gave it."""
    transport, forwarding = ROUTES[kind]
    route = await sync_to_async(route_resolve)(
        request, raw_key=raw_key, server_name=server_name, transport=transport
    )
    if isinstance(route, HttpResponse):
        return route
    return await forwarding(request, route)


def sse_scope(route: Route, to: str) -> tuple[object, ...]:
    """A legacy session's POSTs are answered on its GET stream: both use the endpoint's scope."""
    return (route.key.pk, route.server.name, "sse-endpoint", to)
