"""What the LLM proxy adds and keeps of its own (``conversations.proxy.forward``): nothing. The
upstream gets the host's headers and no others, and no cookie is kept from one call for the
next (whoever makes it)."""

from __future__ import annotations

import http.client
from urllib.parse import urlsplit

import httpx2
import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User

from conversations.proxy.keys import create_key
from tests.conversations.proxy.llm_fakes import FakeUpstream, Reply, canned

pytestmark = pytest.mark.django_db(transaction=True)

CALL = b'{"model": "fake", "messages": [{"role": "user", "content": "hi"}]}'


@pytest.fixture
def upstream(upstream: tuple[FakeUpstream, str]) -> tuple[FakeUpstream, str]:
    """This module's calls are answered at once: the fake's stream is never held back."""
    upstream[0].release()
    return upstream


@pytest.fixture
def bob() -> User:
    return get_user_model().objects.create_user("bob")


def _chat(app: str, raw: str, headers: dict[str, str] | None = None) -> httpx2.Response:
    return httpx2.post(
        f"{app}/proxy/{raw}/openai/v1/chat/completions",
        content=CALL,
        headers={"content-type": "application/json", **(headers or {})},
        timeout=30,
    )


def _setting_a_cookie(fake: FakeUpstream, cookie: str) -> None:
    reply = canned("/v1/chat/completions", CALL, b"")
    fake.next_reply = Reply(reply.chunks, headers=[*reply.headers, ("set-cookie", cookie)])


def test_a_cookie_the_upstream_set_on_alices_call_never_reaches_it_on_bobs_or_her_next(
    app: str, upstream: tuple[FakeUpstream, str], alice: User, bob: User
) -> None:
    fake, base = upstream
    _, alices = create_key(alice, openai_upstream=f"{base}/v1")
    _, bobs = create_key(bob, openai_upstream=f"{base}/v1")
    _setting_a_cookie(fake, "session=alice-secret; Path=/")

    first = _chat(app, alices)
    bobs_call = _chat(app, bobs)
    alices_next = _chat(app, alices)

    # The upstream's Set-Cookie goes back to the host that was answered, as it came...
    assert first.headers["set-cookie"] == "session=alice-secret; Path=/"
    # ...and the proxy sends it nowhere itself: not with bob's call, nor with alice's next.
    assert bobs_call.status_code == alices_next.status_code == 200
    assert [seen.header("cookie") for seen in fake.received] == ["", "", ""]


def test_the_hosts_own_cookie_goes_on_as_sent_and_no_stored_one_is_added(
    app: str, upstream: tuple[FakeUpstream, str], alice: User
) -> None:
    fake, base = upstream
    _, raw = create_key(alice, openai_upstream=f"{base}/v1")
    _setting_a_cookie(fake, "tracker=upstream-set; Path=/")

    _chat(app, raw)
    _chat(app, raw, {"cookie": "mine=1; other=two"})

    assert fake.received[1].header("cookie") == "mine=1; other=two"
    assert [name for name, _ in fake.received[1].headers].count(b"cookie") == 1


def test_the_upstream_gets_exactly_the_hosts_headers_and_none_of_the_clients_defaults(
    app: str, upstream: tuple[FakeUpstream, str], alice: User
) -> None:
    fake, base = upstream
    _, raw = create_key(alice, openai_upstream=f"{base}/v1")
    # A host of few words: no Accept, no Accept-Encoding, no User-Agent.
    sent = [
        (b"Content-Type", b"application/json"),
        (b"Authorization", b"Bearer host-own"),
        (b"X-Trace", b"7"),
    ]
    where = urlsplit(app)
    host = http.client.HTTPConnection(where.hostname or "", where.port, timeout=30)
    try:
        host.putrequest(
            "POST", f"/proxy/{raw}/openai/v1/chat/completions", skip_host=False, skip_accept_encoding=True
        )
        for name, value in [*sent, (b"Content-Length", str(len(CALL)).encode())]:
            host.putheader(name, value)
        host.endheaders(CALL)
        answer = host.getresponse()
        answer.read()
    finally:
        host.close()

    assert answer.status == 200
    [seen] = fake.received
    assert seen.body == CALL
    # Host and Content-Length are set for the upstream's connection; every other header is the host's.
    framing = {b"host", b"content-length"}
    assert {name.lower() for name, _ in seen.headers} == framing | {name.lower() for name, _ in sent}
    assert [(name.lower(), value) for name, value in seen.headers if name.lower() not in framing] == [
        (name.lower(), value) for name, value in sent
    ]
    assert seen.header("content-length") == str(len(CALL))
