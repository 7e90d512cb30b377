"""An upstream that breaks off its answer never leaves the host waiting: under daphne (the web
process as ``make run``, the image and compose serve it), the host's connection ends within
moments of the break, with a body the host can tell is incomplete (no terminating 0-chunk), and
an answer that broke before its first byte is a 502 (a 504 for a timeout) the host gets at once.
The record says the upstream broke off.

The upstream here is a raw socket of our own, so it can break the framing itself: a chunk cut
short, a chunk size that is no number, silence after one event."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User

from conversations.models import Exchange
from conversations.proxy.keys import create_key
from tests.servers.proxy.support import REPO, proxy_env
from tests.support import free_port, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

Behaviour = Callable[[socket.socket], None]
SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
EVENT = b'data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hello"}}]}\n\n'
CHAT = b'{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}'


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n" % len(data) + data + b"\r\n"


def mid_chunk(connection: socket.socket) -> None:
    """A chunked answer that breaks off inside its second chunk."""
    connection.sendall(
        SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + _chunk(EVENT) + b"1000\r\nonly a bit"
    )


def bad_chunk(connection: socket.socket) -> None:
    """A chunked answer whose first chunk size is no number."""
    connection.sendall(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"ZZZZ\r\nhello\r\n0\r\n\r\n"
    )


def mid_event(connection: socket.socket) -> None:
    """A connection-close event stream cut off inside its second event."""
    connection.sendall(
        SSE_HEAD + b"Connection: close\r\n\r\n" + EVENT + b'data: {"id": "x", "choices": [{"hal'
    )


class RawUpstream:
    """A TCP server that reads each request's head and body, then does ``behaviour`` to the
    connection and closes it (``hold``: once the test ends). A plain close, not a reset: a reset
    would have the proxy's kernel drop what it had not read yet, and the break then comes before
    the first byte instead of where the test puts it."""

    def __init__(self, behaviour: Behaviour, *, hold: bool = False) -> None:
        self.behaviour = behaviour
        self.hold = hold
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.done = threading.Event()
        self.requests: list[bytes] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while not self.done.is_set():
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(connection,), daemon=True).start()

    def _answer(self, connection: socket.socket) -> None:
        with connection:
            received = b""
            while b"\r\n\r\n" not in received:
                received += connection.recv(65536)
            head, _, body = received.partition(b"\r\n\r\n")
            length = next(
                (
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                ),
                0,
            )
            while len(body) < length:
                body += connection.recv(65536)
            self.requests.append(body)
            self.behaviour(connection)
            if self.hold:
                self.done.wait(120)

    def __enter__(self) -> RawUpstream:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.listener.close()


def _answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except OSError:
        return False
    return True


@contextmanager
def daphne(var_dir: Path, **env: str) -> Iterator[tuple[int, Path]]:
    """The app under daphne, as the web process serves it, recording into this test's database;
    yields its port and its log."""
    port = free_port()
    log = var_dir / "daphne.log"
    environment = proxy_env(var_dir, WARM_START="0", **env)
    with log.open("w") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "daphne",
                "-b",
                "127.0.0.1",
                "-p",
                str(port),
                "inspector.asgi:application",
            ],
            cwd=REPO,
            env=environment,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            if not wait_until(lambda: _answers(port) or process.poll() is not None, 60) or process.poll():
                pytest.fail(f"daphne did not start:\n{log.read_text()[-3000:]}")
            yield port, log
        finally:
            process.terminate()
            process.wait(30)


@pytest.fixture
def web(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    with daphne(tmp_path / "var", MODEL_TIMEOUT_SECONDS="2", RESPONSE_BODY_LIMIT="1000") as served:
        yield served


@dataclass
class HostSaw:
    """What a host reading the answer on a raw socket saw: the bytes, whether the answer came
    whole (its Content-Length, or chunked up to the terminating 0-chunk), whether the connection
    closed, and whether the bound ran out first (the host left waiting)."""

    data: bytes
    whole: bool
    closed: bool
    waited_out: bool

    @property
    def status(self) -> int:
        return int(self.data.split(b" ", 2)[1]) if self.data.startswith(b"HTTP/") else 0

    @property
    def body(self) -> bytes:
        return self.data.partition(b"\r\n\r\n")[2]


def _whole(data: bytes) -> bool:
    head, found, body = data.partition(b"\r\n\r\n")
    if not found:
        return False
    lines = [line.lower() for line in head.split(b"\r\n")]
    for line in lines:
        if line.startswith(b"content-length:"):
            return len(body) >= int(line.split(b":", 1)[1])
    if b"transfer-encoding: chunked" in lines:
        return body.endswith(b"0\r\n\r\n") and (body == b"0\r\n\r\n" or body.endswith(b"\r\n0\r\n\r\n"))
    return False


def host_posts(port: int, path: str, body: bytes, *, bound: float = 20.0, read: int | None = None) -> HostSaw:
    """POST ``body`` to ``path`` on a kept-alive connection and read the answer until it is whole,
    the connection closes, or ``bound`` seconds pass; with ``read``, leave once that many bytes
    have come (the host goes away)."""
    request = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    data = b""
    with socket.create_connection(("127.0.0.1", port), timeout=bound) as connection:
        connection.sendall(request)
        deadline = time.monotonic() + bound
        while True:
            connection.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                piece = connection.recv(65536)
            except TimeoutError:
                return HostSaw(data, _whole(data), closed=False, waited_out=True)
            except ConnectionResetError:
                return HostSaw(data, _whole(data), closed=True, waited_out=False)
            if not piece:
                return HostSaw(data, _whole(data), closed=True, waited_out=False)
            data += piece
            if _whole(data) or (read is not None and len(data) >= read):
                return HostSaw(data, _whole(data), closed=False, waited_out=False)


def _llm_rows(user: User) -> list[Exchange]:
    return list(Exchange.objects.filter(conversation__owner=user, channel="llm").order_by("pk"))


def _recorded(user: User) -> Exchange:
    assert wait_until(lambda: bool(_llm_rows(user)), 30), "the call was not recorded"
    return _llm_rows(user)[0]


@pytest.fixture
def alice() -> User:
    return get_user_model().objects.create_user("alice")


def test_an_upstream_that_breaks_off_mid_chunk_ends_the_hosts_connection_with_an_incomplete_body(
    web: tuple[int, Path], alice: User
) -> None:
    port, _ = web
    with RawUpstream(mid_chunk) as upstream:
        _, raw = create_key(alice, openai_upstream=f"{upstream.url}/v1")
        saw = host_posts(port, f"/proxy/{raw}/openai/v1/chat/completions", CHAT)

    assert not saw.waited_out, f"the host was left waiting after {saw.data!r}"
    assert saw.status == 200 and EVENT in saw.body
    assert saw.closed and not saw.whole  # no terminating 0-chunk: the host can tell it broke off
    row = _recorded(alice)
    assert "the upstream stopped sending mid-body" in row.error


def test_an_upstream_whose_body_breaks_before_its_first_byte_gets_the_host_a_502_at_once(
    web: tuple[int, Path], alice: User
) -> None:
    port, _ = web
    with RawUpstream(bad_chunk) as upstream:
        _, raw = create_key(alice, openai_upstream=f"{upstream.url}/v1")
        saw = host_posts(port, f"/proxy/{raw}/openai/v1/chat/completions", CHAT)

    assert not saw.waited_out, f"the host was left waiting after {saw.data!r}"
    assert saw.status == 502 and saw.whole
    assert json.loads(saw.body)["error"]["type"] == "upstream_broke_off"
    assert "the upstream stopped sending mid-body" in _recorded(alice).error


def test_an_upstream_silent_past_the_model_timeout_ends_the_hosts_connection(
    web: tuple[int, Path], alice: User
) -> None:
    port, _ = web  # MODEL_TIMEOUT_SECONDS is 2 in this web process
    with RawUpstream(
        lambda connection: connection.sendall(SSE_HEAD + b"\r\n" + EVENT), hold=True
    ) as upstream:
        _, raw = create_key(alice, openai_upstream=f"{upstream.url}/v1")
        saw = host_posts(port, f"/proxy/{raw}/openai/v1/chat/completions", CHAT)

    assert not saw.waited_out, f"the host was left waiting after {saw.data!r}"
    assert saw.status == 200 and EVENT in saw.body and saw.closed and not saw.whole
    assert "ReadTimeout" in _recorded(alice).error


def test_an_event_stream_that_ends_mid_event_is_recorded_as_such(web: tuple[int, Path], alice: User) -> None:
    port, _ = web
    with RawUpstream(mid_event) as upstream:
        _, raw = create_key(alice, openai_upstream=f"{upstream.url}/v1")
        saw = host_posts(port, f"/proxy/{raw}/openai/v1/chat/completions", CHAT)

    assert not saw.waited_out and EVENT in saw.body
    assert "ended mid-event" in _recorded(alice).error


def test_a_host_that_leaves_an_endless_stream_is_recorded_with_what_passed_and_what_was_kept(
    web: tuple[int, Path], alice: User
) -> None:
    port, _ = web  # RESPONSE_BODY_LIMIT is 1,000 in this web process

    def endless(connection: socket.socket) -> None:
        connection.sendall(SSE_HEAD + b"\r\n")
        try:
            while True:
                connection.sendall(EVENT * 100)
        except OSError:
            return

    with RawUpstream(endless) as upstream:
        _, raw = create_key(alice, openai_upstream=f"{upstream.url}/v1")
        host_posts(port, f"/proxy/{raw}/openai/v1/chat/completions", CHAT, read=200_000)
        row = _recorded(alice)

    found = re.search(
        r"the host went away mid-body; ([\d,]+) bytes had passed until then, the record keeps the first "
        r"([\d,]+) bytes of it",
        row.error,
    )
    assert found, row.error
    assert int(found[1].replace(",", "")) >= 100_000 and found[2] == "1,000"
