"""The stdio proxy's recorder: turns copies of the forwarded bytes into records, off the byte path.

The byte pumps only ``tap`` what they forwarded (never a wait); everything else — splitting
lines, pairing, storing, spooling — happens in the recorder's own process (``manage.py proxy
stdio``: ``start(own_process=True)``) or in a thread of the proxy's process (as inside a test).
In its own process the recorder's CPU is not the pumps' interpreter's, and it runs nicer than the
proxy (``RECORDER_NICENESS``): ``tap`` writes the chunk, framed, to a pipe (one non-blocking
write; what the pipe cannot take at once waits in memory and goes when it can), and a thread of
the recorder's process reads the frames into the queue a thread recorder is fed by directly. The
recorder's process ignores the signals a terminal sends its process group and ends when the pipe
does (the proxy closed it, or died): it records what it was sent first, so a proxy killed after
passing bytes on does not lose their record. Memory is bounded: past ``queue_limit`` bytes
waiting (in the queue, or for the pipe) a chunk is not kept, only described (``Dropped``: its
size and where its newlines were), so the lines it ended still end there, and the record of each
line it touched says how much was not kept.

Storing: ``store(session, server_name, records)`` (``record_mcp`` in production) raises
``django.db.Error`` when the database is unreachable; the records then go to the spool, and the
spool is imported when a retry (exponential backoff, at most ``MAX_BACKOFF`` seconds apart)
finds the database back. Records are kept in order: while anything is spooled, new records are
spooled behind it.

A failure while recording costs what it hit, never the rest of the session (decision 0310): only
``OperationalError`` and ``InterfaceError`` mean "away"; a group refused for any other reason is
stored one record at a time, a bad record stored marked (``marked``) or kept beside the spool;
every failure is logged and the loop goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import math
import os
import queue
import select
import signal
import struct
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import TextIO

from django.db import InterfaceError, OperationalError, connections

from conversations.escaping import escaped_text
from conversations.loop.wire import WireExchange
from servers.proxy.pairing import HOST, SERVER, STDERR, Dropped, Pairer, failure
from servers.proxy.spool import Spool, redacted

Store = Callable[[str | None, str, Sequence[WireExchange]], object]
# When records are stored (``Recorder._recording``): storing a group costs the most per record
# for small groups (a transaction, the session's lock, the turn's seal), and its CPU is what the
# host, the pumps and the server would use while traffic flows. So a group is stored once
# traffic pauses for QUIET_SECONDS (but not sooner than SPACING_SECONDS after the group before:
# traffic that pauses often does not make a group of each message), during a burst once its
# oldest record has waited FLUSH_SECONDS, or once GROUP_RECORDS are waiting (memory stays
# bounded). Decision 0600.
QUIET_SECONDS = 0.02
SPACING_SECONDS = 0.2
FLUSH_SECONDS = 1.0
GROUP_RECORDS = 1000
FIRST_BACKOFF = 0.5
MAX_BACKOFF = 30.0
# What the queue carries: a stream's chunk kept, or (no bytes) the description of one not kept,
# and when it crossed (``time.monotonic()``, one clock for every process of the machine: the
# pairer stamps each record with it, not with when it got to read it).
_Item = tuple[str, bytes | None, Dropped, float]
_KEPT = Dropped(0)
_END: _Item = ("", None, _KEPT, 0.0)
# A frame on the pipe to the recorder's process: the stream's code (high bit: a chunk not kept,
# only described), the length of what follows, when it crossed, then the chunk (or its description).
_FRAME = struct.Struct(">BId")
_DROPPED = struct.Struct(">Qqqq")
_CODES = {HOST: 1, SERVER: 2, STDERR: 3}
_STREAMS = {code: stream for stream, code in _CODES.items()}
_NOT_KEPT = 0x80
# What the pipe to the recorder's process holds before a write has to wait (Linux: F_SETPIPE_SZ).
PIPE_BYTES = 1 << 20
# How much nicer than the proxy its recorder's process runs (Linux ``nice``): where the cores are
# busy, the host, the pumps and the server, which a round trip waits for in turn, go first, and
# recording catches up in their gaps (decision 0550). Its share of a busy core shrinks, never to
# nothing (no starvation, unlike ``SCHED_IDLE``).
RECORDER_NICENESS = 10
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# Failures logged one by one; past this many, one in every ``_LOG_EVERY`` (a hostile peer must not
# flood the host's log).
_LOG_FIRST = 20
_LOG_EVERY = 1000


class KeyRefused(Exception):
    """The proxy key is unknown or revoked: nothing can be recorded under it."""


class DatabaseAway(Exception):
    """The database is unreachable; ``unstored`` are the records of the group not stored (the
    spool keeps them)."""

    def __init__(self, cause: BaseException, unstored: Sequence[WireExchange]) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.unstored = list(unstored)


def is_away(exc: BaseException) -> bool:
    """Whether ``exc`` says the database cannot be reached (retry later), rather than that it
    refused these records (``DataError``, ``IntegrityError``…: retrying them would fail again)."""
    return isinstance(exc, OperationalError | InterfaceError)


def marked(record: WireExchange, exc: BaseException) -> WireExchange:
    """What is stored of ``record`` when storing it failed: a local record of its bodies, each as a
    JSON string literal (ASCII; ``json.loads`` gives the text back), marked with why."""
    return WireExchange(
        channel=record.channel,
        label="not stored as a message",
        started_at=record.started_at,
        direction="local",
        request_body=escaped_text(record.request_body) if record.request_body else "",
        response_body=escaped_text(record.response_body) if record.response_body else "",
        status="error",
        error=(
            f"the recorder could not store this record ({failure(exc)}); its label was "
            f"{escaped_text(record.label[:200])} and its bodies are kept as JSON string literals"
        ),
        duration_ms=record.duration_ms,
    )


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
        quiet_seconds: float = QUIET_SECONDS,
        spacing_seconds: float = SPACING_SECONDS,
        flush_seconds: float = FLUSH_SECONDS,
        group_records: int = GROUP_RECORDS,
        group_chars: int | None = None,
    ) -> None:
        self.store = store
        self.spool = spool
        self.pairer = pairer
        self.session = session
        self.server_name = server_name
        self.secrets = secrets
        self.queue_limit = queue_limit
        self.quiet_seconds = quiet_seconds
        self.spacing_seconds = spacing_seconds
        self.flush_seconds = flush_seconds
        self.group_records = group_records
        self.group_chars = queue_limit if group_chars is None else group_chars
        # Of the records waiting to be stored: how many were counted, and their bodies' length.
        self._counted = 0
        self._pending_chars = 0
        self.log = log if log is not None else sys.stderr
        self.stored = 0  # records stored (directly or from the spool), for tests and the final line
        self.spooled = 0
        self.failures = 0  # failures while recording, each logged (see _LOG_FIRST)
        self.lost = 0  # records that could be neither stored nor kept on disk
        self.refused = False
        self._queue: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        self._queued = 0
        self._lock = threading.Lock()
        self._down = False
        self._ended = False  # the end of what is tapped was read (recording finishes what is left)
        self._backoff = FIRST_BACKOFF
        self._retry_at = 0.0
        self._thread = threading.Thread(target=self._run, name="proxy-recorder", daemon=True)
        # The recorder's own process: its id and the pipe's writing end (None: a thread records).
        self._child: int | None = None
        self._pipe: int | None = None
        self._backlog = bytearray()
        self._pipe_loop: asyncio.AbstractEventLoop | None = None

    @property
    def in_own_process(self) -> bool:
        return self._child is not None

    def start(self, *, own_process: bool = False) -> None:
        """Start recording: in a thread, or with ``own_process`` in a process of its own — when
        this one has no other thread (forking a process with threads can leave the child a lock
        no one will release; then it is a thread after all)."""
        if own_process and threading.active_count() == 1:
            self._fork()
        else:
            self._thread.start()

    def tap(self, stream: str, data: bytes) -> None:
        """A copy of bytes just forwarded on ``stream``. Never blocks."""
        at = time.monotonic()
        if self._child is not None:
            if self._pipe is not None:  # else the recorder's process is gone: nothing records
                self._send(stream, data, at)
            return
        with self._lock:
            keep = self._queued + len(data) <= self.queue_limit
            if keep:
                self._queued += len(data)
        self._queue.put((stream, data, _KEPT, at) if keep else (stream, None, Dropped.of(data), at))

    def finish(self, timeout: float) -> bool:
        """The session ended: record what is left. False if that took longer than ``timeout``."""
        if self._child is not None:
            return self._finish_child(timeout)
        self._queue.put(_END)
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # The recorder in its own process: the proxy's side.

    def _fork(self) -> None:
        read_end, write_end = os.pipe()
        with contextlib.suppress(AttributeError, OSError):
            fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        self.log.flush()
        child = os.fork()
        if child == 0:
            os.close(write_end)
            code = 1
            try:
                self._child_main(read_end)
                code = 0
            finally:
                os._exit(code)
        os.close(read_end)
        os.set_blocking(write_end, False)
        self._child, self._pipe = child, write_end

    def _send(self, stream: str, data: bytes, at: float) -> None:
        assert self._pipe is not None
        if len(self._backlog) + len(data) > self.queue_limit:
            # Not kept, but where its newlines were is: the lines it ended end there.
            data = _DROPPED.pack(*Dropped.of(data))
            head = _FRAME.pack(_CODES[stream] | _NOT_KEPT, len(data), at)
        else:
            head = _FRAME.pack(_CODES[stream], len(data), at)
        if self._backlog:
            self._backlog += head
            self._backlog += data
            return
        try:
            # Head and chunk in one system call, the chunk not copied.
            written = os.writev(self._pipe, (head, data))
        except BlockingIOError:
            written = 0
        except OSError:
            self._lost_child()
            return
        if written < len(head) + len(data):
            self._backlog += head[written:]
            self._backlog += memoryview(data)[max(0, written - len(head)) :]
            self._wait_for_pipe()

    def _wait_for_pipe(self) -> None:
        """Send the backlog when the pipe can take it (from the event loop the pumps run on)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop: finish() sends what is left
        if self._pipe_loop is None and self._pipe is not None:
            self._pipe_loop = loop
            loop.add_writer(self._pipe, self._drain)

    def _drain(self) -> None:
        if self._pipe is None:
            return
        try:
            written = os.write(self._pipe, self._backlog)
        except BlockingIOError:
            return
        except OSError:
            self._lost_child()
            return
        del self._backlog[:written]
        if not self._backlog and self._pipe_loop is not None:
            self._pipe_loop.remove_writer(self._pipe)
            self._pipe_loop = None

    def _lost_child(self) -> None:
        if self._pipe_loop is not None and self._pipe is not None:
            with contextlib.suppress(Exception):
                self._pipe_loop.remove_writer(self._pipe)
        self._pipe_loop = None
        if self._pipe is not None:
            os.close(self._pipe)
        self._pipe = None
        self._backlog.clear()
        self.log.write("proxy: the recorder's process ended early; traffic passes on, it is not recorded\n")
        self.log.flush()

    def _finish_child(self, timeout: float) -> bool:
        assert self._child is not None
        deadline = time.monotonic() + timeout
        if self._pipe is not None:
            if self._pipe_loop is not None:
                with contextlib.suppress(Exception):
                    self._pipe_loop.remove_writer(self._pipe)
            view = memoryview(bytes(self._backlog))
            while view and time.monotonic() < deadline:
                select.select([], [self._pipe], [], max(0.0, deadline - time.monotonic()))
                try:
                    view = view[os.write(self._pipe, view) :]
                except BlockingIOError:
                    continue
                except OSError:
                    break
            os.close(self._pipe)  # the recorder's process reads to here, records what is left, ends
            self._pipe = None
        while time.monotonic() < deadline:
            done, _ = os.waitpid(self._child, os.WNOHANG)
            if done:
                return True
            time.sleep(0.01)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self._child, signal.SIGKILL)
        os.waitpid(self._child, 0)
        return False

    # The recorder in its own process: the recorder's side.

    def _child_main(self, read_end: int) -> None:
        for number in _SIGNALS:
            signal.signal(number, signal.SIG_IGN)
        # Before its threads start: they inherit it.
        with contextlib.suppress(OSError):
            os.nice(RECORDER_NICENESS)
        # The host's stdin and stdout are the proxy's alone: the host sees the proxy's stdout end
        # when the proxy ends, not when its recorder does.
        quiet = os.open(os.devnull, os.O_RDWR)
        os.dup2(quiet, 0)
        os.dup2(quiet, 1)
        os.close(quiet)
        reader = threading.Thread(
            target=self._read_frames, args=(read_end,), name="proxy-frames", daemon=True
        )
        reader.start()
        try:
            self._run()
        finally:
            self.log.flush()
            connections.close_all()

    def _read_frames(self, read_end: int) -> None:
        try:
            self._read_pipe(read_end)
        except Exception as exc:  # noqa: BLE001 (the recorder must still end and store what it has)
            self._failed("reading the proxy's pipe", exc)
        finally:
            self._queue.put(_END)

    def _read_pipe(self, read_end: int) -> None:
        with os.fdopen(read_end, "rb") as pipe:
            while True:
                head = pipe.read(_FRAME.size)
                if len(head) < _FRAME.size:
                    break
                code, size, at = _FRAME.unpack(head)
                stream = _STREAMS.get(code & ~_NOT_KEPT & 0xFF)
                if stream is None:
                    break
                data = pipe.read(size)
                if len(data) < size:
                    break
                if code & _NOT_KEPT:
                    self._queue.put((stream, None, Dropped(*_DROPPED.unpack(data)), at))
                    continue
                with self._lock:
                    self._queued += size
                self._queue.put((stream, data, _KEPT, at))

    def _run(self) -> None:
        self._retry()  # what an earlier proxy of this key left in the spool
        while True:
            try:
                self._recording()
                return
            except Exception as exc:  # noqa: BLE001 (a failure costs what it hit, never the session)
                self._failed("recording", exc)

    def _recording(self) -> None:
        """Read what is tapped into records, and store them in groups: once traffic pauses
        (nothing tapped for ``quiet_seconds``, and ``spacing_seconds`` since the group before),
        once the oldest record not yet stored has waited ``flush_seconds``, or once
        ``group_records`` (or ``group_chars`` characters of bodies, by default ``queue_limit``)
        are waiting; at the end, what is left."""
        pending_since: float | None = None  # when the oldest record not yet stored was finished
        last_group = -math.inf  # when the group before was stored
        while not self._ended:
            timeout = None
            if pending_since is not None:
                now = time.monotonic()
                due = pending_since + self.flush_seconds - now
                spaced = last_group + self.spacing_seconds - now
                timeout = max(0.0, min(due, max(self.quiet_seconds, spaced)))
            if self._down:
                wait = max(0.0, self._retry_at - time.monotonic())
                timeout = wait if timeout is None else min(timeout, wait)
            try:
                item = self._queue.get(timeout=timeout)
            except queue.Empty:
                item = None
            quiet = item is None
            while item is not None:
                if item is _END:
                    self._ended = True
                    break
                self._feed(item)
                if self._group_full():
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    item = None
            if pending_since is None and self.pairer.finished:
                pending_since = time.monotonic()
            if self._down and time.monotonic() >= self._retry_at:
                self._retry()
            if self._ended:
                break
            now = time.monotonic()
            if pending_since is not None and (
                (quiet and now - last_group >= self.spacing_seconds)
                or now - pending_since >= self.flush_seconds
                or self._group_full()
            ):
                last_group = now
                records = self.pairer.take()
                pending_since = None
                self._counted = self._pending_chars = 0
                self._deliver(records)
        self._deliver(self.pairer.close())
        if self._down:
            self._retry()

    def _group_full(self) -> bool:
        finished = self.pairer.finished
        for record in finished[self._counted :]:
            self._pending_chars += len(record.request_body) + len(record.response_body)
        self._counted = len(finished)
        return self._counted >= self.group_records or self._pending_chars >= self.group_chars

    def _feed(self, item: _Item) -> None:
        stream, data, dropped, at = item
        if data is None:
            self.pairer.lost(stream, dropped, at=at)
            return
        with self._lock:
            self._queued -= len(data)
        try:
            self.pairer.feed(stream, data, at=at)
        except Exception as exc:  # noqa: BLE001 (the pairer reads each line safely; this is the last guard)
            self._failed("reading a chunk", exc)
            self.pairer.kept_raw(
                stream, data, f"the recorder failed reading this chunk ({failure(exc)})", at=at
            )

    def _deliver(self, records: list[WireExchange]) -> None:
        if not records or self.refused:
            return
        if not self._down:
            try:
                self.stored += self._store(self.session, self.server_name, records)
            except KeyRefused:
                self._refuse()
                return
            except DatabaseAway as exc:
                self._went_down(exc.cause)
                records = exc.unstored
            else:
                return
        try:
            self.spool.write(self.session, self.server_name, [redacted(r, self.secrets) for r in records])
        except Exception as exc:  # noqa: BLE001 (a full disk: these are lost, said so; recording goes on)
            self.lost += len(records)
            self._failed(f"spooling {len(records)} records to {self.spool.path} (they are lost)", exc)
            return
        self.spooled += len(records)

    def _store(self, session: str | None, server_name: str, records: Sequence[WireExchange]) -> int:
        """Store ``records``; returns how many were stored as they are or marked. A group the
        database refuses is stored one record at a time, so a bad record costs only itself: it is
        stored marked (``marked``), else kept on disk beside the spool (``_reject``).

        Raises:
            KeyRefused: the key is unknown or revoked.
            DatabaseAway: the database is unreachable (``unstored``: what was not stored).
        """
        try:
            self.store(session, server_name, records)
            return len(records)
        except KeyRefused:
            raise
        except Exception as exc:  # noqa: BLE001 (anything but "away" is about these records)
            if is_away(exc):
                raise DatabaseAway(exc, records) from exc
            problem = exc
        if len(records) > 1:
            stored = 0
            for index, record in enumerate(records):
                try:
                    stored += self._store(session, server_name, [record])
                except DatabaseAway as exc:
                    raise DatabaseAway(exc.cause, records[index:]) from exc.cause
            return stored
        (record,) = records
        self._failed(f"storing a {record.label[:60]!r} record (it is stored marked)", problem)
        try:
            self.store(session, server_name, [marked(record, problem)])
            return 1
        except KeyRefused:
            raise
        except Exception as exc:  # noqa: BLE001
            if is_away(exc):
                raise DatabaseAway(exc, records) from exc
            self._reject(session, server_name, record, exc)
            return 0

    def _reject(
        self, session: str | None, server_name: str, record: WireExchange, exc: BaseException
    ) -> None:
        """Keep a record the database refused even marked in a file beside the spool (never imported)."""
        path = self.spool.path.with_suffix(".rejected")
        try:
            self.spool.write(session, server_name, [redacted(record, self.secrets)], path=path)
        except Exception as again:  # noqa: BLE001
            self.lost += 1
            self._failed("keeping a refused record on disk (it is lost)", again)
            return
        self._failed(f"storing the record marked; it is kept in {path}", exc)

    def _failed(self, what: str, exc: BaseException) -> None:
        """Log a failure while recording (the first ``_LOG_FIRST``, then one in ``_LOG_EVERY``)."""
        self.failures += 1
        if self.failures > _LOG_FIRST and self.failures % _LOG_EVERY:
            return
        try:
            self.log.write(
                f"proxy: recording failed {what} ({failure(exc)}); traffic passes on, recording goes on"
                f"{f' ({self.failures} failures so far)' if self.failures > _LOG_FIRST else ''}\n"
            )
            self.log.flush()
        except Exception:  # noqa: BLE001, S110 (a log that cannot be written must not stop recording)
            pass

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
        try:
            if self.refused or not self.spool.pending():
                self._down = False
                return
            self.stored += self.spool.import_all(self._store)
        except KeyRefused:
            self._refuse()
        except DatabaseAway as exc:
            self._went_down(exc.cause)
        except Exception as exc:  # noqa: BLE001 (an unreadable spool file stays for a later proxy)
            self._failed("importing the spool", exc)
            self._down = False
        else:
            if self._down:
                self.log.write("proxy: the database is back; the spooled records are imported\n")
                self.log.flush()
            self._down = False
            self._backoff = FIRST_BACKOFF
