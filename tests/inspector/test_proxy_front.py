"""The LLM proxy's routes answered ahead of Django (``inspector.proxy_front``, dispatched by
``inspector.asgi``): a proxied call never enters Django's request handling, yet gets what the
middleware chain gave it — the app's security headers, the ALLOWED_HOSTS check, the HTTPS
redirect — and every other path still reaches Django."""

from __future__ import annotations

from collections.abc import Iterator

import httpx2
import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.core.signals import request_started
from django.test import override_settings

from conversations.models import Exchange
from conversations.proxy.keys import create_key
from conversations.proxy.models import ProxyKey
from inspector.proxy_front import route
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
