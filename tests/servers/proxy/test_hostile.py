"""Hostile traffic through the MCP proxies: a line of tens of megabytes and a line nested 100,000
levels deep through ``manage.py proxy stdio`` and its recorder (bytes unchanged both ways, the
record bounded and marked, the recorder still recording after them, the proxy's memory bounded
by its limits, not by the line); header values that are not UTF-8 or carry bidirectional and
control characters through the HTTP proxy (forwarded as they are both ways, recorded, shown
inert); a deeply nested body and event through the HTTP proxy."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from conversations.models import Exchange
from conversations.proxy.keys import create_key
from conversations.proxy.models import ProxyKey, ProxySession
from inspector.asgi import application
from servers.models import McpServer
from servers.proxy.pairing import HOST, SERVER, TOO_DEEP, Pairer
from tests.servers.proxy.http_harness import RawUpstream, served
from tests.servers.proxy.support import proxy_command, proxy_env, recorded
from tests.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

DEPTH = 100_000
NESTED = (
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"a":'
    + b"[" * DEPTH
    + b"]" * DEPTH
    + b"}}}\n"
)
LONG_BYTES = 40_000_000
LONG = b'{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"' + b"L" * LONG_BYTES + b'"}}\n'
LINE_LIMIT = 1_000_000
QUEUE_LIMIT = 4_000_000


def _alice_key() -> tuple[ProxyKey, str]:
    alice = get_user_model().objects.create_user("alice", password="pw")
    return create_key(alice, name="laptop")


def _labels(key: ProxyKey) -> list[str]:
    return list(
        Exchange.objects.filter(turn__conversation__proxy_session__key=key).values_list("label", flat=True)
    )


def _count(key: ProxyKey, **where: str) -> int:
    return Exchange.objects.filter(turn__conversation__proxy_session__key=key, **where).count()


def _notification(name: str) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "method": name}).encode() + b"\n"


def _peak_rss_kib(pid: int) -> int:
    """The process's peak resident memory so far (Linux's VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM in /proc")


def test_the_pairer_keeps_a_line_nested_too_deep_to_read_as_text_and_goes_on_pairing() -> None:
    pairer = Pairer(line_limit=10_000_000, body_limit=10_000_000)
    pairer.feed(HOST, NESTED)
    pairer.feed(HOST, b'{"jsonrpc":"2.0","id":2,"method":"ping"}\n')
    pairer.feed(SERVER, b'{"jsonrpc":"2.0","id":2,"result":{}}\n')
    deep, ping = pairer.take()
    assert (deep.label, deep.direction, deep.error) == ("stdin (not JSON)", "local", TOO_DEEP)
    assert deep.response_body.encode() == NESTED.rstrip(b"\n")
    assert (ping.label, ping.status) == ("ping", "ok")


