"""The stdio proxy's recorder: a thread that turns copies of the forwarded bytes into records.

The byte pumps only ``tap`` what they forwarded (a queue put, never a wait); everything else —
splitting lines, pairing, storing, spooling — happens here, off the byte path. Memory is
bounded: past ``queue_limit`` queued bytes a chunk is not queued, only counted, and the record
of the line it belonged to says how much was not kept.

Storing: ``store(session, server_name, records)`` (``record_mcp`` in production) raises
``django.db.Error`` when the database is unreachable; the records then go to the spool, and the
spool is imported when a retry (exponential backoff, at most ``MAX_BACKOFF`` seconds apart)
finds the database back. Records are kept in order: while anything is spooled, new records are
spooled behind it.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import TextIO

from django.db import Error as DatabaseError

from conversations.loop.wire import WireExchange
from servers.proxy.pairing import Pairer
from servers.proxy.spool import Spool, redacted

Store = Callable[[str | None, str, Sequence[WireExchange]], object]
FLUSH_SECONDS = 0.2
FIRST_BACKOFF = 0.5
MAX_BACKOFF = 30.0
_END = ("", None, 0)


class KeyRefused(Exception):
    """The proxy key is unknown or revoked: nothing can be recorded under it."""


class Recorder:
    """Records one proxied stdio session. ``tap`` is called from the event loop; the rest runs
    on the recorder's own thread."""

    def __init__(
        self,
        *,
        store: Store,
        spool: Spool,
        pairer: Pairer,
        session: str | None,
        server_name: str,
        secrets: tuple[str, ...] = (),
        queue_limit: int = 64_000_000,
        log: TextIO | None = None,
    ) -> None:
        self.store = store
        self.spool = spool
        self.pairer = pairer
        self.session = session
        self.server_name = server_name
        self.secrets = secrets
        self.queue_limit = queue_limit
        self.log = log if log is not None else sys.stderr
        self.stored = 0  # records stored (directly or from the spool), for tests and the final line
        self.spooled = 0
        self.refused = False
        self._queue: queue.SimpleQueue[tuple[str, bytes | None, int]] = queue.SimpleQueue()
        self._queued = 0
        self._lock = threading.Lock()
        self._down = False
        self._backoff = FIRST_BACKOFF
        self._retry_at = 0.0
        self._thread = threading.Thread(target=self._run, name="proxy-recorder", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def tap(self, stream: str, data: bytes) -> None:
        """A copy of bytes just forwarded on ``stream``. Never blocks."""
        with self._lock:
            keep = self._queued + len(data) <= self.queue_limit
            if keep:
                self._queued += len(data)
        self._queue.put((stream, data, 0) if keep else (stream, None, len(data)))

    def finish(self, timeout: float) -> bool:
        """The session ended: record what is left. False if that took longer than ``timeout``."""
        self._queue.put(_END)
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        self._retry()  # what an earlier proxy of this key left in the spool
        last_flush = time.monotonic()
        ended = False
        while not ended:
            timeout = None
            if self.pairer.finished:
                timeout = max(0.0, last_flush + FLUSH_SECONDS - time.monotonic())
            if self._down:
                wait = max(0.0, self._retry_at - time.monotonic())
                timeout = wait if timeout is None else min(timeout, wait)
            try:
                item = self._queue.get(timeout=timeout)
            except queue.Empty:
                item = None
            while item is not None:
                if item is _END:
                    ended = True
                    break
                self._feed(item)
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    item = None
            if self._down and time.monotonic() >= self._retry_at:
                self._retry()
            if ended or time.monotonic() - last_flush >= FLUSH_SECONDS:
                records = self.pairer.close() if ended else self.pairer.take()
                self._deliver(records)
                last_flush = time.monotonic()
        if self._down:
            self._retry()

    def _feed(self, item: tuple[str, bytes | None, int]) -> None:
        stream, data, lost = item
        if data is None:
            self.pairer.lost(stream, lost)
            return
        with self._lock:
            self._queued -= len(data)
        self.pairer.feed(stream, data)

    def _deliver(self, records: list[WireExchange]) -> None:
        if not records or self.refused:
            return
        if not self._down:
            try:
                self.store(self.session, self.server_name, records)
            except KeyRefused:
                self._refuse()
                return
            except DatabaseError as exc:
                self._went_down(exc)
            else:
                self.stored += len(records)
                return
        self.spool.write(self.session, self.server_name, [redacted(r, self.secrets) for r in records])
        self.spooled += len(records)

    def _went_down(self, exc: BaseException) -> None:
        if not self._down:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            self.log.write(
                f"proxy: the inspector's database is unreachable ({first}); traffic passes on, "
                f"records are spooled to {self.spool.path} and imported when it is back\n"
            )
            self.log.flush()
        self._down = True
        self._retry_at = time.monotonic() + self._backoff
        self._backoff = min(self._backoff * 2, MAX_BACKOFF)

    def _refuse(self) -> None:
        self.refused = True
        self.log.write("proxy: the proxy key is unknown or revoked; traffic passes on, nothing is recorded\n")
        self.log.flush()

    def _retry(self) -> None:
        """Import the spool (this process's and any an earlier one of this key left)."""
        if self.refused or not self.spool.pending():
            self._down = False
            return
        try:
            self.stored += self.spool.import_all(self.store)
        except KeyRefused:
            self._refuse()
        except DatabaseError as exc:
            self._went_down(exc)
        else:
            if self._down:
                self.log.write("proxy: the database is back; the spooled records are imported\n")
                self.log.flush()
            self._down = False
            self._backoff = FIRST_BACKOFF
