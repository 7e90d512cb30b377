"""The LLM proxy's routes as a plain ASGI application, ahead of Django's (``inspector.asgi``).

A proxied model call needs none of what Django's middleware chain gives a page — no session, no
CSRF token, no login (the key in the path authenticates) — and paid for it on every call: the
request through the chain in a thread of its own and back, before the first byte could go out.
Here a call matching one of the routes of ``conversations.proxy.urls`` is read off the ASGI
connection, its key checked (``llm.key_for``: from the process's recent keys, else in a
thread), and passed on with ``forward.pass_on``; each chunk of the answer is sent to the host as
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
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from typing import Any

from django.conf import settings
from django.http.request import split_domain_port, validate_host

from conversations.proxy import forward, llm
from inspector import security

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


def route(scope: Scope) -> tuple[str, llm.Format, str] | None:
    """(the raw key, the format, the path under the upstream) of an LLM proxy call, else None."""
    if scope["type"] != "http":
        return None
    path: str = scope.get("path", "")
    root: str = scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root) :]
    if not path.startswith("/proxy/"):
        return None
    for pattern, form in ROUTES:
        found = pattern.match(path)
        if found:
            return found["key"], form, found["path"]
    return None


def with_llm_proxy(django: Asgi) -> Asgi:
    """``django`` with the LLM proxy's routes answered in front of it."""

    async def application(scope: Scope, receive: Receive, send: Send) -> None:
        found = route(scope)
        if found is None:
            await django(scope, receive, send)
            return
        await _call(scope, receive, send, *found)

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


async def _read_body(receive: Receive) -> bytes | None:
    """The request's body, or None when the host went away before sending it whole."""
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        body += message.get("body", b"")
        if not message.get("more_body", False):
            return bytes(body)


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


async def _call(
    scope: Scope, receive: Receive, send: Send, raw_key: str, form: llm.Format, path: str
) -> None:
    request = _Request(scope)
    # Read first, as Django does: the connection is then ready for the host's next request
    # whatever the answer.
    body = await _read_body(receive)
    if body is None:
        return
    if not _host_allowed(request.host):
        await _json(
            send, request, 400, llm.refusal(400, "disallowed_host", "this Host is not served here").body
        )
        return
    if settings.SECURE_SSL_REDIRECT and not request.secure:
        location = f"https://{request.host}{request.path}" + (f"?{request.query}" if request.query else "")
        await _whole(send, request, 301, b"", [("Location", location)])
        return
    if request.method != "POST":
        refused = llm.refusal(405, "method_not_allowed", llm.NOT_POST.format(method=request.method))
        await _json(send, request, refused.status, refused.body)
        return
    key = await llm.key_for(raw_key)
    if key is None:
        await _json(send, request, llm.BAD_KEY.status, llm.BAD_KEY.body)
        return
    url = llm.upstream_url(key, form, path, request.query)
    if isinstance(url, llm.Refusal):
        await _json(send, request, url.status, url.body)
        return
    answer = await forward.pass_on(
        request.method,
        url,
        request.items,
        body,
        limit=settings.RESPONSE_BODY_LIMIT,
        read_timeout=settings.MODEL_TIMEOUT_SECONDS,
        on_done=llm.recorder(key, raw_key, form, request.headers, request.query),
    )
    if answer.body is None:
        await _json(send, request, answer.status, answer.error or {})
        return
    await _start(send, request, answer.status, answer.headers)
    await _stream(send, receive, answer.body)


async def _stream(send: Send, receive: Receive, body: AsyncGenerator[bytes, None]) -> None:
    """Send ``body`` to the host chunk by chunk; a host that goes away stops it (the body's
    generator then records what had passed). An upstream that breaks off raises here, so the
    server breaks the host's answer off too."""

    async def pump() -> None:
        try:
            async for chunk in body:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await body.aclose()

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
