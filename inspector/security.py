"""Hardening that every request and websocket passes: the health probe, the refusal of a NUL in an
address, the Content-Security-Policy, the security headers of a response made outside Django's
chain, and the websocket's origin check.

Django 5.2 has no CSP middleware (6.0 adds one, reading a ``SECURE_CSP`` dict of the same shape as
ours, so the swap is one line); the policy here is static — no inline script or style anywhere in
the app — so it needs no nonces and no third-party package.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import psycopg
import redis
from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.core.signals import setting_changed
from django.db import DatabaseError, connection
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse
from django.http.request import split_domain_port, validate_host
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.security import SecurityMiddleware
from django.utils.deprecation import MiddlewareMixin
from django.utils.http import is_same_domain

HEALTH_PATH = "/healthz"
# The longest the probe waits for PostgreSQL or Redis: container probes give up after 4-5 s, and
# libpq counts any connect_timeout below 2 as 2.
HEALTH_TIMEOUT_SECONDS = 2

logger = logging.getLogger(__name__)


def csp_header_value(policy: Mapping[str, Sequence[str]]) -> str:
    """``{"script-src": ["'self'"], ...}`` as the header's text: ``script-src 'self'; ...``."""
    return "; ".join(" ".join([directive, *sources]) for directive, sources in policy.items())


class HealthCheckMiddleware(MiddlewareMixin):
    """``GET /healthz``: 200 ``ok`` when the database answers, and Redis when the deployment has
    one (every page needs it: sessions and throttling live there); 503 ``unavailable`` when not,
    within about ``HEALTH_TIMEOUT_SECONDS``.

    First in the chain, so a container's probe on ``localhost`` needs neither a host listed in
    ALLOWED_HOSTS, nor HTTPS, nor a session; it reveals nothing but up or down (the log says
    which service did not answer).
    """

    def process_request(self, request: HttpRequest) -> HttpResponse | None:
        if request.path != HEALTH_PATH:
            return None
        down = _database_down() or _redis_down()
        if down:
            logger.warning("/healthz: %s", down)
            return HttpResponse("unavailable\n", status=503, content_type="text/plain")
        return HttpResponse("ok\n", content_type="text/plain")


def _database_down() -> str | None:
    """Why the database does not answer, or None. PostgreSQL is asked on a connection of the
    probe's own with a short connect timeout: a connection from the pool would wait up to
    DATABASE_POOL_TIMEOUT_SECONDS (30 s) while the database is down, far past the probe's wait,
    holding a thread all along. SQLite is a local file, asked as the pages ask it."""
    try:
        if connection.vendor != "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
            return None
        # The parameters Django itself connects with (host, database, user, TLS options).
        parameters = {**connection.get_connection_params(), "connect_timeout": HEALTH_TIMEOUT_SECONDS}
        with psycopg.connect(**parameters) as probe:
            probe.execute("SELECT 1")
    except (DatabaseError, psycopg.Error) as error:
        return f"the database does not answer: {error}"
    return None


def _redis_down() -> str | None:
    """Why Redis does not answer, or None; None too when the deployment has no Redis."""
    if not settings.REDIS_URL:
        return None
    client = redis.Redis.from_url(
        settings.REDIS_URL,
        socket_connect_timeout=HEALTH_TIMEOUT_SECONDS,
        socket_timeout=HEALTH_TIMEOUT_SECONDS,
    )
    try:
        client.ping()
    except redis.RedisError as error:
        return f"Redis does not answer: {error}"
    finally:
        client.close()
    return None


class NulRefusalMiddleware(MiddlewareMixin):
    """A request whose path, query or cookies hold a NUL character (``%00``) gets a plain 400.

    No page takes one: a name, a search, a filter or a session key with a NUL in it matches
    nothing stored, and PostgreSQL refuses NUL in a text parameter outright, which every view
    (and the session lookup) would otherwise turn into a server error. Refused here, once, for
    every route Django serves.
    """

    def process_request(self, request: HttpRequest) -> HttpResponse | None:
        if not (
            "\x00" in request.path
            or any(
                "\x00" in name or "\x00" in value for name, values in request.GET.lists() for value in values
            )
            or any("\x00" in name or "\x00" in value for name, value in request.COOKIES.items())
        ):
            return None
        return HttpResponse(
            "The request's address or cookies hold a NUL character (%00), which no page takes.\n",
            status=400,
            content_type="text/plain; charset=utf-8",
        )


def csp_for(*, secure: bool, host: str | None) -> str:
    """The ``Content-Security-Policy`` of every response: ``settings.SECURE_CSP`` with the page's
    own websocket origin in ``connect-src`` (``ws://host:port``, ``wss://`` over HTTPS).

    CSP Level 3 counts that origin as ``'self'``, but WebKit (Safari) did not until 2022, and
    without it the page's live rows would be blocked there. ``host`` None (a Host outside
    ALLOWED_HOSTS) gives the policy as it stands: a foreign name never enters the header.
    """
    policy = {directive: list(sources) for directive, sources in settings.SECURE_CSP.items()}
    if host is not None:
        policy["connect-src"] = [*policy.get("connect-src", []), f"{'wss' if secure else 'ws'}://{host}"]
    return csp_header_value(policy)


