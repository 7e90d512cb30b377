"""The LLM proxy's routes answered ahead of Django (``inspector.proxy_front``, dispatched by
``inspector.asgi``): a proxied call never enters Django's request handling, yet gets what the
middleware chain gave it — the app's security headers, the ALLOWED_HOSTS check, the HTTPS
redirect — and every other path still reaches Django."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import httpx2
import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.core.asgi import get_asgi_application
from django.core.handlers.asgi import ASGIHandler
from django.core.signals import request_started
from django.test import override_settings

from conversations.execution import serving_start
from conversations.models import Exchange
from conversations.proxy.keys import create_key
from conversations.proxy.models import ProxyKey
from inspector.proxy_front import route, with_llm_proxy
from tests.conversations.proxy.llm_fakes import FakeUpstream, Reply, Served, ServedApp
from tests.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

CHAT = b'{"model": "fake", "messages": [{"role": "user", "content": "hi"}]}'


@pytest.fixture
def app() -> Iterator[str]:
    with ServedApp() as served:
        yield served.url


@pytest.fixture
def upstream() -> Iterator[tuple[FakeUpstream, str]]:
    fake = FakeUpstream()
    with Served(fake) as served:
        yield fake, served.url
        fake.release()


@pytest.fixture
def alice() -> User:
    return get_user_model().objects.create_user("alice")


def _key(user: User, base: str) -> tuple[ProxyKey, str]:
    return create_key(user, openai_upstream=f"{base}/v1", anthropic_upstream=base, gemini_upstream=base)


def _routed(path: str, root: str = "", kind: str = "http") -> tuple[str, str, str] | None:
    found = route({"type": kind, "path": path, "root_path": root})
    return None if found is None else (found[0], found[1].fmt, found[2])


def test_the_llm_routes_are_the_fronts_and_every_other_path_goes_to_django() -> None:
    assert _routed("/proxy/tci_k/openai/v1/chat/completions") == ("tci_k", "openai_chat", "chat/completions")
    assert _routed("/proxy/tci_k/openai/v1/responses") == ("tci_k", "openai_responses", "responses")
    assert _routed("/proxy/tci_k/anthropic/v1/messages") == ("tci_k", "anthropic", "v1/messages")
    assert _routed("/app/proxy/tci_k/gemini/v1beta/models/m:streamGenerateContent", "/app") == (
        "tci_k",
        "gemini",
        "v1beta/models/m:streamGenerateContent",
    )
    assert _routed("/proxy/tci_k/gemini/v2/models/m:generateContent") is None
    assert _routed("/proxy/tci_k/mcp/time") is None  # the MCP proxy is Django's
    assert _routed("/proxy/tci_k/openai/v1/chat/completions/") is None
    assert _routed("/conversations/") is None
    assert _routed("/proxy/tci_k/openai/v1/responses", kind="websocket") is None


def test_a_proxied_call_never_enters_djangos_request_handling_and_a_page_still_does(
    app: str, upstream: tuple[FakeUpstream, str], alice: User
) -> None:
    fake, base = upstream
    key, raw = _key(alice, base)
    started: list[object] = []

    def seen(sender: object, **kwargs: object) -> None:
        started.append(sender)

    request_started.connect(seen)
    try:
        response = httpx2.post(
            f"{app}/proxy/{raw}/openai/v1/chat/completions",
            content=CHAT,
            headers={"x-inspector-session": "front"},
            timeout=30,
        )
        assert response.status_code == 200
        assert started == []
        assert httpx2.get(f"{app}/accounts/login/", timeout=30).status_code == 200
        assert len(started) == 1
    finally:
        request_started.disconnect(seen)
    assert wait_until(
        lambda: Exchange.objects.filter(conversation__proxy_session__key=key, channel="llm").exists(), 30
    )


def test_a_proxied_answer_carries_the_apps_security_headers_beside_the_upstreams_own(
    app: str, upstream: tuple[FakeUpstream, str], alice: User
) -> None:
    fake, base = upstream
    _, raw = _key(alice, base)
    fake.next_reply = Reply(
        [b"{}"],
        headers=[
            ("content-type", "application/json"),
            ("x-frame-options", "SAMEORIGIN"),
            ("set-cookie", "a=1"),
            ("set-cookie", "b=2"),
        ],
    )

    response = httpx2.post(f"{app}/proxy/{raw}/openai/v1/chat/completions", content=CHAT, timeout=30)

    assert response.status_code == 200
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "same-origin"
    assert response.headers["cross-origin-opener-policy"] == "same-origin"
    assert "default-src 'self'" in response.headers["content-security-policy"]
    # The upstream's own value stands, once; repeated headers come back repeated.
    assert response.headers.get_list("x-frame-options") == ["SAMEORIGIN"]
    assert response.headers.get_list("set-cookie") == ["a=1", "b=2"]


def test_a_host_outside_allowed_hosts_gets_400_and_nothing_is_forwarded(
    app: str, upstream: tuple[FakeUpstream, str], alice: User
) -> None:
    fake, base = upstream
    _, raw = _key(alice, base)

    response = httpx2.post(
        f"{app}/proxy/{raw}/openai/v1/chat/completions",
        content=CHAT,
        headers={"host": "evil.example"},
        timeout=30,
    )

    assert response.status_code == 400
    assert response.json()["error"]["type"] == "disallowed_host"
    assert fake.received == []


def test_plain_http_is_redirected_to_https_when_the_app_asks_for_it(
    app: str, upstream: tuple[FakeUpstream, str], alice: User
) -> None:
    fake, base = upstream
    _, raw = _key(alice, base)

    with override_settings(SECURE_SSL_REDIRECT=True):
        response = httpx2.post(f"{app}/proxy/{raw}/openai/v1/chat/completions?x=1", content=CHAT, timeout=30)

    assert response.status_code == 301
    assert response.headers["location"].startswith("https://127.0.0.1:")
    assert response.headers["location"].endswith(f"/proxy/{raw}/openai/v1/chat/completions?x=1")
    assert fake.received == []


def test_a_method_other_than_post_gets_405_with_a_json_body(app: str, alice: User) -> None:
    _, raw = create_key(alice, openai_upstream="http://127.0.0.1:9/v1")

    response = httpx2.get(f"{app}/proxy/{raw}/openai/v1/chat/completions", timeout=30)

    assert response.status_code == 405
    assert response.json()["error"]["type"] == "method_not_allowed"


# The headers that make a response safe to show, beside what it is (type, length, cookies, ...).
SECURITY_HEADERS = (
    "strict-transport-security",
    "x-content-type-options",
    "referrer-policy",
    "cross-origin-opener-policy",
    "x-frame-options",
    "content-security-policy",
)
# What a page carries that is not about its safety.
PAGE_HEADERS = {
    "content-type",
    "content-length",
    "vary",
    "set-cookie",
    "cache-control",
    "expires",
    "date",
    "server",
}
# A deployment's hardened settings (docs/deployment.md), each one different from the default,
# behind a TLS-terminating proxy that says so in X-Forwarded-Proto.
HARDENED = {
    "DEBUG": False,
    "SECURE_PROXY_SSL_HEADER": ("HTTP_X_FORWARDED_PROTO", "https"),
    "SECURE_HSTS_SECONDS": 31_536_000,
    "SECURE_HSTS_INCLUDE_SUBDOMAINS": True,
    "SECURE_HSTS_PRELOAD": True,
    "SECURE_REFERRER_POLICY": "no-referrer, strict-origin-when-cross-origin",
    "SECURE_CROSS_ORIGIN_OPENER_POLICY": "same-origin-allow-popups",
    "X_FRAME_OPTIONS": "sameorigin",
}


@contextmanager
def _served_with(changed: dict[str, object]) -> Iterator[str]:
    """The app, its middleware built under ``changed`` settings (Django's read theirs once, when
    the handler is made), served as ``ServedApp`` serves it."""
    with override_settings(**changed):
        request_started.disconnect(sender=ASGIHandler, dispatch_uid="inspector-serving-start")
        try:
            with Served(with_llm_proxy(get_asgi_application())) as served:
                yield served.url
        finally:
            request_started.connect(serving_start, sender=ASGIHandler, dispatch_uid="inspector-serving-start")


@pytest.mark.parametrize("hardened", [False, True], ids=["default", "hardened"])
def test_a_proxied_answer_and_a_page_carry_the_same_security_headers(
    upstream: tuple[FakeUpstream, str], alice: User, hardened: bool
) -> None:
    _, base = upstream
    _, raw = _key(alice, base)
    headers = {"x-forwarded-proto": "https"} if hardened else {}

    with _served_with(HARDENED if hardened else {}) as app:
        answer = httpx2.post(
            f"{app}/proxy/{raw}/openai/v1/chat/completions", content=CHAT, headers=headers, timeout=30
        )
        page = httpx2.get(f"{app}/accounts/login/", headers=headers, timeout=30)

    assert (answer.status_code, page.status_code) == (200, 200)
    # The list is the page's whole: a header a page gains is one the front must give too.
    assert set(page.headers) - PAGE_HEADERS <= set(SECURITY_HEADERS)
    of_page = {name: page.headers.get_list(name) for name in SECURITY_HEADERS}
    of_answer = {name: answer.headers.get_list(name) for name in SECURITY_HEADERS}
    assert of_answer == of_page
    if hardened:
        assert of_page["strict-transport-security"] == ["max-age=31536000; includeSubDomains; preload"]
        assert "wss://127.0.0.1:" in of_page["content-security-policy"][0]
    else:
        assert of_page["strict-transport-security"] == []
        assert "ws://127.0.0.1:" in of_page["content-security-policy"][0]


def test_a_foreign_hosts_400_names_no_foreign_origin_in_its_policy(
    app: str, upstream: tuple[FakeUpstream, str], alice: User
) -> None:
    _, base = upstream
    _, raw = _key(alice, base)
    foreign = {"host": "evil.example"}

    answer = httpx2.post(
        f"{app}/proxy/{raw}/openai/v1/chat/completions", content=CHAT, headers=foreign, timeout=30
    )
    page = httpx2.get(f"{app}/accounts/login/", headers=foreign, timeout=30)

    assert (answer.status_code, page.status_code) == (400, 400)
    assert "evil.example" not in answer.headers["content-security-policy"]
    assert answer.headers["content-security-policy"] == page.headers["content-security-policy"]
