"""Nothing a host sends makes the LLM proxy spend unbounded memory: a request body streams to
the upstream as it arrives and the record keeps only up to the body limit; the records waiting
to be stored are bounded in count and size, and a record that does not fit is stored as a
marked stub or, past that, counted on the key's next record — never lost silently. A record
step, stored or not, gives back what it grew the process by."""

from __future__ import annotations

import gc
import re
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User
from django.db import DatabaseError
from pytest_django.fixtures import Settings

from conversations.loop.wire import WireExchange
from conversations.models import Exchange
from conversations.proxy import llm, recording
from conversations.proxy.keys import create_key
from conversations.proxy.pending import PendingRecords
from inspector import memory
from tests.conversations.proxy.llm_fakes import FakeUpstream
from tests.support import wait_until

# This module's calls are answered at once: the upstream fake's stream is never held back.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.upstream_released]

CALL = b'{"model": "fake", "messages": [{"role": "user", "content": "hi"}]}'
MB = 1024 * 1024


def _exchange(body: str = "x" * 100) -> WireExchange:
    return WireExchange(
        channel="llm",
        label="POST /v1/chat/completions",
        started_at=datetime.now(UTC),
        request_body=body,
        response_body=body,
    )


def test_the_recorders_queue_is_bounded_and_what_does_not_fit_is_marked_or_counted(
    settings: Settings,
) -> None:
    settings.PROXY_RECORD_QUEUE_COUNT = 2
    settings.PROXY_RECORD_QUEUE_LIMIT = 10_000
    pending = PendingRecords(workers=1, name="test-record")
    gate = threading.Event()
    stored: list[WireExchange] = []

    def store(exchange: WireExchange) -> None:
        gate.wait(30)
        stored.append(exchange)

    try:
        kinds = [pending.submit(7, _exchange(), store) for _ in range(6)]
        # Alone past the size bound: a stub whatever the queue holds (here: room for none).
        huge = pending.submit(8, _exchange("y" * 20_000), store)
        assert kinds == ["whole", "whole", "stub", "stub", "dropped", "dropped"]
        assert huge == "dropped"
        assert pending.count == 4 and pending.size < 10_000
        gate.set()
        assert wait_until(lambda: pending.idle, 30)
        assert pending.submit(7, _exchange("y" * 20_000), store) == "stub"
        assert pending.submit(8, _exchange(), store) == "whole"
        assert wait_until(lambda: pending.idle, 30)
    finally:
        gate.set()
        pending.pool.shutdown(wait=True)

    whole = [exchange for exchange in stored if exchange.request_body]
    stubs = [exchange for exchange in stored if not exchange.request_body]
    assert len(whole) == 3 and len(stubs) == 3
    assert all("PROXY_RECORD_QUEUE_COUNT 2" in stub.error for stub in stubs[:2])
    assert "its record alone passes PROXY_RECORD_QUEUE_LIMIT (10,000 characters)" in stubs[2].error
    assert "20,000 and 20,000 characters) were passed on whole but not recorded" in stubs[2].error
    # The two calls of key 7 dropped are counted on its next record; key 8's one on its own.
    assert "2 call(s) of this key before this one were passed on but not recorded" in stubs[2].error
    assert "1 call(s) of this key before this one" in stored[-1].error


def test_a_huge_request_body_streams_to_the_upstream_whole_and_is_recorded_cut_and_marked(
    app: str, upstream: tuple[FakeUpstream, str], alice: User, settings: Settings
) -> None:
    settings.RESPONSE_BODY_LIMIT = 100_000
    fake, base = upstream
    key, raw = create_key(alice, openai_upstream=f"{base}/v1")
    body = b'{"model": "fake", "messages": [{"role": "user", "content": "' + b"z" * (8 * MB) + b'"}]}'

    def pieces() -> Iterator[bytes]:
        for start in range(0, len(body), 256 * 1024):
            yield body[start : start + 256 * 1024]

    answer = httpx.post(
        f"{app}/proxy/{raw}/openai/v1/chat/completions",
        content=pieces(),
        headers={"Content-Type": "application/json"},
        timeout=60,
    )

    assert answer.status_code == 200
    assert fake.received[0].body == body
    assert wait_until(lambda: Exchange.objects.filter(conversation__owner=alice).exists(), 30)
    exchange = Exchange.objects.get(conversation__owner=alice)
    assert exchange.request_body.encode() == body[:100_000]
    assert (
        f"request body: the record was cut at 100,000 bytes (RESPONSE_BODY_LIMIT); the whole body, "
        f"{len(body):,} bytes over the wire, was passed on"
    ) in exchange.error


