"""Where the HTTP MCP proxy's records wait to be stored: one bounded queue per key and event loop,
drained by one storer at a time, many records to a write.

A server may send events faster than any database stores them one by one (an endless stream of
progress notifications: thousands a second). So what waits is bounded and stored in batches:

- a key's records wait in its queue, in the order they were made; its storer takes what has
  gathered (up to ``BATCH`` records of one session and server) and stores it with one
  ``record_mcp`` call — one transaction, one connection — while the next batch gathers;
- past ``PROXY_QUEUE_LIMIT`` characters of bodies waiting (the stdio proxy's bound, per key
  here), a group is not kept, only counted, and once the queue has room again a record says how
  many messages (and characters) were not kept, as the stdio proxy's recorder does.

What is in a queue is in memory: a web process that stops loses what had not been stored yet
(the stdio proxy spools; docs/proxy-mcp.md §7).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from asgiref.sync import sync_to_async
from django.conf import settings

from conversations.loop.wire import WireExchange
from conversations.proxy.recording import record_mcp

if TYPE_CHECKING:
    from servers.proxy.http import Route

log = logging.getLogger(__name__)

# The most records one write stores.
BATCH = 1000


@dataclass
class _Queue:
    waiting: deque[tuple[Route, list[WireExchange], int]] = field(default_factory=deque)
    size: int = 0
    not_kept: int = 0
    not_kept_size: int = 0
    task: asyncio.Task[None] | None = None


_queues: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[int, _Queue]] = weakref.WeakKeyDictionary()


def _size(record: WireExchange) -> int:
    return len(record.request_body) + len(record.response_body) + 200


def store(route: Route, records: Sequence[WireExchange]) -> None:
    """Queue ``records`` to be stored in the background (never in the way of the bytes)."""
    if not records:
        return
    loop = asyncio.get_running_loop()
    queue = _queues.setdefault(loop, {}).setdefault(route.key.pk, _Queue())
    size = sum(_size(record) for record in records)
    if queue.waiting and queue.size + size > settings.PROXY_QUEUE_LIMIT:
        queue.not_kept += len(records)
        queue.not_kept_size += size
    else:
        queue.waiting.append((route, list(records), size))
        queue.size += size
    if queue.task is None or queue.task.done():
        queue.task = loop.create_task(_drain(queue))


def stores_pending() -> int:
    """How many keys' records this process has yet to store (a server shutting down, or a test
    ending, waits for none to be left)."""
    return sum(
        1
        for queues in list(_queues.values())
        for queue in list(queues.values())
        if queue.waiting or queue.not_kept or (queue.task is not None and not queue.task.done())
    )


def _not_kept(queue: _Queue) -> WireExchange:
    record = WireExchange(
        channel="mcp",
        label="not kept",
        started_at=datetime.now(UTC),
        direction="server",
        status="error",
        error=(
            f"{queue.not_kept:,} messages ({queue.not_kept_size:,} characters) passed while the "
            "recorder was behind (PROXY_QUEUE_LIMIT) and are not kept"
        ),
    )
    queue.not_kept = queue.not_kept_size = 0
    return record


def _batch(queue: _Queue) -> tuple[Route, list[WireExchange]] | None:
    """The next write: the oldest groups of one session and server, up to ``BATCH`` records (a
    larger group whole), the count of what was not kept after them once the queue is empty."""
    if not queue.waiting:
        return None
    route, records, size = queue.waiting.popleft()
    queue.size -= size
    secrets = set(route.secrets)
    while queue.waiting and len(records) < BATCH:
        following, more, size = queue.waiting[0]
        if (following.session, following.server.name) != (route.session, route.server.name):
            break
        if len(records) + len(more) > BATCH:
            break
        queue.waiting.popleft()
        queue.size -= size
        records.extend(more)
        secrets.update(following.secrets)
    if queue.not_kept and not queue.waiting:
        records.append(_not_kept(queue))
    if secrets != set(route.secrets):
        route = replace(route, secrets=tuple(sorted(secrets)))
    return route, records


async def _drain(queue: _Queue) -> None:
    while True:
        batch = _batch(queue)
        if batch is None:
            return
        route, records = batch
        try:
            await sync_to_async(record_mcp, thread_sensitive=False)(
                route.key,
                session=route.session,
                server_name=route.server.name,
                records=records,
                secrets=route.secrets,
            )
        except Exception:
            log.exception("proxy: %d records of %s could not be stored", len(records), route.server.name)
