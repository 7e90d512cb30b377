"""The LLM proxy's routes as a plain ASGI application, ahead of Django's (``inspector.asgi``).

A proxied model call needs none of what Django's middleware chain gives a page — no session, no
CSRF token, no login (the key in the path authenticates) — and paid for it on every call: the
request through the chain in a thread of its own and back, before the first byte could go out.
Here a call matching one of the routes of ``conversations.proxy.urls`` has its key checked
(``llm.key_for``: from the process's recent keys, else in a thread) and is passed on with
``forward.pass_on``, its body streamed to the upstream as the ASGI server hands it over; each chunk of the answer is sent to the host as
it arrives, and the exchange recorded after, off the event loop, exactly as the Django views do.
Every other request goes on to Django unchanged.

What the chain would have added is added here too: a ``Host`` outside ``ALLOWED_HOSTS`` gets a
400, plain HTTP a redirect when ``SECURE_SSL_REDIRECT`` is set, and every answer the security
headers the app's other responses carry (``X-Content-Type-Options``, ``Referrer-Policy``,
``Cross-Origin-Opener-Policy``, ``X-Frame-Options``, HSTS over HTTPS, the
Content-Security-Policy), each only where the upstream did not send its own.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import tempfile
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from typing import Any

import httpx2
from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpResponse
from django.http.request import split_domain_port, validate_host

from conversations.proxy import forward, llm
from inspector import security
from servers.proxy import http as mcp

# As Django's ASGIHandler takes them (django-stubs).
Scope = dict[str, Any]
Receive = Callable[[], Awaitable[Mapping[str, Any]]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]
Asgi = Callable[[Scope, Receive, Send], Awaitable[None]]

# As conversations/proxy/urls.py, mounted at proxy/<str:key>/ (a key is any run of non-slashes).
ROUTES: tuple[tuple[re.Pattern[str], llm.Format], ...] = (
    (re.compile(r"^/proxy/(?P<key>[^/]+)/openai/v1/(?P<path>chat/completions)$"), llm.OPENAI_CHAT),
    (re.compile(r"^/proxy/(?P<key>[^/]+)/openai/v1/(?P<path>responses)$"), llm.OPENAI_RESPONSES),
    (re.compile(r"^/proxy/(?P<key>[^/]+)/anthropic/(?P<path>v1/messages)$"), llm.ANTHROPIC),
    (
        re.compile(
            r"^/proxy/(?P<key>[^/]+)/gemini/(?P<path>(?:v1beta|v1)/models/[^/:]+:"
            r"(?:generateContent|streamGenerateContent))$"
        ),
        llm.GEMINI,
    ),
)


# As servers/proxy/urls.py, mounted at proxy/<str:key>/: the MCP proxy's routes (http.ROUTES).
MCP_ROUTE = re.compile(r"^/proxy/(?P<key>[^/]+)/(?P<kind>mcp|sse)/(?P<server>[^/]+)(?P<messages>/messages)?$")


def _proxy_path(scope: Scope) -> str | None:
    """The request's path under the app's root when it is a proxy route's, else None."""
    if scope["type"] != "http":
        return None
    path: str = scope.get("path", "")
    root: str = scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root) :]
    return path if path.startswith("/proxy/") else None


def mcp_route(scope: Scope) -> tuple[str, str, str] | None:
    """(the raw key, the server's name, the route: a key of ``http.ROUTES``) of an MCP proxy
    request, else None."""
    path = _proxy_path(scope)
    found = MCP_ROUTE.match(path) if path is not None else None
    if found is None:
        return None
    kind = found["kind"] + (found["messages"] or "")
    return (found["key"], found["server"], kind) if kind in mcp.ROUTES else None


def route(scope: Scope) -> tuple[str, llm.Format, str] | None:
    """(the raw key, the format, the path under the upstream) of an LLM proxy call, else None."""
    path = _proxy_path(scope)
    if path is None:
        return None
    for pattern, form in ROUTES:
        found = pattern.match(path)
        if found:
            return found["key"], form, found["path"]
    return None


def with_llm_proxy(django: Asgi) -> Asgi:
    """``django`` with the LLM and MCP proxies' routes answered in front of it."""

    async def application(scope: Scope, receive: Receive, send: Send) -> None:
        found = route(scope)
        if found is not None:
            await _call(scope, receive, send, *found)
            return
        to_mcp = mcp_route(scope)
        if to_mcp is not None:
            await _mcp_call(scope, receive, send, *to_mcp)
            return
        await django(scope, receive, send)

    return application


