"""Turn the raw lines a proxy saw into records, as the workbench's capture does.

The proxy never parses what it passes on: it hands copies of the bytes it forwarded to a
``Pairer``, which splits them into lines, reads each line as JSON-RPC and pairs each request
with its response by id (a JSON-RPC id keeps its type: ``1`` and ``"1"`` are two ids). A body is
recorded as the exact text that crossed (bytes that are not UTF-8 kept with
``conversations.loop.wire.decode_body``), never re-serialized.

Labels and directions follow ``conversations.proxy.recording.record_mcp``'s contract: a request's
label is its method; ``client`` marks host→server requests and notifications, ``server``
server→host ones; ``local`` marks what is not a message (stderr, a line that is not JSON).

A request waits for its response in the pairer's memory. Over HTTP its response may come in a
request that another web process serves (a server's request is answered by the host's later
POST; a legacy SSE POST is answered on the event stream): such a request is handed to a
``SharedPending`` store that every process reads (``servers.proxy.http``: the cache, Redis in
the scaled deployment), where the first process to see its answer takes it.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import NamedTuple, Protocol

from conversations.loop.wire import WireExchange, decode_body

log = logging.getLogger(__name__)

HOST = "host"  # bytes the host sent (the server's stdin)
SERVER = "server"  # bytes the server sent (its stdout)
STDERR = "stderr"


def cut(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, the cut marked with the true total (as the gateway does)."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n… [cut: {len(text)} characters in all]"


def _id_key(value: object) -> str:
    return json.dumps(value)


# A request waiting in a ``SharedPending`` store: the record and when it was sent (``time.time()``:
# another process reads it).
Shared = tuple[WireExchange, float]


class SharedPending(Protocol):
    """Requests waiting for their answer where every process of the deployment can find them.

    ``pop`` is atomic: of processes popping one key at once, one gets the entry, the others None.
    Either method may raise when the store cannot be reached; the pairer then keeps the request
    in its own memory (paired only if its answer comes to this process).
    """

    def put(self, key: str, entry: Shared) -> None: ...

    def pop(self, key: str) -> Shared | None: ...


class Dropped(NamedTuple):
    """A chunk that passed while the recorder was behind: not kept, only described, so that the
    lines it ended still end where they did."""

    size: int
    first: int = -1  # the index of its first newline (-1: it has none)
    last: int = -1  # the index of its last newline
    newlines: int = 0

    @classmethod
    def of(cls, data: bytes) -> Dropped:
        first = data.find(b"\n")
        if first < 0:
            return cls(len(data))
        return cls(len(data), first, data.rfind(b"\n"), data.count(b"\n"))


@dataclass
class _Line:
    """The line of one stream being assembled."""

    kept: bytearray = field(default_factory=bytearray)
    total: int = 0
    gap: int = 0  # bytes of this line that passed while the recorder was behind (not kept)


@dataclass
class Pairer:
    """Lines in, finished records out. Used from one thread only (the proxy's recorder).

    ``line_limit`` is MCP_STDOUT_LINE_LIMIT: the most bytes of one line kept (both directions);
    a longer line is recorded cut and marked. ``body_limit`` is EXCHANGE_BODY_LIMIT.
    """

    line_limit: int
    body_limit: int
    # The labels of what is not a message, from the host and from the server.
    not_json: tuple[str, str] = ("stdin (not JSON)", "stdout (not JSON)")
    # Where requests handed off (``hand_off``) wait for an answer any process may see.
    shared: SharedPending | None = None
    finished: list[WireExchange] = field(default_factory=list)
    _lines: dict[str, _Line] = field(default_factory=dict)
    _pending: dict[str, tuple[WireExchange, float]] = field(default_factory=dict)

    def feed(self, stream: str, data: bytes, *, at: float | None = None) -> None:
        """Bytes as they crossed on ``stream`` (HOST, SERVER or STDERR), at ``at`` (a
        ``time.monotonic()``; None: now). A message, or a line that is not one, is stamped with
        the time the chunk that ended it crossed, however much later it is read."""
        if stream == STDERR:
            if data:
                self._local("stderr", decode_body(data), "", at=at)
            return
        line = self._lines.setdefault(stream, _Line())
        start = 0
        while True:
            end = data.find(b"\n", start)
            piece = data[start:] if end < 0 else data[start:end]
            room = self.line_limit - len(line.kept)
            if room > 0:
                line.kept += piece[:room]
            line.total += len(piece)
            if end < 0:
                return
            self._safe_line(stream, line, ended=True, at=at)
            self._lines[stream] = line = _Line()
            start = end + 1

    def lost(self, stream: str, dropped: Dropped, *, at: float | None = None) -> None:
        """A chunk passed on ``stream`` at ``at`` (as ``feed``'s) that the recorder could not keep
        (it was behind): the line it continued ends at its first newline, the whole lines inside
        it are recorded as one note of what passed, and what follows its last newline starts the
        next line."""
        if stream == STDERR:
            self._local(
                "stderr",
                "",
                f"{dropped.size:,} bytes of stderr passed while the recorder was behind; not kept",
                at=at,
            )
            return
        line = self._lines.setdefault(stream, _Line())
        if dropped.first < 0:
            line.gap += dropped.size
            line.total += dropped.size
            return
        line.gap += dropped.first
        line.total += dropped.first
        self._safe_line(stream, line, ended=True, at=at)
        if dropped.newlines > 1:
            whole = dropped.newlines - 1
            self._local(
                self.not_json[stream != HOST],
                "",
                f"{whole:,} line{'s' if whole > 1 else ''} ({dropped.last - dropped.first - 1:,} bytes) "
                f"passed while the recorder was behind and {'are' if whole > 1 else 'is'} not kept",
                at=at,
            )
        rest = dropped.size - dropped.last - 1
        self._lines[stream] = _Line(total=rest, gap=rest)

    def settle(self, record: WireExchange, *, body: str, error: str, status: str = "error") -> None:
        """``record``'s request will get no JSON-RPC response this way (its HTTP answer was an error,
        or the stream ended first): it is finished with ``body`` (what came back) and ``error``."""
        for key, (pending, started) in list(self._pending.items()):
            if pending is record:
                del self._pending[key]
                record.response_body = cut(body, self.body_limit)
                record.status = status
                record.error = error
                record.duration_ms = (time.monotonic() - started) * 1000
                self.finished.append(record)
                return

    def hand_off(self, record: WireExchange) -> str | None:
        """Move ``record``, a request pending here, to the shared store, where its answer pairs with
        it in whichever process sees that answer. Returns its key there; None when there is no
        shared store, ``record`` is not pending here, or the store failed (it stays pending here)."""
        if self.shared is None:
            return None
        for key, (pending, started) in list(self._pending.items()):
            if pending is record:
                sent_at = time.time() - (time.monotonic() - started)
                try:
                    self.shared.put(key, (record, sent_at))
                except Exception:  # noqa: BLE001 (the store is down: pair it here, as without one)
                    log.warning("proxy: a pending %s could not be shared; it pairs in this process only", key)
                    return None
                del self._pending[key]
                return key
        return None

    def take_back(self, key: str, record: WireExchange) -> bool:
        """Take the request handed off under ``key`` back into this pairer (its answer will not
        come the shared way: its stream ended, or its HTTP answer was an error), unless an answer
        took it first. True when ``record`` is pending here again."""
        found = self._shared_pop(key)
        if found is None:
            return False
        self._pending[key] = (record, found[1])
        return True

    def _shared_pop(self, key: str) -> tuple[WireExchange, float] | None:
        """A request waiting in the shared store under ``key``, taken (its start as a
        ``time.monotonic()`` of this process), or None."""
        if self.shared is None:
            return None
        try:
            found = self.shared.pop(key)
        except Exception:  # noqa: BLE001 (the store is down: the answer is recorded unpaired)
            log.warning("proxy: the shared store of pending requests could not be read for %s", key)
            return None
        if found is None:
            return None
        record, sent_at = found
        return record, time.monotonic() - max(0.0, time.time() - sent_at)

    def pending(self, record: WireExchange) -> bool:
        return any(pending is record for pending, _ in self._pending.values())

    @property
    def open_requests(self) -> int:
        return len(self._pending)

    def close(self) -> list[WireExchange]:
        """The streams ended: a line left unfinished and every request still unanswered are recorded."""
        for stream, line in list(self._lines.items()):
            if line.total:
                self._safe_line(stream, line, ended=False)
        self._lines.clear()
        now = time.monotonic()
        for record, started in self._pending.values():
            record.status = "no response"
            record.duration_ms = (now - started) * 1000
            self.finished.append(record)
        self._pending.clear()
        return self.take()

    def take(self) -> list[WireExchange]:
        records, self.finished = self.finished, []
        return records

    def kept_raw(self, stream: str, data: bytes, error: str, *, at: float | None = None) -> WireExchange:
        """``data``, bytes that crossed on ``stream``, recorded as they are (not read as a message),
        marked with ``error``: what the recorder keeps of what it failed to read."""
        label = "stderr" if stream == STDERR else self.not_json[stream != HOST]
        return self._local(label, decode_body(data), error, at=at)

    def _safe_line(self, stream: str, line: _Line, *, ended: bool, at: float | None = None) -> None:
        """``_line``, and when reading the line fails (no line should make it, but a hostile one
        must not stop the recorder), the line kept as the bytes that crossed, marked."""
        try:
            self._line(stream, line, ended=ended, at=at)
        except Exception as exc:  # noqa: BLE001 (whatever it was, the line is kept and recording goes on)
            log.warning("proxy: reading a line failed (%s); it is kept as its bytes", type(exc).__name__)
            self.kept_raw(stream, bytes(line.kept), f"{READ_FAILED} ({failure(exc)})", at=at)

    def _line(self, stream: str, line: _Line, *, ended: bool, at: float | None) -> None:
        raw = bytes(line.kept)
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        problems = []
        if line.gap:
            problems.append(f"{line.gap:,} bytes of it passed while the recorder was behind and are not kept")
        if line.total > self.line_limit:
            problems.append(
                f"a line of {line.total:,} bytes, longer than {self.line_limit:,} (MCP_STDOUT_LINE_LIMIT): "
                f"its first {self.line_limit:,} bytes are kept"
            )
        if not ended:
            problems.append("a line cut short: the stream closed before ending it")
        if not raw.strip() and not problems:
            return  # an empty line between messages
        if problems:
            self._local(self.not_json[stream != HOST], decode_body(raw), "; ".join(problems), at=at)
            return
        self.message(stream, raw, at=at)

    def message(self, stream: str, raw: bytes, *, cut_at: int = 0, at: float | None = None) -> WireExchange:
        """One whole message as it crossed on ``stream`` at ``at`` (as ``feed``'s); returns the
        record it opened, completed or made. ``cut_at``: the message's true size when ``raw`` is
        only its kept start."""
        text = decode_body(raw)
        body = cut(text, self.body_limit)
        if cut_at > len(raw):
            body += f"\n… [cut: {cut_at:,} bytes in all; the first {len(raw):,} are kept]"
            return self._local(self.not_json[stream != HOST], body, "cut: too large to keep whole", at=at)
        message, why = read_json(raw)
        if why or message is None:
            return self._local(
                self.not_json[stream != HOST], text if not cut_at else body, why or NOT_A_MESSAGE, at=at
            )
        return self._message(stream, message, body, at)

    def _local(self, label: str, body: str, error: str, *, at: float | None = None) -> WireExchange:
        record = WireExchange(
            channel="mcp",
            label=label,
            started_at=_clocks(at)[1],
            direction="local",
            response_body=cut(body, self.body_limit),
            status="error" if error else "",
            error=error,
        )
        self.finished.append(record)
        return record

    def _message(self, stream: str, message: object, body: str, at: float | None) -> WireExchange:
        now, wall = _clocks(at)
        origin = "client" if stream == HOST else "server"
        if not isinstance(message, dict):
            # A JSON-RPC batch (or any other JSON value): passed on, recorded as one message.
            record = _unpaired("batch", wall, origin, stream, body)
            self.finished.append(record)
            return record
        method, msg_id = message.get("method"), message.get("id")
        if method is not None and msg_id is not None:
            record = WireExchange(
                channel="mcp",
                label=str(method),
                started_at=wall,
                jsonrpc_id=str(msg_id),
                direction=origin,
                request_body=body,
            )
            key = f"{stream}:{_id_key(msg_id)}"
            earlier = self._pending.pop(key, None)
            if earlier is not None:
                # The id is reused while its first request waits: that one is finished here
                # (the answer that comes pairs with the later one), not lost under it.
                earlier[0].status = "no response"
                earlier[0].error = REUSED_ID
                earlier[0].duration_ms = (now - earlier[1]) * 1000
                self.finished.append(earlier[0])
            self._pending[key] = (record, now)
            return record
        if msg_id is not None:
            other = SERVER if stream == HOST else HOST
            key = f"{other}:{_id_key(msg_id)}"
            found = self._pending.pop(key, None) or self._shared_pop(key)
            error = message.get("error")
            if found is None:
                record = WireExchange(
                    channel="mcp",
                    label="response to unknown id",
                    started_at=wall,
                    jsonrpc_id=str(msg_id),
                    direction=origin,
                    response_body=body,
                    status="error" if error is not None else "ok",
                    error="the id matches no request in flight",
                )
                self.finished.append(record)
                return record
            record, started = found
            record.response_body = body
            record.duration_ms = (now - started) * 1000
            record.status = "error" if error is not None else "ok"
            if isinstance(error, dict):
                record.error = str(error.get("message", ""))
            self.finished.append(record)
            return record
        record = _unpaired(str(method) if method is not None else "not JSON-RPC", wall, origin, stream, body)
        self.finished.append(record)
        return record


def _clocks(at: float | None) -> tuple[float, datetime]:
    """``at`` (a ``time.monotonic()``; None: now) on both clocks: monotonic, for durations, and
    the wall clock's time then, for ``started_at``."""
    if at is None:
        return time.monotonic(), datetime.now(UTC)
    return at, datetime.fromtimestamp(time.time() - (time.monotonic() - at), UTC)


def _unpaired(label: str, wall: datetime, origin: str, stream: str, body: str) -> WireExchange:
    """An unpaired message; its body goes where its sender's side is shown."""
    record = WireExchange(channel="mcp", label=label, started_at=wall, direction=origin)
    if stream == HOST:
        record.request_body = body
    else:
        record.response_body = body
    return record


NOT_A_MESSAGE = "not a JSON-RPC message"
REUSED_ID = (
    "a later request reused its id before an answer came (an answer to that id is paired with the later one)"
)
READ_FAILED = "the recorder failed reading this line; it is kept as the bytes that crossed"


def failure(exc: BaseException) -> str:
    """An exception in one line: its type and the first line of its message."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:300]}" if text else type(exc).__name__


TOO_DEEP = (
    "nested deeper than the JSON reader goes (Python's recursion limit): kept as the text that "
    "crossed, not read as a message"
)


def read_json(raw: bytes) -> tuple[object, str]:
    """``raw`` read as JSON, and "" — or None and why it could not be (not JSON, not UTF-8, or
    nested so deep that reading it would exhaust the stack: a hostile line must not stop the
    recorder)."""
    try:
        value: object = json.loads(raw)
    except RecursionError:
        return None, TOO_DEEP
    except ValueError:
        return None, NOT_A_MESSAGE
    return value, ""
