"""The record writer: a thread per process that commits queued batches of the record in the
order they were handed over, and rings each batch's doorbells only after its commit.

Moved out of ``conversations.record.recording`` beside the record store it writes through: the
recorder hands it its batches (``Queued``) and the function that commits a list of them in one
transaction (``conversations.record.recording`` merges them into one ``record.store.Batch``). While
the writer waits on the database a second thread, the preparer, makes the rows of the batches
queued behind; batches are prepared strictly in order, one at a time.

While batches keep coming (the last write ended less than ``RECORD_WRITE_LINGER_SECONDS``
ago) the writer waits that long for more before it writes, so a fast loop's batches go out a few
at a time instead of one each; a batch after a quiet spell goes at once, and so does everything
as soon as someone waits (``wait``, ``wait_all``) or the queue is long.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar

from django.conf import settings
from django.db import connection

from conversations.record.connections import discard_connection
from conversations.record.exchanges import release_connection
from conversations.record.store import FenceRefused

logger = logging.getLogger(__name__)


class Owner(Protocol):
    """The turn's side of the hand-over (its recorder), kept by the writer under its lock:
    how many of its batches are not yet written or dropped (``_drained`` is set while there
    are none), and the error of its first write that failed, until its loop has heard of it."""

    _outstanding: int
    _drained: threading.Event
    _write_error: BaseException | None


class Queued(Protocol):
    """One batch handed to the writer."""

    @property
    def owner(self) -> Owner: ...

    @property
    def big(self) -> bool:
        """Whether the connection writing it is not to be pooled again."""

    @property
    def writes(self) -> bool:
        """Whether it has rows to write (else it only rings doorbells)."""

    def ready(self) -> None:
        """Make its rows (once), keeping any error for ``live`` to report."""

    def live(self) -> bool:
        """Whether it is still to be written (its turn's earlier write did not fail)."""

    def lose(self) -> None:
        """Note that its rows are lost (a failed or dropped write)."""

    def publish(self) -> None:
        """Ring its doorbells (after its commit)."""


B = TypeVar("B", bound=Queued)


class RecordWriter(Generic[B]):
    """The process's record writer: a daemon thread that commits queued batches in order and
    then rings their doorbells. Batches that queue up while it writes go out together.

    A batch's rows are made (its ``ready``: redaction, the hash chain, the search spans)
    strictly in the order the batches were handed over: by the writer thread for the batches it
    takes, and, while it waits on the database, by a second thread, the preparer, for the
    batches queued behind (so a busy writer finds them ready). The preparer works only then: a
    lone batch is made and written by the writer alone, with no hand-over between threads on
    its way to the page."""

    # At most this many batches in one transaction (a bigger backlog is written in several).
    MOST_PER_WRITE = 200
    # A queue this long is written at once, lingering or not.
    LINGER_MOST = 8

    def __init__(self, commit: Callable[[Sequence[B]], None]) -> None:
        """``commit``: writes the batches given in one transaction, in order, or raises."""
        self.pid = os.getpid()
        self._write = commit
        # Handed over and not yet taken for a write; the first ``_ready`` of them are prepared.
        self._pending: deque[B] = deque()
        self._ready = 0
        self._busy = False  # a write is under way
        self._in_database = False  # the writer thread waits on the database
        # One lock, three conditions: the writer waits for work, the preparer for batches to
        # prepare while the writer is in the database, ``wait_all`` for the queue to be empty.
        # A turn waiting for its own batches waits on its recorder's ``_drained`` event, set
        # when its last one is written: a write wakes only the turns it finished (hundreds may
        # be waiting in one worker).
        lock = threading.Lock()
        self._work = threading.Condition(lock)
        self._behind = threading.Condition(lock)
        self._idle = threading.Condition(lock)
        # Held while a batch is prepared, by either thread: batches are prepared one at a time,
        # in order, and taken off the queue only with it held.
        self._preparing = threading.Lock()
        # Someone waits for the queue (``wait``, ``wait_all``): write what there is, now.
        self._hurry = False
        self._last_write = -float("inf")  # time.monotonic() when the last write ended
        self._preparer = threading.Thread(target=self._prepare_behind, name="record-preparer", daemon=True)
        self._thread = threading.Thread(target=self._run, name="record-writer", daemon=True)
        self._preparer.start()
        self._thread.start()

    def put(self, batch: B) -> None:
        with self._work:
            batch.owner._outstanding += 1
            batch.owner._drained.clear()
            self._pending.append(batch)
            self._work.notify()
            if self._in_database:
                self._behind.notify()

    def wait(self, owner: Owner) -> None:
        """Block until every batch of ``owner`` handed over so far is written or dropped.

        Raises:
            RuntimeError: a thread of the writer is gone (its batches will never be written).
        """
        self._hasten()
        while not owner._drained.wait(timeout=1.0):
            if not (self._thread.is_alive() and self._preparer.is_alive()):
                raise RuntimeError("the record writer stopped before writing this turn's steps")

    def wait_all(self, timeout: float) -> bool:
        self._hasten()
        with self._idle:
            return self._idle.wait_for(lambda: not self._pending and not self._busy, timeout)

    def _hasten(self) -> None:
        with self._work:
            self._hurry = True
            self._work.notify()

    def _take(self) -> list[B]:
        """The next batches to write, every one of them prepared."""
        with self._work:
            self._work.wait_for(lambda: bool(self._pending))
            linger = float(settings.RECORD_WRITE_LINGER_SECONDS)
            if time.monotonic() - self._last_write < linger:
                self._work.wait_for(lambda: self._hurry or len(self._pending) >= self.LINGER_MOST, linger)
            self._hurry = False
            self._busy = True
        # The preparer may be at one of them: waiting for the lock waits for that batch.
        with self._preparing:
            with self._work:
                count = min(len(self._pending), self.MOST_PER_WRITE)
                batches = [self._pending.popleft() for _ in range(count)]
                unready = batches[self._ready :]
                self._ready = max(0, self._ready - count)
            for batch in unready:
                batch.ready()
        return batches

    def _prepare_behind(self) -> None:
        while True:
            self._prepare_next()

    def _prepare_next(self) -> None:
        """Prepare the first batch not prepared, once the writer is in the database (the
        preparer's thread). A method of its own, like ``_write_next``."""
        with self._behind:
            self._behind.wait_for(self._may_prepare)
        with self._preparing:
            with self._work:
                if not self._may_prepare():
                    return
                batch = self._pending[self._ready]
            batch.ready()
            with self._work:
                self._ready += 1

    def _may_prepare(self) -> bool:
        return self._in_database and self._ready < len(self._pending)

    def _run(self) -> None:
        while True:
            self._write_next()

    def _write_next(self) -> None:
        """Take the next batches, write them and ring their doorbells. A method of its own so
        that nothing of them is held while the thread waits for more (the rows of a batch hold
        its bodies: a 10 MB tool result stayed alive until the next write)."""
        batches = self._take()
        with self._work:
            self._in_database = True
            if self._may_prepare():
                self._behind.notify()
        try:
            written = self._commit(batches)
        except BaseException as exc:  # never lose the thread; the turns hear of it
            logger.exception("the record writer failed")
            for batch in batches:
                batch.owner._write_error = batch.owner._write_error or exc
                batch.lose()
            written = []
        finally:
            with self._work:
                self._in_database = False
        for batch in written:
            try:
                batch.publish()
            except Exception:  # the rows are stored; a lost doorbell is caught up on reconnect
                logger.exception("could not ring the doorbells of a written batch")
        if any(batch.big for batch in batches):
            discard_connection(connection)
        with self._work:
            for batch in batches:
                owner = batch.owner
                owner._outstanding -= 1
                if owner._outstanding == 0:
                    owner._drained.set()
            self._busy = False
            self._last_write = time.monotonic()
            self._idle.notify_all()
            idle = not self._pending
        if idle:
            # The connection goes back to the pool only when nothing waits to be written:
            # a busy writer keeps it (each loan from the pool costs a health check).
            release_connection(always=True)

    def _commit(self, batches: list[B]) -> list[B]:
        """Write the batches, together if they can be; returns those that were written.

        When the shared transaction fails, each batch is tried alone, in order, so one turn's bad
        row does not cost the others theirs (and a lone batch gets a second try on a fresh
        connection). A turn whose batch failed has its later batches dropped until its loop has
        heard of the error; what comes after that no longer names the steps that were lost.
        """
        live_batches = [batch for batch in batches if batch.live()]
        to_write = [batch for batch in live_batches if batch.writes]
        if not to_write:
            return live_batches
        try:
            self._write(to_write)
            return live_batches
        except FenceRefused:  # a turn ended elsewhere: the others' batches are retried alone
            logger.info(
                "a write of %d batches was refused by a turn's fence; writing them one by one", len(to_write)
            )
            release_connection(always=True)
        except Exception:  # retried batch by batch below
            logger.warning(
                "a write of %d batches failed; writing them one by one", len(to_write), exc_info=True
            )
            release_connection(always=True)
        written: list[B] = []
        for batch in live_batches:
            if not batch.live():
                continue
            if batch.writes:
                try:
                    self._write([batch])
                except Exception as exc:  # noqa: BLE001 — handed to the turn's loop
                    batch.owner._write_error = exc
                    batch.lose()
                    continue
                finally:
                    release_connection(always=True)
            written.append(batch)
        return written


_writer: RecordWriter[Any] | None = None
_writer_lock = threading.Lock()


def process_writer(commit: Callable[[Sequence[B]], None]) -> RecordWriter[B]:
    """This process's writer (made on first use, and again in a forked child), committing with
    ``commit`` (the recorder's: one function for the process)."""
    global _writer
    with _writer_lock:
        if _writer is None or _writer.pid != os.getpid():
            _writer = RecordWriter(commit)
        return _writer


def writes_flush(timeout: float = 10.0) -> bool:
    """Wait until every batch handed to this process's writer is written; False on timeout."""
    writer = _writer
    if writer is None or writer.pid != os.getpid():
        return True
    return writer.wait_all(timeout)


atexit.register(writes_flush, 10.0)