class _Request:
    """What the routes read of an ASGI request."""

    def __init__(self, scope: Scope) -> None:
        self.method: str = scope.get("method", "")
        self.query = bytes(scope.get("query_string", b"")).decode("latin1")
        self.items = [
            (name.decode("latin1"), value.decode("latin1")) for name, value in scope.get("headers", [])
        ]
        joined: dict[str, str] = {}
        for name, value in self.items:
            lower = name.lower()
            # As Django's request.headers: a repeated header reads as its values joined.
            joined[lower] = f"{joined[lower]},{value}" if lower in joined else value
        self.headers = joined
        self.secure = _is_secure(scope, joined)
        server = scope.get("server") or ("", None)
        # As Django's get_host(): the Host header, else the address the connection came to.
        self.host = joined.get("host") or (f"{server[0]}:{server[1]}" if server[1] else str(server[0]))
        self.path = scope.get("path", "")


def _is_secure(scope: Scope, headers: dict[str, str]) -> bool:
    """As ``HttpRequest.is_secure()``: TLS on this connection, or the trusted proxy's header says so."""
    proxy_header: tuple[str, str] | None = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy_header is not None:
        meta_name, secure_value = proxy_header
        header = meta_name.removeprefix("HTTP_").replace("_", "-").lower()
        if header in headers:
            return headers[header].split(",", 1)[0].strip() == secure_value
    return scope.get("scheme") == "https"


def _host_allowed(host: str) -> bool:
    """As ``HttpRequest.get_host()``'s check against ALLOWED_HOSTS (DEBUG's local defaults included)."""
    allowed = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]
    domain, _ = split_domain_port(host)
    return bool(domain) and validate_host(domain, allowed)


def security_headers(request: _Request, present: set[str]) -> list[tuple[str, str]]:
    """The app's own security headers (``inspector.security.security_headers``: what Django's
    middleware and the CSP add to a page) for an answer whose headers are ``present`` (lower-case)."""
    host = request.host if _host_allowed(request.host) else None
    every = security.security_headers(secure=request.secure, host=host)
    return [(name, value) for name, value in every if name.lower() not in present]


class _Body:
    """The request's body as it arrives, piece by piece (never gathered here): iterating raises
    ``forward.HostGone`` when the host goes away before sending it whole. ``ended``: it has
    come whole (reading on would wait for the next message, the host's disconnect)."""

    def __init__(self, receive: Receive) -> None:
        self.receive = receive
        self.ended = False
        self.head = b""

    async def start(self) -> bool:
        """Read the first piece (``head``): a body that came in one message (the usual model
        call) then goes to the upstream with its headers in one write. False: the host went away."""
        message = await self.receive()
        if message["type"] == "http.disconnect":
            return False
        self.ended = not message.get("more_body", False)
        self.head = message.get("body", b"")
        return True

    async def __aiter__(self) -> AsyncGenerator[bytes, None]:
        if self.head:
            head, self.head = self.head, b""
            yield head
        while not self.ended:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                raise forward.HostGone
            self.ended = not message.get("more_body", False)
            piece = message.get("body", b"")
            if piece:
                yield piece

    async def drained(self) -> bool:
        """Read the rest to its end and let it go (a refused call, an upstream not reached: the
        connection is then ready for the host's next request); False when the host went away."""
        try:
            async for _ in self:
                pass
        except forward.HostGone:
            return False
        return True


async def _start(send: Send, request: _Request, status: int, headers: list[tuple[str, str]]) -> None:
    present = {name.lower() for name, _ in headers}
    every = [*headers, *security_headers(request, present)]
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(name.encode("latin1"), value.encode("latin1")) for name, value in every],
        }
    )


async def _whole(
    send: Send, request: _Request, status: int, body: bytes, headers: list[tuple[str, str]]
) -> None:
    await _start(send, request, status, [*headers, ("Content-Length", str(len(body)))])
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _json(send: Send, request: _Request, status: int, data: dict[str, dict[str, str]]) -> None:
    await _whole(send, request, status, json.dumps(data).encode(), [("Content-Type", "application/json")])


