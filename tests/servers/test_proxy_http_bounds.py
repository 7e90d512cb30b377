"""The HTTP MCP proxy stores what a server floods it with in batches, within a bound: an answer
stream of thousands of small notifications is stored in a few writes, not one per event, and
while storing is behind, what waits is bounded by ``PROXY_QUEUE_LIMIT`` (per key): the excess is
counted and recorded as messages not kept, never held in memory."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.contrib.auth import get_user_model

from conversations.proxy import recording
from conversations.proxy.keys import create_key
from conversations.proxy.models import ProxyKey
from inspector.asgi import application
from servers.models import McpServer
from servers.proxy.http import stores_pending
from tests.servers.proxy.http_harness import RawUpstream, served
from tests.servers.proxy.support import recorded
from tests.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

CALL = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "work", "arguments": {}}}
EVENTS = 3000


def _note(n: int) -> bytes:
    note = {
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": {"progressToken": 1, "progress": n, "message": "p" * 500},
    }
    return b"event: message\ndata: " + json.dumps(note).encode() + b"\n\n"


@pytest.fixture
def app_url() -> Iterator[str]:
    with served(application) as url:
        yield url


@pytest.fixture
def flood() -> Iterator[str]:
    fake = RawUpstream()
    answer = {"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text", "text": "done"}]}}
    fake.parts = [
        *(_note(n) for n in range(EVENTS)),
        b"event: message\ndata: " + json.dumps(answer).encode() + b"\n\n",
    ]
    with served(fake) as upstream:
        McpServer.objects.create(name="flood", transport="http", url=f"{upstream}/mcp", enabled=True)
        yield upstream


def _key() -> tuple[ProxyKey, str]:
    return create_key(get_user_model().objects.create_user("alice"), name="laptop")


def _call(app_url: str, raw: str) -> httpx.Response:
    return httpx.post(
        f"{app_url}/proxy/{raw}/mcp/flood",
        json=CALL,
        headers={"Accept": "application/json, text/event-stream"},
        timeout=120,
    )


def test_a_flood_of_events_is_stored_whole_in_a_few_writes(
    app_url: str, flood: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes: list[int] = []
    stored = recording._mcp

    def counted(*args: Any, **kwargs: Any) -> list[int]:
        writes.append(len(kwargs["records"]))
        return stored(*args, **kwargs)

    monkeypatch.setattr(recording, "_mcp", counted)
    key, raw = _key()

    answer = _call(app_url, raw)

    assert answer.status_code == 200 and answer.text.count("notifications/progress") == EVENTS
    assert wait_until(lambda: stores_pending() == 0 and len(recorded(key)) >= EVENTS + 1, 120)
    assert len(recorded(key)) == EVENTS + 1 and sum(writes) == EVENTS + 1
    assert len(writes) <= EVENTS // 20, f"{len(writes)} writes for {EVENTS + 1} records"


def test_what_waits_to_be_stored_is_bounded_and_the_excess_recorded_as_not_kept(
    app_url: str, flood: str, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    settings.PROXY_QUEUE_LIMIT = 50_000
    release = threading.Event()
    stored = recording._mcp

    def behind(*args: Any, **kwargs: Any) -> list[int]:
        release.wait(60)  # storing is behind until the whole flood has passed
        return stored(*args, **kwargs)

    monkeypatch.setattr(recording, "_mcp", behind)
    key, raw = _key()

    answer = _call(app_url, raw)
    release.set()

    assert answer.status_code == 200 and answer.text.count("notifications/progress") == EVENTS
    assert wait_until(
        lambda: stores_pending() == 0 and any(row.label == "not kept" for row in recorded(key)), 60
    )
    rows = recorded(key)
    notes = [row for row in rows if row.label == "not kept"]
    not_kept = 0
    for note in notes:  # one each time the queue had room again
        found = re.search(
            r"([\d,]+) messages \(([\d,]+) characters\) passed while the recorder was behind", note.error
        )
        assert found, note.error
        not_kept += int(found[1].replace(",", ""))
    kept = len(rows) - len(notes)
    assert kept + not_kept == EVENTS + 1 and not_kept > EVENTS // 2
