"""The LLM proxy's records waiting for a recorder thread, bounded in count and in size.

A host can finish calls faster than they are stored (a flood of calls, a slow database); each
waiting record holds up to twice ``RESPONSE_BODY_LIMIT`` of body text. So the queue is bounded
(``PROXY_RECORD_QUEUE_COUNT`` records, ``PROXY_RECORD_QUEUE_LIMIT`` characters of body and
header text) and a record that does not fit is never lost silently (docs/decisions/0300):

* it waits as a **stub** instead — its headers, status and timing, its bodies left out, and a
  note saying so and why — while fewer than as many stubs again wait;
* past that it is **dropped**, logged, and counted against its key: the next record of that key
  that is stored carries the count ("N calls before this one were passed on but not recorded").

The host's call is never held back: it has passed before its record is queued.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings

from conversations.loop.wire import WireExchange

logger = logging.getLogger(__name__)

Store = Callable[[WireExchange], None]


def record_size(exchange: WireExchange) -> int:
    """What a waiting record holds, in characters of its bodies and headers (about its bytes)."""
    headers = sum(
        len(name) + len(value)
        for headers in (exchange.request_headers, exchange.response_headers)
        for name, value in headers.items()
    )
    return len(exchange.request_body) + len(exchange.response_body) + len(exchange.error) + headers


def stub(exchange: WireExchange, why: str) -> WireExchange:
    """``exchange`` without its bodies, its error saying what was left out and ``why``."""
    left_out = (
        f"its request and response bodies ({len(exchange.request_body):,} and "
        f"{len(exchange.response_body):,} characters) were passed on whole but not recorded: {why}"
    )
    return dataclasses.replace(
        exchange,
        request_body="",
        response_body="",
        search_text=None,
        error="; ".join(filter(None, [exchange.error, left_out])),
    )


class PendingRecords:
    """A pool of recorder threads whose waiting records are bounded (the module's docstring)."""

    def __init__(self, workers: int, name: str) -> None:
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        self._lock = threading.Lock()
        self.count = 0
        self.size = 0
        self.stubs = 0
        # Calls of a key (by its id) dropped since its last stored record.
        self.dropped: dict[int, int] = {}

    @property
    def idle(self) -> bool:
        with self._lock:
            return self.count == 0

    def submit(self, owner: int, exchange: WireExchange, store: Store) -> str:
        """Queue ``exchange`` (a call of key ``owner``) for ``store`` in a recorder thread, whole
        if it fits, else as a stub, else not at all; returns which: "whole", "stub", "dropped"."""
        limit_count = int(settings.PROXY_RECORD_QUEUE_COUNT)
        limit_size = int(settings.PROXY_RECORD_QUEUE_LIMIT)
        size = record_size(exchange)
        with self._lock:
            if self.count - self.stubs < limit_count and self.size + size <= limit_size:
                kind = "whole"
            elif self.stubs < limit_count:
                kind = "stub"
                why = (
                    f"its record alone passes PROXY_RECORD_QUEUE_LIMIT ({limit_size:,} characters)"
                    if size > limit_size
                    else f"the recorder's queue was full ({self.count:,} records, {self.size:,} "
                    f"characters waiting; PROXY_RECORD_QUEUE_COUNT {limit_count:,}, "
                    f"PROXY_RECORD_QUEUE_LIMIT {limit_size:,})"
                )
                exchange = stub(exchange, why)
                size = record_size(exchange)
            else:
                self.dropped[owner] = self.dropped.get(owner, 0) + 1
                logger.warning(
                    "the LLM proxy's recorder queue is full (%s records, %s stubs waiting): a call of "
                    "proxy key %s was passed on but not recorded (%s)",
                    self.count,
                    self.stubs,
                    owner,
                    exchange.label,
                )
                return "dropped"
            missed = self.dropped.pop(owner, 0)
            self.count += 1
            self.size += size
            self.stubs += kind == "stub"
        if missed:
            exchange = dataclasses.replace(
                exchange,
                error="; ".join(
                    filter(
                        None,
                        [
                            exchange.error,
                            f"{missed:,} call(s) of this key before this one were passed on but not "
                            "recorded: the recorder's queue was full",
                        ],
                    )
                ),
            )
        self.pool.submit(self._run, store, exchange, size, kind == "stub")
        return kind

    def _run(self, store: Store, exchange: WireExchange, size: int, stubbed: bool) -> None:
        try:
            store(exchange)
        finally:
            with self._lock:
                self.count -= 1
                self.size -= size
                self.stubs -= stubbed