def _not_served(request: _Request) -> llm.Refusal | None:
    """Why the front refuses ``request`` whatever its route, if it does: a Host outside
    ALLOWED_HOSTS, plain HTTP where HTTPS is required (a 301's body names no error: ``_refuse``
    sends the redirect)."""
    if not _host_allowed(request.host):
        return llm.refusal(400, "disallowed_host", "this Host is not served here")
    if settings.SECURE_SSL_REDIRECT and not request.secure:
        return llm.refusal(301, "", "")
    return None


def _refused(request: _Request) -> llm.Refusal | None:
    """Why the front refuses an LLM call before looking at its key, if it does."""
    refused = _not_served(request)
    if refused is not None:
        return refused
    if request.method != "POST":
        return llm.refusal(405, "method_not_allowed", llm.NOT_POST.format(method=request.method))
    return None


async def _refuse(send: Send, receive: Receive, request: _Request, refused: llm.Refusal) -> None:
    # The body is read to its end first, as Django does: the connection is then ready for the
    # host's next request whatever the answer.
    if not await _Body(receive).drained():
        return
    if refused.status == 301:
        location = f"https://{request.host}{request.path}" + (f"?{request.query}" if request.query else "")
        await _whole(send, request, 301, b"", [("Location", location)])
    else:
        await _json(send, request, refused.status, refused.body)


async def _call(
    scope: Scope, receive: Receive, send: Send, raw_key: str, form: llm.Format, path: str
) -> None:
    request = _Request(scope)
    refused = _refused(request)
    if refused is not None:
        await _refuse(send, receive, request, refused)
        return
    key = await llm.key_for(raw_key)
    if key is None:
        await _refuse(send, receive, request, llm.BAD_KEY)
        return
    url = llm.upstream_url(key, form, path, request.query)
    if isinstance(url, llm.Refusal):
        await _refuse(send, receive, request, url)
        return
    on_done = llm.recorder(key, raw_key, form, request.items, request.query)
    body = _Body(receive)
    if not await body.start():
        forward.host_gone_first(request.method, url, request.items, on_done)
        return
    answer = await forward.pass_on(
        request.method,
        url,
        request.items,
        # A body that came whole in its first message goes as bytes (one write with the
        # headers); a longer one streams on as it arrives.
        body.head if body.ended else body,
        limit=settings.RESPONSE_BODY_LIMIT,
        read_timeout=settings.MODEL_TIMEOUT_SECONDS,
        on_done=on_done,
    )
    if answer is None:  # the host went away while sending its body
        return
    if answer.body is None:
        if await body.drained():
            await _json(send, request, answer.status, answer.error or {})
        return
    await _stream(send, receive, request, (answer.status, answer.headers), answer.body, _llm_broke_off)


# What the host gets instead of an answer whose body broke before its first byte: (status,
# headers, body) for the upstream's error.
BrokeOff = Callable[[httpx2.HTTPError], tuple[int, list[tuple[str, str]], bytes]]


def _llm_broke_off(exc: httpx2.HTTPError) -> tuple[int, list[tuple[str, str]], bytes]:
    timed_out = isinstance(exc, httpx2.TimeoutException)
    message = (
        "the upstream did not go on with its answer in time (MODEL_TIMEOUT_SECONDS)"
        if timed_out
        else f"the upstream broke off its answer before its first byte: {type(exc).__name__}"
    )
    body = json.dumps(forward.error_body("upstream_broke_off", message)).encode()
    return 504 if timed_out else 502, [("Content-Type", "application/json")], body


def _mcp_broke_off(exc: httpx2.HTTPError) -> tuple[int, list[tuple[str, str]], bytes]:
    timed_out = isinstance(exc, httpx2.TimeoutException)
    body = f"proxy: the MCP server broke off its answer before its first byte ({type(exc).__name__})\n"
    return 504 if timed_out else 502, [("Content-Type", "text/plain")], body.encode()


def _running_reactor() -> Any:
    """Twisted's reactor when it runs this process (daphne serves it), else None."""
    reactor = sys.modules.get("twisted.internet.reactor")
    return reactor if reactor is not None and getattr(reactor, "running", False) else None