class ContentSecurityPolicyMiddleware(MiddlewareMixin):
    """Adds ``csp_for`` the request as the ``Content-Security-Policy`` of every response that has none."""

    def process_response(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        if "Content-Security-Policy" in response:
            return response
        try:
            host: str | None = request.get_host()
        except DisallowedHost:
            host = None  # the 400 for a foreign Host
        response["Content-Security-Policy"] = csp_for(secure=request.is_secure(), host=host)
        return response


class _Asked(HttpRequest):
    """A request that is over HTTPS or not, and nothing else: what Django's header middleware read."""

    def __init__(self, *, secure: bool) -> None:
        super().__init__()
        self.secure = secure

    def is_secure(self) -> bool:
        return self.secure


def _unused(request: HttpRequest) -> HttpResponse:
    raise AssertionError("the middleware's response is given to it, never asked of a view")


@functools.cache
def django_security_headers(*, secure: bool) -> tuple[tuple[str, str], ...]:
    """What Django's ``SecurityMiddleware`` and ``XFrameOptionsMiddleware`` add to a response to a
    request over HTTPS or not (HSTS, ``X-Content-Type-Options``, ``Referrer-Policy``,
    ``Cross-Origin-Opener-Policy``, ``X-Frame-Options``), from the settings.

    Asked of the two middleware themselves, on an empty response: a response made outside
    Django's chain (``inspector.proxy_front``) then carries exactly what a page does, the same
    spelling of every value included, however the settings are written. Asked once per process
    (a few hundred microseconds: a request and a response made), again when a setting changes.
    """
    response = HttpResponse()
    before = set(response.headers)
    request = _Asked(secure=secure)
    XFrameOptionsMiddleware(_unused).process_response(request, response)
    SecurityMiddleware(_unused).process_response(request, response)
    return tuple((name, value) for name, value in response.items() if name not in before)


@receiver(setting_changed)
def _settings_changed(**_: object) -> None:
    """A test's ``override_settings``: the headers are asked again (Django's own middleware read
    theirs when made; the front asks at its next answer)."""
    django_security_headers.cache_clear()


def security_headers(*, secure: bool, host: str | None) -> list[tuple[str, str]]:
    """Every security header a page gets (``django_security_headers`` and ``csp_for``), for a
    response made outside Django's middleware chain."""
    return [
        *django_security_headers(secure=secure),
        ("Content-Security-Policy", csp_for(secure=secure, host=host)),
    ]


def _headers(scope: Mapping[str, Any]) -> dict[str, str]:
    return {name.decode("latin1").lower(): value.decode("latin1") for name, value in scope.get("headers", [])}


def _scope_is_secure(scope: Mapping[str, Any], headers: Mapping[str, str]) -> bool:
    """As ``HttpRequest.is_secure()``: TLS on this connection, or the trusted proxy's header says so."""
    proxy_header: tuple[str, str] | None = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy_header is not None:
        meta_name, secure_value = proxy_header
        header = meta_name.removeprefix("HTTP_").replace("_", "-").lower()
        if header in headers:
            return headers[header].split(",", 1)[0].strip() == secure_value
    return scope.get("scheme") == "wss"


def _allowed_hosts() -> list[str]:
    allowed = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]
    return allowed


def _trusted_origin(origin: str) -> bool:
    """``origin`` matches CSRF_TRUSTED_ORIGINS, exactly or by a ``*.`` subdomain pattern (Django's rule)."""
    parsed = urlsplit(origin)
    for trusted in settings.CSRF_TRUSTED_ORIGINS:
        trusted = trusted.lower()
        if "*" not in trusted:
            if origin == trusted:
                return True
            continue
        pattern = urlsplit(trusted)
        if parsed.scheme == pattern.scheme and is_same_domain(
            parsed.netloc, pattern.netloc[pattern.netloc.find("*") + 1 :]
        ):
            return True
    return False


def websocket_origin_allowed(scope: Mapping[str, Any]) -> bool:
    """Whether a websocket handshake comes from this site's own pages.

    The rule Django's CSRF check applies to a POST: the ``Origin`` must be the request's own
    scheme, host and port (``Host`` must be in ALLOWED_HOSTS; ``https`` when the connection or the
    trusted proxy header says so), or be listed in CSRF_TRUSTED_ORIGINS. A handshake without an
    ``Origin`` is refused: every browser sends one.
    """
    headers = _headers(scope)
    origin = headers.get("origin", "").lower()
    host = headers.get("host", "").lower()
    if not origin or not host:
        return False
    domain, _port = split_domain_port(host)
    if not domain or not validate_host(domain, _allowed_hosts()):
        return False
    own_origin = f"{'https' if _scope_is_secure(scope, headers) else 'http'}://{host}"
    return origin == own_origin or _trusted_origin(origin)


class WebsocketOriginValidator:
    """ASGI middleware: a websocket whose origin is not allowed is closed before the consumer runs."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: Any, receive: Any, send: Any) -> Any:
        if scope["type"] == "websocket" and not websocket_origin_allowed(scope):
            return await WebsocketDenier()(scope, receive, send)
        return await self.application(scope, receive, send)
