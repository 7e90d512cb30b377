"""Hardening: the Content-Security-Policy, the health probe, HTTPS settings and the websocket origin."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from django.test.utils import override_settings

from conversations.models import Conversation, ModelProfile
from inspector.asgi import application
from inspector.security import websocket_origin_allowed

TEMPLATES_DIR = Path(settings.BASE_DIR) / "templates"


# --- Content-Security-Policy ------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    "path", ["/accounts/login/", "/", "/servers/", "/compare/", "/accounts/token", "/admin/"]
)
def test_every_page_carries_a_policy_that_allows_no_inline_script_or_style(
    admin_client: Client, path: str
) -> None:
    response = admin_client.get(path)

    assert response.status_code == 200
    policy = dict(
        (directive.split()[0], directive.split()[1:])
        for directive in response["Content-Security-Policy"].split("; ")
    )
    assert policy["default-src"] == ["'self'"]
    assert policy["script-src"] == ["'self'"]
    assert policy["style-src"] == ["'self'"]
    assert policy["object-src"] == ["'none'"]
    assert policy["frame-ancestors"] == ["'none'"]
    assert "unsafe" not in response["Content-Security-Policy"]
    # The page's own websocket, named as well as 'self' (older Safari did not count it as 'self').
    assert policy["connect-src"] == ["'self'", "ws://testserver"]


@pytest.mark.django_db
def test_over_https_the_policy_names_the_secure_websocket(admin_client: Client) -> None:
    response = admin_client.get("/", secure=True, HTTP_HOST="127.0.0.1:8443")

    assert "connect-src 'self' wss://127.0.0.1:8443;" in response["Content-Security-Policy"]


def test_a_request_for_a_foreign_host_still_gets_the_policy() -> None:
    response = Client().get("/accounts/login/", HTTP_HOST="evil.example")

    assert response.status_code == 400
    assert "script-src 'self'" in response["Content-Security-Policy"]


INLINE_CODE = [
    re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.IGNORECASE),  # a script element with a body
    re.compile(r"\son[a-z]+\s*=", re.IGNORECASE),  # onclick=, onload=, …
    re.compile(r"javascript:", re.IGNORECASE),
    re.compile(r"\sstyle\s*=", re.IGNORECASE),  # style attributes (style-src has no 'unsafe-inline')
    re.compile(r"<style", re.IGNORECASE),
]


@pytest.mark.parametrize("template", sorted(TEMPLATES_DIR.rglob("*.html")), ids=lambda path: path.name)
def test_no_template_holds_inline_script_handlers_or_styles(template: Path) -> None:
    text = template.read_text()

    assert [pattern.pattern for pattern in INLINE_CODE if pattern.search(text)] == []


# --- the health probe -------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_health_probe_answers_ok_without_a_session_an_allowed_host_or_https() -> None:
    with override_settings(SECURE_SSL_REDIRECT=True, ALLOWED_HOSTS=["inspector.example.com"]):
        response = Client().get("/healthz", HTTP_HOST="localhost:8000")

    assert response.status_code == 200
    assert response.content == b"ok\n"
    assert response["Content-Type"] == "text/plain"


@pytest.mark.django_db
def test_other_paths_still_need_an_allowed_host_and_https() -> None:
    with override_settings(SECURE_SSL_REDIRECT=True, ALLOWED_HOSTS=["inspector.example.com"]):
        assert Client().get("/healthz/", HTTP_HOST="localhost:8000").status_code == 400
        redirect = Client().get("/accounts/login/", HTTP_HOST="inspector.example.com")

    assert redirect.status_code == 301
    assert redirect["Location"] == "https://inspector.example.com/accounts/login/"


PROBE = "import django; django.setup(); from django.test import Client; r = Client().get('/healthz'); print(r.status_code, r.content)"


def test_the_health_probe_answers_503_when_the_database_does_not(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "VAR_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "inspector.settings",
        # Nothing listens on this port.
        "DATABASE_URL": "postgres://inspector@127.0.0.1:7699/inspector",
        "DATABASE_POOL_TIMEOUT_SECONDS": "1",
    }

    probe = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert probe.stdout.strip() == "503 b'unavailable\\n'", probe.stderr


# --- HTTPS behind a proxy ---------------------------------------------------------------------


@pytest.mark.django_db
def test_behind_a_tls_proxy_pages_are_served_with_hsts_and_plain_http_is_redirected() -> None:
    with override_settings(
        SECURE_SSL_REDIRECT=True,
        SECURE_HSTS_SECONDS=31536000,
        SECURE_HSTS_INCLUDE_SUBDOMAINS=True,
        SECURE_PROXY_SSL_HEADER=("HTTP_X_FORWARDED_PROTO", "https"),
    ):
        secure = Client().get("/accounts/login/", HTTP_X_FORWARDED_PROTO="https")
        plain = Client().get("/accounts/login/")

    assert secure.status_code == 200
    assert secure["Strict-Transport-Security"] == "max-age=31536000; includeSubDomains"
    assert plain.status_code == 301
    assert plain["Location"].startswith("https://")


# --- the websocket's origin -------------------------------------------------------------------


def _scope(
    origin: str | None, host: str = "127.0.0.1:8000", scheme: str = "ws", **headers: str
) -> dict[str, Any]:
    raw = [(b"host", host.encode())] + [
        (name.replace("_", "-").encode(), value.encode()) for name, value in headers.items()
    ]
    if origin is not None:
        raw.append((b"origin", origin.encode()))
    return {"type": "websocket", "scheme": scheme, "headers": raw}


@pytest.mark.parametrize(
    ("scope", "allowed"),
    [
        (_scope("http://127.0.0.1:8000"), True),
        (_scope("http://127.0.0.1:9000"), False),  # another port of an allowed host
        (_scope("https://127.0.0.1:8000"), False),  # another scheme
        (_scope("http://127.0.0.1"), False),
        (_scope("https://127.0.0.1:8000", scheme="wss"), True),
        (_scope("http://127.0.0.1:8000", scheme="wss"), False),
        (_scope("http://localhost", host="localhost"), True),
        (_scope("http://evil.example:8000", host="evil.example:8000"), False),  # host not allowed
        (_scope(None), False),
        (_scope("null"), False),
        (_scope("http://127.0.0.1:8000", host=""), False),
    ],
)
def test_a_websocket_is_accepted_only_from_the_sites_own_scheme_host_and_port(
    scope: dict[str, Any], allowed: bool
) -> None:
    with override_settings(ALLOWED_HOSTS=["127.0.0.1", "localhost"]):
        assert websocket_origin_allowed(scope) is allowed


def test_behind_a_tls_proxy_the_websocket_origin_is_https() -> None:
    with override_settings(
        ALLOWED_HOSTS=["inspector.example.com"], SECURE_PROXY_SSL_HEADER=("HTTP_X_FORWARDED_PROTO", "https")
    ):
        forwarded = {"host": "inspector.example.com", "x_forwarded_proto": "https"}
        assert websocket_origin_allowed(_scope("https://inspector.example.com", **forwarded))
        assert not websocket_origin_allowed(_scope("http://inspector.example.com", **forwarded))
        assert not websocket_origin_allowed(
            _scope("https://inspector.example.com", host="inspector.example.com")
        )
    with override_settings(ALLOWED_HOSTS=["inspector.example.com"]):
        # Without SECURE_PROXY_SSL_HEADER, a client's own X-Forwarded-Proto counts for nothing.
        assert not websocket_origin_allowed(
            _scope("https://inspector.example.com", host="inspector.example.com", x_forwarded_proto="https")
        )


def test_csrf_trusted_origins_are_accepted_exactly_or_by_subdomain_pattern() -> None:
    with override_settings(
        ALLOWED_HOSTS=["127.0.0.1"],
        CSRF_TRUSTED_ORIGINS=["https://inspector.example.com", "https://*.example.org"],
    ):
        assert websocket_origin_allowed(_scope("https://inspector.example.com"))
        assert websocket_origin_allowed(_scope("https://a.example.org"))
        assert websocket_origin_allowed(_scope("https://example.org"))
        assert not websocket_origin_allowed(_scope("http://inspector.example.com"))
        assert not websocket_origin_allowed(_scope("https://inspector.example.com:8443"))
        assert not websocket_origin_allowed(_scope("http://a.example.org"))
        assert not websocket_origin_allowed(_scope("https://a.example.org:8443"))
        assert not websocket_origin_allowed(_scope("https://evilexample.org"))


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("async_db_connections")
@pytest.mark.parametrize(
    ("origin", "connects"), [("http://127.0.0.1:8000", True), ("http://127.0.0.1:8001", False)]
)
async def test_the_real_stack_refuses_another_port_of_the_same_host_even_with_a_session(
    origin: str, connects: bool
) -> None:
    alice = await User.objects.acreate(username="alice")
    profile = await ModelProfile.objects.acreate(name="p-alice", model="demo", is_demo=True)
    conversation = await Conversation.objects.acreate(owner=alice, title="weather", model_profile=profile)
    client = Client()
    await sync_to_async(client.force_login)(alice)
    communicator = WebsocketCommunicator(
        application,
        f"/ws/conversations/{conversation.public_id}/",
        headers=[
            (b"origin", origin.encode()),
            (b"host", b"127.0.0.1:8000"),
            (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()),
        ],
    )

    connected, _ = await communicator.connect()

    assert connected is connects
    await communicator.disconnect()
