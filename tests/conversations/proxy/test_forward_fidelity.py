"""What the LLM proxy adds and keeps of its own (``conversations.proxy.forward``): nothing. The
upstream gets the host's headers and no others, no cookie is kept from one call for the next
(whoever makes it), and a compressed answer is recorded whole however many gzip members or
zlib streams it is made of, within the record's limit."""

from __future__ import annotations

import gzip
import http.client
import json
import os
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit

import httpx2
import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.test import override_settings

from conversations.proxy import forward
from conversations.proxy.keys import create_key
from tests.conversations.proxy import relay_urls
from tests.conversations.proxy.llm_fakes import FakeUpstream, Reply, Served, ServedApp, canned
from tests.support import wait_until

# This module's calls are answered at once: the upstream fake's stream is never held back.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.upstream_released]

CALL = b'{"model": "fake", "messages": [{"role": "user", "content": "hi"}]}'
MB = 1024 * 1024


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


# Forwarding on its own, for the compressed answers: the exchange it hands on is what the record
# keeps.


@pytest.fixture
def relayed() -> Iterator[tuple[FakeUpstream, str]]:
    fake = FakeUpstream()
    fake.release()
    with (
        Served(fake) as served,
        override_settings(ROOT_URLCONF="tests.conversations.proxy.relay_urls"),
        ServedApp() as proxy,
    ):
        relay_urls.TARGET.url = served.url
        relay_urls.TARGET.done.clear()
        relay_urls.TARGET.limit = 1_000_000
        yield fake, f"{proxy.url}/relay"


def _relayed_answer(proxy: str) -> tuple[bytes, forward.WireExchange]:
    with (
        httpx2.Client(timeout=30) as host,
        host.stream("POST", f"{proxy}/v1/chat/completions", content=b"{}") as response,
    ):
        wire = b"".join(response.iter_raw())
    assert wait_until(lambda: len(relay_urls.TARGET.done) >= 1, 30), "no exchange was handed on"
    [exchange] = relay_urls.TARGET.done
    return wire, exchange


def test_a_gzip_answer_of_several_members_is_recorded_whole(relayed: tuple[FakeUpstream, str]) -> None:
    fake, proxy = relayed
    parts = [json.dumps({"part": n, "text": "x" * 3000}).encode() + b"\n" for n in range(3)]
    packed = b"".join(gzip.compress(part) for part in parts)
    # Split across chunks so that a member's end falls inside one.
    fake.next_reply = Reply(
        [packed[:50], packed[50:1500], packed[1500:]],
        headers=[("content-type", "application/x-ndjson"), ("content-encoding", "gzip")],
    )

    wire, exchange = _relayed_answer(proxy)

    assert wire == packed
    assert gzip.decompress(wire) == b"".join(parts)
    assert exchange.response_body == b"".join(parts).decode()
    assert exchange.error == ""


def test_a_gzip_answer_of_several_members_past_the_limit_is_recorded_cut_and_marked(
    relayed: tuple[FakeUpstream, str],
) -> None:
    fake, proxy = relayed
    relay_urls.TARGET.limit = 1000
    parts = [bytes([ord("a") + n]) * 700 for n in range(3)]
    packed = b"".join(gzip.compress(part) for part in parts)
    fake.next_reply = Reply([packed], headers=[("content-encoding", "gzip")])

    wire, exchange = _relayed_answer(proxy)

    assert wire == packed
    assert exchange.response_body == "a" * 700 + "b" * 300
    assert "response body: the record was cut at 1,000 bytes (RESPONSE_BODY_LIMIT)" in exchange.error
    assert f"{len(packed):,} bytes over the wire" in exchange.error


def _captured(encoding: str, body: bytes, limit: int, *, chunk: int = 997) -> forward.Capture:
    capture = forward.Capture(limit, encoding)
    for at in range(0, len(body), chunk):
        capture.feed(body[at : at + chunk])
    return capture


def _captured_with_peak(encoding: str, body: bytes, limit: int) -> tuple[forward.Capture, int]:
    """``_captured`` in 64 kB chunks, and the most memory Python held at once while it ran."""
    tracemalloc.start()
    try:
        capture = _captured(encoding, body, limit, chunk=65_536)
        return capture, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(
    ("encoding", "compress"),
    [("gzip", gzip.compress), ("x-gzip", gzip.compress), ("deflate", zlib.compress)],
)
def test_every_member_or_stream_of_a_compressed_body_is_decoded_whatever_the_chunks(
    encoding: str, compress: Callable[[bytes], bytes]
) -> None:
    parts = [f"part {n}: ".encode() + bytes(range(32, 127)) * (n + 1) for n in range(5)]
    body = b"".join(compress(part) for part in parts)

    for chunk in (1, 7, 64, len(body)):
        capture = _captured(encoding, body, 1_000_000, chunk=chunk)
        assert capture.body == b"".join(parts), chunk
        assert capture.note == ""
        assert capture.wire_bytes == len(body)


def test_zero_padding_after_the_last_gzip_member_is_skipped_as_gzip_does() -> None:
    body = gzip.compress(b"one ") + gzip.compress(b"two") + b"\0" * 300

    capture = _captured("gzip", body, 1_000_000, chunk=16)

    assert capture.body == gzip.decompress(body) == b"one two"
    assert capture.note == ""


def test_bytes_after_a_member_that_are_no_gzip_are_kept_as_they_came_and_marked() -> None:
    body = gzip.compress(b"the answer") + b"not gzip at all"

    capture = _captured("gzip", body, 1_000_000)

    assert capture.body == b"the answernot gzip at all"
    assert "its gzip body could not be inflated" in capture.note
    assert "the rest is kept as it came" in capture.note


def test_a_bomb_of_many_members_is_inflated_no_further_than_the_limit() -> None:
    # 200 MB once inflated, about 200 kB over the wire; each member inflates to less than the
    # limit, so it is the members together that pass it (the cut falls inside the third).
    member = gzip.compress(b"\0" * MB)
    body = member * 200
    limit = 2 * MB + 12_345

    capture, peak = _captured_with_peak("gzip", body, limit)

    assert capture.kept == len(capture.body) == limit
    assert capture.cut
    assert f"{len(body):,} bytes over the wire" in capture.note
    assert peak < limit + 4 * MB, peak


def test_what_follows_a_first_small_member_is_inflated_within_the_limit_not_held() -> None:
    # 16 MB of members that hardly compress, after a first one far smaller than the limit.
    rest = b"".join(gzip.compress(os.urandom(65_536), compresslevel=1) for _ in range(256))
    body = gzip.compress(b"head ") + rest
    limit = 100_000

    capture, peak = _captured_with_peak("gzip", body, limit)

    assert capture.body[:5] == b"head "
    assert capture.kept == limit
    assert capture.cut
    assert capture.wire_bytes == len(body)
    assert peak < 4 * MB, peak