def _daphne_transport(task: asyncio.Task[Any] | None) -> Any:
    """The Twisted transport of the connection daphne runs ``task`` (the request's application
    instance) for, else None (another server, or none found). Found from the reactor's listening
    ports: each one's factory is daphne's, whose server maps every connection's protocol to the
    application instance it runs."""
    reactor = _running_reactor()
    if task is None or reactor is None:
        return None
    for reader in reactor.getReaders():
        server = getattr(getattr(reader, "factory", None), "server", None)
        for protocol, details in dict(getattr(server, "connections", None) or {}).items():
            if isinstance(details, dict) and details.get("application_instance") is task:
                return getattr(protocol, "transport", None)
    return None


async def _break_off(task: asyncio.Task[Any] | None, send: Send) -> None:
    """End the host's connection with its answer incomplete, as the upstream's broke off: the
    host must not wait on, and must be able to tell the body did not end (a chunked answer has
    no terminating chunk, one of a known length falls short).

    ASGI has no message for it: the specification leaves it to the server to close the
    connection of an application that raises (or returns) mid-answer, which uvicorn does; daphne
    does not — it logs the error, tries to start a 500 on the started answer, which raises in its
    application checker (no later application is then reaped) and leaves the socket open. So under
    daphne the connection is closed here, through its transport (what was sent is flushed first);
    should it not be found, the answer is ended whole, so the host is at least not left waiting."""
    transport = _daphne_transport(task)
    if transport is not None:
        transport.loseConnection()
        return
    if _running_reactor() is not None:
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    # Another server closes the connection of an application that returns mid-answer.


async def _stream(
    send: Send,
    receive: Receive,
    request: _Request,
    head: tuple[int, list[tuple[str, str]]],
    body: AsyncGenerator[bytes, None],
    broke_off: BrokeOff,
) -> None:
    """Send the answer's ``head`` (status, headers) and ``body`` to the host chunk by chunk; a
    host that goes away stops it (the body's generator then records what had passed).

    The head goes with the first byte of the body (as daphne writes it anyway): an upstream whose
    body breaks before it gets the host ``broke_off``'s answer (a 502, a 504 for a timeout) at
    once; one that breaks later has the host's connection ended with its answer incomplete
    (``_break_off``)."""

    application = asyncio.current_task()  # daphne's application instance for this request

    async def pump() -> None:
        started = False
        try:
            async for chunk in body:
                if not started:
                    await _start(send, request, *head)
                    started = True
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except httpx2.HTTPError as exc:
            if started:
                await _break_off(application, send)
            else:
                status, headers, text = broke_off(exc)
                await _whole(send, request, status, text, headers)
            return
        finally:
            await body.aclose()
        if not started:
            await _start(send, request, *head)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def gone() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    passing = asyncio.ensure_future(pump())
    watching = asyncio.ensure_future(gone())
    try:
        done, _ = await asyncio.wait({passing, watching}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (watching, passing):
            if not task.done():
                task.cancel()
        await asyncio.gather(watching, passing, return_exceptions=True)
    if passing in done:
        passing.result()


async def _mcp_call(scope: Scope, receive: Receive, send: Send, raw_key: str, server: str, kind: str) -> None:
    """An MCP proxy request, answered as ``servers.proxy.views`` would but sent as the server
    answered: every header line it sent, in order, a repeated one as each of its lines (a
    Django response keeps one value per name), and none that Django's middleware would add
    (its ``Vary: Cookie``), the app's security headers aside (``_start``). The body is read
    whole first, as Django's handler reads it before a view runs (``http._Body`` counts on it)."""
    request = _Request(scope)
    refused = _not_served(request)
    if refused is not None:
        await _refuse(send, receive, request, refused)
        return
    with tempfile.SpooledTemporaryFile(max_size=settings.FILE_UPLOAD_MAX_MEMORY_SIZE, mode="w+b") as kept:
        body = _Body(receive)
        if not await body.start():
            return
        try:
            async for piece in body:
                kept.write(piece)
        except forward.HostGone:
            return
        kept.seek(0)
        answer = await mcp.serve(ASGIRequest(scope, kept), raw_key=raw_key, server_name=server, kind=kind)
        if isinstance(answer, HttpResponse):
            await _whole(send, request, answer.status_code, answer.content, list(answer.items()))
            return
        await _stream(send, receive, request, (answer.status, answer.headers), answer.body, _mcp_broke_off)
