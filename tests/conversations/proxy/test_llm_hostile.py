"""Header values the LLM proxy must pass as they are: bytes that are not UTF-8, a right-to-left
override and an escape sequence, from the host to the upstream and from the upstream back, and
the call recorded either way."""

from __future__ import annotations

import httpx
import pytest
from django.contrib.auth.models import User

from conversations.models import Exchange
from conversations.proxy.keys import create_key
from tests.conversations.proxy.llm_fakes import FakeUpstream, Reply, ServedApp, canned
from tests.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

ODD_VALUE = b"\xff\xfe caf\xc3\xa9 \xe2\x80\xae evil \x1b[31m red"
BODY = b'{"model": "fake", "messages": [{"role": "user", "content": "hi"}]}'


@pytest.fixture
def upstream(upstream: tuple[FakeUpstream, str]) -> tuple[FakeUpstream, str]:
    """This module's calls are answered at once: the fake's stream is never held back."""
    upstream[0].release()
    return upstream


def _recorded(user: User) -> bool:
    return Exchange.objects.filter(conversation__owner=user, channel="llm").exists()


def test_a_host_header_of_any_bytes_reaches_the_upstream_as_it_is_and_the_call_is_recorded(
    app: str, upstream: tuple[FakeUpstream, str], alice: User
) -> None:
    fake, base = upstream
    _, raw = create_key(alice, openai_upstream=f"{base}/v1")

    answer = httpx.post(
        f"{app}/proxy/{raw}/openai/v1/chat/completions",
        content=BODY,
        headers=[(b"Content-Type", b"application/json"), (b"X-Host-Note", ODD_VALUE)],
        timeout=30,
    )

    assert answer.status_code == 200
    assert fake.received[0].header("x-host-note").encode("latin-1") == ODD_VALUE
    assert wait_until(lambda: _recorded(alice), 30)


def test_an_upstream_header_of_utf8_text_reaches_the_host_byte_for_byte(
    app: str, upstream: tuple[FakeUpstream, str], alice: User
) -> None:
    fake, base = upstream
    _, raw = create_key(alice, openai_upstream=f"{base}/v1")
    reply = canned("/v1/chat/completions", BODY, b"")
    fake.next_reply = Reply(
        reply.chunks, headers=[*reply.headers, ("x-server-note", "caf\u00e9 \u202e evil")]
    )

    answer = httpx.post(
        f"{app}/proxy/{raw}/openai/v1/chat/completions",
        content=BODY,
        headers={"Content-Type": "application/json"},
        timeout=30,
    )

    assert answer.status_code == 200 and answer.content == reply.body
    assert (b"x-server-note", "caf\u00e9 \u202e evil".encode()) in answer.headers.raw
    assert wait_until(lambda: _recorded(alice), 30)


def test_a_proxied_answer_carries_the_upstreams_date_and_server_once_and_no_others(
    upstream: tuple[FakeUpstream, str], alice: User
) -> None:
    fake, base = upstream
    _, raw = create_key(alice, openai_upstream=f"{base}/v1")
    direct = httpx.post(f"{base}/v1/chat/completions", content=BODY, timeout=30)

    with ServedApp(own_headers=False) as served:
        answer = httpx.post(
            f"{served.url}/proxy/{raw}/openai/v1/chat/completions",
            content=BODY,
            headers={"Content-Type": "application/json"},
            timeout=30,
        )

    assert answer.status_code == 200
    for name in (b"date", b"server"):
        values = [value for key, value in answer.headers.raw if key.lower() == name]
        assert len(values) == 1, (name, values)
    assert answer.headers["server"] == direct.headers["server"] == "uvicorn"
    assert wait_until(lambda: _recorded(alice), 30)