@pytest.fixture
def echo_proxy(tmp_path: Path) -> Iterator[tuple[ProxyKey, subprocess.Popen[bytes], bytearray]]:
    """``proxy stdio`` around ``cat`` (a server that says back every byte it is sent) with small
    limits, its stdout drained into the yielded buffer."""
    key, raw = _alice_key()
    env = proxy_env(
        tmp_path / "var", MCP_STDOUT_LINE_LIMIT=str(LINE_LIMIT), PROXY_QUEUE_LIMIT=str(QUEUE_LIMIT)
    )
    proxy = subprocess.Popen(
        proxy_command(raw, "echo", "cat", session="hostile"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    out = bytearray()

    def drain() -> None:
        assert proxy.stdout is not None
        while chunk := proxy.stdout.read1(1 << 20):
            out.extend(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    try:
        yield key, proxy, out
    finally:
        if proxy.poll() is None:
            proxy.kill()
        proxy.wait(60)
        reader.join(60)


def test_a_line_of_tens_of_megabytes_and_one_nested_100k_deep_pass_unchanged_and_are_recorded_bounded(
    echo_proxy: tuple[ProxyKey, subprocess.Popen[bytes], bytearray],
) -> None:
    key, proxy, out = echo_proxy
    assert proxy.stdin is not None
    first = _notification("notifications/initialized")
    proxy.stdin.write(first)
    proxy.stdin.flush()
    # Started, and its first records stored: what it holds from here on is what the lines cost.
    assert wait_until(lambda: len(_labels(key)) >= 2, 60)
    before = _peak_rss_kib(proxy.pid)

    last = _notification("notifications/after")
    sent = first + LONG + NESTED + last
    # One at a time, each recorded both ways before the next is sent (so a chunk the recorder
    # had to let pass uncopied while behind belongs to the long line alone).
    proxy.stdin.write(LONG)
    proxy.stdin.flush()
    assert wait_until(lambda: _count(key, error__contains="MCP_STDOUT_LINE_LIMIT") == 2, 120)
    proxy.stdin.write(NESTED)
    proxy.stdin.flush()
    assert wait_until(lambda: _count(key, error=TOO_DEEP) == 2, 60)
    # The recorder outlived both lines: the one after them is recorded, both ways.
    proxy.stdin.write(last)
    proxy.stdin.flush()
    assert wait_until(lambda: _count(key, label="notifications/after") == 2, 60)
    peak = _peak_rss_kib(proxy.pid)
    proxy.stdin.close()
    assert proxy.wait(60) == 0
    stderr = proxy.stderr.read() if proxy.stderr is not None else b""

    assert bytes(out) == sent, "the echo did not come back byte for byte"
    assert b"Traceback" not in stderr, stderr.decode(errors="replace")[-3000:]
    rows = recorded(key)
    long_rows = [row for row in rows if "MCP_STDOUT_LINE_LIMIT" in row.error]
    assert {row.label for row in long_rows} == {"stdin (not JSON)", "stdout (not JSON)"}
    for row in long_rows:
        assert len(row.response_body) <= LINE_LIMIT + 100
        assert f"{len(LONG) - 1:,}" in row.error
    deep_rows = [row for row in rows if row.error == TOO_DEEP]
    assert {row.label for row in deep_rows} == {"stdin (not JSON)", "stdout (not JSON)"}
    assert all(row.response_body.encode() == NESTED.rstrip(b"\n") for row in deep_rows)
    # 40 MB crossed each way; the proxy held no more than its limits' worth of it.
    assert (peak - before) * 1024 < LONG_BYTES // 2, f"peak grew by {(peak - before) // 1024} MiB"

    conversation = ProxySession.objects.get(key=key).conversation
    page = Client()
    page.force_login(key.user)
    assert page.get(f"/c/{conversation.public_id}/").status_code == 200


# Not UTF-8, a right-to-left override, an escape sequence: what a hostile host or server may send.
ODD_VALUE = b"\xff\xfe caf\xc3\xa9 \xe2\x80\xae evil \x1b[31m red"


@pytest.fixture
def app_url() -> Iterator[str]:
    with served(application) as url:
        yield url


def _server(name: str, url: str) -> McpServer:
    return McpServer.objects.create(name=name, transport="http", url=url, enabled=True)


def test_header_values_of_any_bytes_pass_the_http_proxy_as_they_are_and_are_shown_inert(app_url: str) -> None:
    key, raw = _alice_key()
    fake = RawUpstream()
    fake.content_type = b"application/json"
    fake.extra_headers = [(b"x-server-note", ODD_VALUE)]
    fake.parts = [b'{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}']
    with served(fake) as upstream:
        _server("raw", f"{upstream}/mcp")
        answer = httpx.post(
            f"{app_url}/proxy/{raw}/mcp/raw",
            content=b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
            headers=[(b"Content-Type", b"application/json"), (b"X-Host-Note", ODD_VALUE)],
            timeout=30,
        )

    assert answer.status_code == 200 and answer.content == fake.parts[0]
    assert (b"x-server-note", ODD_VALUE) in answer.headers.raw
    assert fake.headers[0]["x-host-note"].encode("latin-1") == ODD_VALUE
    assert wait_until(lambda: any(row.label == "tools/list" for row in recorded(key)), 30)
    row = next(row for row in recorded(key) if row.label == "tools/list")
    assert row.status == "ok"
    for stored in (row.request_headers["x-host-note"], row.response_headers["x-server-note"]):
        assert "caf\u00e9" in stored and "\u202e" in stored

    conversation = ProxySession.objects.get(key=key).conversation
    page = Client()
    page.force_login(key.user)
    html = page.get(f"/c/{conversation.public_id}/").content.decode()
    assert "U+202E" in html and "\u202e" not in html and "\x1b" not in html


def test_a_body_and_an_event_nested_100k_deep_pass_the_http_proxy_and_are_recorded_as_text(
    app_url: str, settings: Any
) -> None:
    key, raw = _alice_key()
    fake = RawUpstream()
    nested_event = b"data: " + NESTED.rstrip(b"\n") + b"\n\n"
    fake.parts = [nested_event, b'data: {"jsonrpc":"2.0","method":"notifications/after"}\n\n']
    body = NESTED.rstrip(b"\n")
    with served(fake) as upstream:
        _server("raw", f"{upstream}/mcp")
        answer = httpx.post(
            f"{app_url}/proxy/{raw}/mcp/raw",
            content=body,
            headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream"},
            timeout=60,
        )

    assert answer.status_code == 200 and answer.content == b"".join(fake.parts)
    assert fake.received == [body]
    assert wait_until(lambda: len(recorded(key)) >= 3, 30)
    rows = recorded(key)
    sent = next(row for row in rows if row.label == "not JSON-RPC")
    assert sent.request_body.encode() == body and sent.error == TOO_DEEP
    event = next(row for row in rows if row.label == "event (not JSON)")
    assert event.response_body.encode() == body and event.error == TOO_DEEP
    assert any(row.label == "notifications/after" for row in rows)
