"""Forwarding on its own (``conversations.proxy.forward.relay``), served by a real ASGI server: the
bytes pass unchanged both ways and as they arrive, and the exchange handed on holds what passed."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator

import httpx2
import pytest
from django.test import override_settings

from conversations.proxy import forward
from tests.conversations.proxy import relay_urls
from tests.conversations.proxy.llm_fakes import FakeUpstream, Reply, Served, ServedApp
from tests.support import free_port, wait_until

# The served app's own background work (the stale-turn reaper) reads the database.
pytestmark = pytest.mark.django_db(transaction=True)

# An odd body on purpose: spacing, key order and escapes a re-serialization would change.
REQUEST_BODY = (
    b'{"model":"fake",  "stream": true,\n "messages":[{"role":"user","content":"caf\\u00e9 \xc3\xa9"}]}'
)


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    fake = FakeUpstream()
    with Served(fake) as served:
        relay_urls.TARGET.url = served.url
        relay_urls.TARGET.done.clear()
        relay_urls.TARGET.limit = 1_000_000
        yield fake
        fake.release()


@pytest.fixture
def proxy() -> Iterator[str]:
    with (
        override_settings(ROOT_URLCONF="tests.conversations.proxy.relay_urls"),
        ServedApp() as served,
    ):
        yield f"{served.url}/relay"


def _done(count: int = 1) -> list[forward.WireExchange]:
    assert wait_until(lambda: len(relay_urls.TARGET.done) >= count, 30), "no exchange was handed on"
    return relay_urls.TARGET.done


def test_a_stream_passes_chunk_by_chunk_and_byte_identical_both_ways(
    upstream: FakeUpstream, proxy: str
) -> None:
    chunks = [b'data: {"n": 1}\n\n', b'data: {"n": 2}\n\n', b"data: [DONE]\n\n"]
    upstream.next_reply = Reply(chunks, headers=[("content-type", "text/event-stream")], hold_after=1)

    with (
        httpx2.Client(timeout=30) as host,
        host.stream(
            "POST",
            f"{proxy}/v1/chat/completions",
            content=REQUEST_BODY,
            headers={"content-type": "application/json"},
        ) as response,
    ):
        pieces = response.iter_raw()
        first = b""
        while len(first) < len(chunks[0]):
            first += next(pieces)
        # The upstream still holds the rest back: what arrived came through as it was sent.
        assert first == chunks[0]
        assert not upstream.gate.is_set()
        assert relay_urls.TARGET.done == []
        upstream.release()
        received = first + b"".join(pieces)

    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream"
    assert received == b"".join(chunks)
    assert upstream.received[0].body == REQUEST_BODY
    [exchange] = _done()
    assert exchange.label == "POST /v1/chat/completions"
    assert exchange.request_body.encode("utf-8", "surrogateescape") == REQUEST_BODY
    assert exchange.response_body == b"".join(chunks).decode()
    assert exchange.status == "200"
    assert exchange.error == ""


def test_the_hosts_headers_go_on_less_hop_by_hop_ones_and_the_upstreams_come_back(
    upstream: FakeUpstream, proxy: str
) -> None:
    upstream.next_reply = Reply(
        [b"{}"],
        headers=[("content-type", "application/json"), ("x-request-id", "req-7"), ("set-cookie", "a=1")],
    )

    response = httpx2.post(
        f"{proxy}/v1/messages?beta=true",
        content=b"{}",
        headers={
            "authorization": "Bearer host-own-credential",
            "x-api-key": "host-key",
            "anthropic-version": "2023-06-01",
            "proxy-authorization": "Basic c2VjcmV0",
            "te": "trailers",
            "x-inspector-session": "s-1",
        },
        timeout=30,
    )

    seen = upstream.received[0]
    assert seen.path == "/v1/messages"
    assert seen.query == b"beta=true"
    assert seen.header("authorization") == "Bearer host-own-credential"
    assert seen.header("x-api-key") == "host-key"
    assert seen.header("anthropic-version") == "2023-06-01"
    for dropped in ("proxy-authorization", "te", "x-inspector-session"):
        assert seen.header(dropped) == "", dropped
    assert response.headers["x-request-id"] == "req-7"
    assert response.headers["set-cookie"] == "a=1"
    # The project's own security headers are still added.
    assert response.headers["x-content-type-options"] == "nosniff"


def test_a_compressed_body_passes_compressed_and_is_recorded_inflated(
    upstream: FakeUpstream, proxy: str
) -> None:
    text = json.dumps({"choices": [{"message": {"content": "x" * 5000}}]}).encode()
    packed = gzip.compress(text)
    upstream.next_reply = Reply(
        [packed[:100], packed[100:]],
        headers=[("content-type", "application/json"), ("content-encoding", "gzip")],
    )

    with (
        httpx2.Client(timeout=30) as host,
        host.stream("POST", f"{proxy}/v1/chat/completions", content=b"{}") as response,
    ):
        wire = b"".join(response.iter_raw())

    assert response.headers["content-encoding"] == "gzip"
    assert wire == packed
    [exchange] = _done()
    assert exchange.response_body == text.decode()
    assert exchange.error == ""


def test_a_body_past_the_limit_passes_whole_and_is_recorded_cut_and_marked(
    upstream: FakeUpstream, proxy: str
) -> None:
    relay_urls.TARGET.limit = 1000
    body = b"y" * 5000
    upstream.next_reply = Reply([body[:3000], body[3000:]])

    response = httpx2.post(f"{proxy}/v1/chat/completions", content=b"{}", timeout=30)

    assert response.content == body
    [exchange] = _done()
    assert exchange.response_body == "y" * 1000
    assert "response body: the record was cut at 1,000 bytes (RESPONSE_BODY_LIMIT)" in exchange.error
    assert "5,000 bytes over the wire" in exchange.error


def test_a_request_past_the_limit_goes_on_whole_and_is_recorded_cut_and_marked(
    upstream: FakeUpstream, proxy: str
) -> None:
    relay_urls.TARGET.limit = 1000
    body = b"z" * 4000
    upstream.next_reply = Reply([b"{}"])

    response = httpx2.post(f"{proxy}/v1/chat/completions", content=body, timeout=30)

    assert response.status_code == 200
    assert upstream.received[0].body == body
    [exchange] = _done()
    assert exchange.request_body == "z" * 1000
    assert "request body: the record was cut at 1,000 bytes" in exchange.error


def test_an_upstream_error_passes_through_as_it_came(upstream: FakeUpstream, proxy: str) -> None:
    error = b'{"error": {"message": "messages: field required", "type": "invalid_request_error"}}'
    upstream.next_reply = Reply([error], status=400)

    response = httpx2.post(f"{proxy}/v1/chat/completions", content=b"{not json", timeout=30)

    assert response.status_code == 400
    assert response.content == error
    assert upstream.received[0].body == b"{not json"
    [exchange] = _done()
    assert exchange.status == "400"
    assert exchange.request_body == "{not json"
    assert exchange.response_body == error.decode()


def test_an_upstream_that_is_down_gets_the_host_a_502_that_says_why_and_is_handed_on(proxy: str) -> None:
    relay_urls.TARGET.url = f"http://127.0.0.1:{free_port()}"
    relay_urls.TARGET.done.clear()

    response = httpx2.post(f"{proxy}/v1/chat/completions", content=b'{"model": "m"}', timeout=30)

    assert response.status_code == 502
    error = response.json()["error"]
    assert error["type"] == "upstream_unreachable"
    assert "could not reach the upstream http://127.0.0.1:" in error["message"]
    [exchange] = _done()
    assert exchange.status == "error"
    assert "ConnectError" in exchange.error
    assert exchange.request_body == '{"model": "m"}'
    assert exchange.response_body == ""


def test_a_host_that_goes_away_mid_stream_leaves_what_had_passed(upstream: FakeUpstream, proxy: str) -> None:
    chunks = [b"data: one\n\n", b"data: two\n\n"]
    upstream.next_reply = Reply(chunks, headers=[("content-type", "text/event-stream")], hold_after=1)

    with (
        httpx2.Client(timeout=30) as host,
        host.stream("POST", f"{proxy}/v1/chat/completions", content=b"{}") as response,
    ):
        first = b""
        pieces = response.iter_raw()
        while len(first) < len(chunks[0]):
            first += next(pieces)
    # The host's connection is closed here, the upstream still holding its second chunk.

    [exchange] = _done()
    assert exchange.response_body == "data: one\n\n"
    assert "the host went away mid-body" in exchange.error
    assert exchange.status == "200"


def test_an_upstream_that_breaks_off_mid_stream_breaks_the_hosts_answer_too_and_is_recorded(
    upstream: FakeUpstream, proxy: str
) -> None:
    chunks = [b"data: one\n\n", b"data: two\n\n"]
    upstream.next_reply = Reply(chunks, headers=[("content-type", "text/event-stream")], break_before=1)

    received = b""
    with (
        pytest.raises(httpx2.HTTPError),
        httpx2.Client(timeout=30) as host,
        host.stream("POST", f"{proxy}/v1/chat/completions", content=b"{}") as response,
    ):
        for chunk in response.iter_raw():
            received += chunk

    # The host sees the break as the upstream made it, not a clean end.
    assert received == chunks[0]
    [exchange] = _done()
    assert exchange.response_body == "data: one\n\n"
    assert "the upstream stopped sending mid-body" in exchange.error
