"""Hardening that every request and websocket passes: the health probe, the Content-Security-Policy
and the websocket's origin check.

Django 5.2 has no CSP middleware (6.0 adds one, reading a ``SECURE_CSP`` dict of the same shape as
ours, so the swap is one line); the policy here is static — no inline script or style anywhere in
the app — so it needs no nonces and no third-party package.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse
from django.http.request import split_domain_port, validate_host
from django.utils.deprecation import MiddlewareMixin
from django.utils.http import is_same_domain

HEALTH_PATH = "/healthz"


def csp_header_value(policy: Mapping[str, Sequence[str]]) -> str:
    """``{"script-src": ["'self'"], ...}`` as the header's text: ``script-src 'self'; ...``."""
    return "; ".join(" ".join([directive, *sources]) for directive, sources in policy.items())


class HealthCheckMiddleware(MiddlewareMixin):
    """``GET /healthz``: 200 ``ok`` when the database answers, 503 ``unavailable`` when not.

    First in the chain, so a container's probe on ``localhost`` needs neither a host listed in
    ALLOWED_HOSTS, nor HTTPS, nor a session; it reveals nothing but up or down.
    """

    def process_request(self, request: HttpRequest) -> HttpResponse | None:
        if request.path != HEALTH_PATH:
            return None
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
        except DatabaseError:
            return HttpResponse("unavailable\n", status=503, content_type="text/plain")
        return HttpResponse("ok\n", content_type="text/plain")


class ContentSecurityPolicyMiddleware(MiddlewareMixin):
    """Adds ``settings.SECURE_CSP`` as the ``Content-Security-Policy`` of every response that has none.

    ``connect-src`` also names the page's own websocket origin (``ws://host:port``, ``wss://``
    over HTTPS): CSP Level 3 counts it as ``'self'``, but WebKit (Safari) did not until 2022,
    and without it the page's live rows would be blocked there.
    """

    def __init__(self, get_response: Any) -> None:
        super().__init__(get_response)
        self.policy = {directive: list(sources) for directive, sources in settings.SECURE_CSP.items()}
        self.header = csp_header_value(self.policy)

    def process_response(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        if "Content-Security-Policy" in response:
            return response
        try:
            websocket = f"{'wss' if request.is_secure() else 'ws'}://{request.get_host()}"
        except DisallowedHost:
            response["Content-Security-Policy"] = self.header  # the 400 for a foreign Host
            return response
        policy = {**self.policy, "connect-src": [*self.policy.get("connect-src", []), websocket]}
        response["Content-Security-Policy"] = csp_header_value(policy)
        return response


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