def test_a_flood_of_concurrent_calls_all_pass_and_every_one_is_recorded_or_counted(
    app: str, upstream: tuple[FakeUpstream, str], alice: User, settings: Settings
) -> None:
    settings.PROXY_RECORD_QUEUE_COUNT = 1
    _, base = upstream
    key, raw = create_key(alice, openai_upstream=f"{base}/v1")
    calls = 40

    def call(_: int) -> httpx.Response:
        return httpx.post(
            f"{app}/proxy/{raw}/openai/v1/chat/completions",
            content=CALL,
            headers={"Content-Type": "application/json"},
            timeout=60,
        )

    with ThreadPoolExecutor(max_workers=calls) as hosts:
        answers = list(hosts.map(call, range(calls)))
    assert all(answer.status_code == 200 for answer in answers)
    assert wait_until(lambda: llm.idle(), 60)
    # One more once the queue is empty: it carries the count of any call dropped before it.
    assert call(calls).status_code == 200
    assert wait_until(lambda: llm.idle(), 60)

    rows = list(Exchange.objects.filter(conversation__owner=alice, channel="llm"))
    counted = sum(
        int(found.group(1).replace(",", ""))
        for row in rows
        if (found := re.search(r"([\d,]+) call\(s\) of this key before this one", row.error))
    )
    assert len(rows) + counted == calls + 1
    assert rows and all(row.request_body or "not recorded" in row.error for row in rows)


@pytest.fixture
def no_automatic_collection() -> Iterator[None]:
    gc.collect()
    gc.disable()
    yield
    gc.enable()


class _Node:
    def __init__(self, payload: bytes | None) -> None:
        self.payload = payload
        self.other: _Node | None = None


@pytest.mark.usefixtures("no_automatic_collection")
def test_a_record_step_gives_back_what_the_process_grew_by_even_when_it_fails(
    app: str,
    upstream: tuple[FakeUpstream, str],
    alice: User,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, base = upstream
    _, raw = create_key(alice, openai_upstream=f"{base}/v1")
    failures: list[str] = []

    def database_gone(*args: Any, **kwargs: Any) -> int:
        failures.append(kwargs["fmt"])
        raise DatabaseError("the database went away")

    monkeypatch.setattr(recording, "record_model_call", database_gone)
    memory.release_if_grown()
    before = memory.resident_bytes()
    # What a big record left behind: held by a reference cycle alone (only a collection frees it).
    first, second = _Node(b"x" * (128 * MB)), _Node(None)
    first.other, second.other = second, first
    del first, second
    assert memory.resident_bytes() - before > 100 * MB

    answer = httpx.post(
        f"{app}/proxy/{raw}/openai/v1/chat/completions",
        content=CALL,
        headers={"Content-Type": "application/json"},
        timeout=30,
    )

    assert answer.status_code == 200
    assert wait_until(lambda: failures == ["openai_chat"] and llm.idle(), 30)
    assert memory.resident_bytes() - before < 16 * MB


def test_a_host_that_goes_away_while_sending_its_body_leaves_a_record_of_what_came(
    app: str, upstream: tuple[FakeUpstream, str], alice: User
) -> None:
    _, base = upstream
    _, raw = create_key(alice, openai_upstream=f"{base}/v1")
    host, port = app.removeprefix("http://").split(":")
    sent = b'{"model": "fake", "messages": [' + b" " * 20_000

    with socket.create_connection((host, int(port)), timeout=30) as connection:
        connection.sendall(
            f"POST /proxy/{raw}/openai/v1/chat/completions HTTP/1.1\r\nHost: {host}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {10 * MB}\r\n\r\n".encode()
            + sent
        )
    # The host is gone: what it had sent is recorded, marked.
    assert wait_until(lambda: _stored(alice), 30)
    exchange = Exchange.objects.get(conversation__owner=alice)
    # However far it got before the server saw it go: its first piece or none.
    assert (
        "the host went away while sending its request body" in exchange.error
        or "the host went away before sending its request body; nothing was forwarded" in exchange.error
    )
    assert exchange.request_body.encode() == sent[: len(exchange.request_body.encode())]


def _stored(user: User) -> bool:
    return Exchange.objects.filter(conversation__owner=user, channel="llm").exists()
