"""What a streamed reply looks like while it is still arriving, and how it is read as it arrives.

A provider in streaming mode reads the event stream as the bytes come in. The recorded body is
still the whole stream, verbatim, and the reply is still parsed from it once it has ended; on
the way, each complete event is also fed to a second assembler (the "display pass") that tells
an optional ``DeltaCallback`` what the reply looks like so far: the text and every tool call's
name, id and argument text, as snapshots that only grow. The display pass never changes the
reply: if it fails (an event it cannot read, a callback that raises) it is switched off, logged,
and the call goes on.
"""

from __future__ import annotations

import codecs
import inspect
import logging
import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from conversations.escaping import may_hold_surrogate
from conversations.typealias import JSONDict

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PartialCall:
    """One tool call as far as it has arrived: ``arguments`` is the argument text so far (not
    necessarily JSON yet)."""

    index: int
    id: str
    name: str
    arguments: str

    def as_json(self) -> JSONDict:
        return {"index": self.index, "id": self.id, "name": self.name, "arguments": self.arguments}


@dataclass(frozen=True)
class PartialReply:
    """A streamed reply so far: the answer text and the tool calls, in the order they began.

    Each text (the answer, a call's arguments) is its last ``SNAPSHOT_TAIL_CHARS`` characters at
    most: a snapshot costs the same however long the reply has grown, so showing a reply while
    it streams stays linear in its length.
    """

    text: str = ""
    calls: tuple[PartialCall, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.text and not self.calls


DeltaCallback = Callable[[PartialReply], None]

# How much of the end of each text a snapshot carries (the display shows less of it).
SNAPSHOT_TAIL_CHARS = 16_000
# How many calls a snapshot carries, the first ones: a reply of thousands of calls is shown
# (redacted, published, rendered) a few dozen at a time while it streams, never whole each time.
SNAPSHOT_CALLS = 32


def tail(parts: Sequence[str], size: int = SNAPSHOT_TAIL_CHARS) -> str:
    """The last ``size`` characters of ``"".join(parts)``, joining only the parts that needs."""
    picked: list[str] = []
    count = 0
    for part in reversed(parts):
        picked.append(part)
        count += len(part)
        if count >= size:
            break
    text = "".join(reversed(picked))
    return text[-size:] if len(text) > size else text


class Throttled:
    """``callback`` called at most once per ``interval`` seconds, with the newest snapshot.

    Snapshots are cumulative, so one that comes too soon is dropped: the next one that is due
    carries everything it had. The last ones of a burst may never go — the stored step replaces
    the display when the reply is complete. A producer skips building a snapshot that would be
    dropped by reading ``last_sent`` and ``interval`` (``PartialEmitter``).
    """

    def __init__(self, callback: DeltaCallback, *, interval: float) -> None:
        self.callback = callback
        self.interval = interval
        self.last_sent = float("-inf")

    def __call__(self, partial: PartialReply) -> None:
        now = time.monotonic()
        if now - self.last_sent >= self.interval:
            self.last_sent = now
            self.callback(partial)


@dataclass
class PartialEmitter:
    """Calls ``callback`` with each new snapshot an assembler offers, skipping repeats.

    Behind a ``Throttled`` callback (found through wrappers that name it as their
    ``__wrapped__``, as ``functools.update_wrapper`` does) a snapshot is built at most once per
    interval: not while the throttle would drop it, nor again within an interval of one that was
    built and showed nothing new. A snapshot walks the reply so far, so building one at every
    event would make a reply of thousands of calls cost the square of its length."""

    callback: DeltaCallback | None
    last: PartialReply = field(default_factory=PartialReply)

    def __post_init__(self) -> None:
        # Asked once per event of a long stream: the throttle's state is read here directly.
        behind = inspect.unwrap(self.callback) if self.callback is not None else None
        self._throttle = behind if isinstance(behind, Throttled) else None
        self._built_at = float("-inf")

    def offer(self, snapshot: Callable[[], PartialReply]) -> None:
        if self.callback is None:
            return
        throttle = self._throttle
        if throttle is not None:
            now = time.monotonic()
            if now - max(throttle.last_sent, self._built_at) < throttle.interval:
                return
            self._built_at = now
        partial = snapshot()
        if len(partial.calls) > SNAPSHOT_CALLS:
            partial = PartialReply(text=partial.text, calls=partial.calls[:SNAPSHOT_CALLS])
        if partial != self.last and not partial.empty:
            self.last = partial
            self.callback(partial)


class SseEvent(NamedTuple):
    """One server-sent event: its ``event:`` name (``message`` when unnamed) and joined ``data:``.

    A named tuple, not a frozen dataclass: a long stream is tens of thousands of events, and a
    tuple is made in two thirds of the time."""

    event: str
    data: str


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def parse_sse(text: str) -> list[SseEvent]:
    """The events of a recorded ``text/event-stream`` body, in order (comments dropped).

    Only CR/LF end a line: JSON data may hold U+2028 and friends unescaped. The common shape
    (LF line ends, each event one ``data: `` line) is read block by block without looking at
    each line; any other block is read line by line, with the same result.
    """
    if "\r" in text:
        return _parse_lines(text)
    events: list[SseEvent] = []
    for block in text.split("\n\n"):
        if block.startswith("data: ") and "\n" not in block:
            events.append(SseEvent("message", block[6:]))
        elif block:
            events.extend(_parse_lines(block))
    return events


def _parse_lines(text: str) -> list[SseEvent]:
    events: list[SseEvent] = []
    name = ""
    data: list[str] = []
    for line in [*_LINE_BREAK.split(text), ""]:
        if not line:
            if data:
                events.append(SseEvent(name or "message", "\n".join(data)))
            name, data = "", []
            continue
        if line.startswith(":"):
            continue
        key, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if key == "event":
            name = value
        elif key == "data":
            data.append(value)
    return events


# Two line ends in a row; atomic, so a CRLF is never read as CR plus LF.
_BOUNDARY = re.compile(r"(?>\r\n|\r|\n)(?>\r\n|\r|\n)")
# A byte that is not UTF-8, as ``surrogateescape`` decodes it.
_UNDECODABLE = re.compile("[\udc80-\udcff]")


def _last_boundary_end(text: str, start: int) -> int:
    """Where the last event boundary of ``text`` found from ``start`` on ends (0: none), as
    ``_BOUNDARY.finditer`` pairs the line ends from the left.

    Without a CR, the last boundary is in the last run of LFs: it ends after the run's last full
    pair, counted from the run's first LF (or ``start``). Found from the end, not by a match for
    each of the events a chunk of a long stream holds."""
    if "\r" in text:
        end = 0
        for match in _BOUNDARY.finditer(text, start):
            end = match.end()
        return end
    last = text.rfind("\n\n", start)
    if last < 0:
        return 0
    first = last
    while first > start and text[first - 1] == "\n":
        first -= 1
    run = last + 2 - first
    return first + run - run % 2


class SseReader:
    """Splits a ``text/event-stream`` into events as its bytes arrive (UTF-8 split anywhere).

    Linear in the stream's length however its events are sized: the text of an unfinished event
    is kept in pieces and only the seam between the last piece and new bytes is searched for an
    event boundary; the pieces are joined once, when their event is complete.
    """

    # The longest boundary ("\r\n\r\n") less one: how much of the pending text a seam needs.
    _SEAM = 3

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="surrogateescape")
        self._pending: list[str] = []
        self._carry = ""
        # Whether a byte that is not UTF-8 was shown as U+FFFD: the events then differ from
        # what the recorded body (which keeps every byte) reads as.
        self.replaced = False

    def _decode(self, data: bytes, *, final: bool = False) -> str:
        text = self._decoder.decode(data, final)
        # A text without surrogates holds no escaped byte (told in C: most streams are ASCII).
        if not may_hold_surrogate(text) or _UNDECODABLE.search(text) is None:
            return text
        self.replaced = True
        return _UNDECODABLE.sub("\ufffd", text)

    def feed(self, data: bytes) -> list[SseEvent]:
        text = self._decode(data)
        if not text:
            return []
        seam = self._carry + text
        # A trailing CR may be the first half of a CRLF: wait for the next bytes to know.
        if _BOUNDARY.search(seam[:-1] if seam.endswith("\r") else seam) is None:
            self._pending.append(text)
            self._carry = seam[-self._SEAM :]
            return []
        buffer = "".join(self._pending) + text
        usable = buffer[:-1] if buffer.endswith("\r") else buffer
        end = _last_boundary_end(usable, max(0, len(buffer) - len(seam)))
        complete, rest = buffer[:end], buffer[end:]
        self._pending = [rest] if rest else []
        self._carry = rest[-self._SEAM :]
        return parse_sse(complete)

    def close(self) -> list[SseEvent]:
        rest = "".join(self._pending) + self._decode(b"", final=True)
        self._pending, self._carry = [], ""
        return parse_sse(rest)


EventListener = Callable[[SseEvent], None]


def display_pass(handle: EventListener) -> EventListener:
    """``handle`` made harmless to the call it watches: its first failure switches it off."""
    broken = False

    def listener(event: SseEvent) -> None:
        nonlocal broken
        if broken:
            return
        try:
            handle(event)
        except Exception:  # the display is a courtesy; the recorded stream is the truth
            broken = True
            logger.exception("live display of a streamed reply stopped")

    return listener


class StreamErrorEvent(Exception):
    """An event that carries the provider's error object (``data``: the event's text)."""

    def __init__(self, data: str) -> None:
        super().__init__(data[:200])
        self.data = data


class LivePass:
    """Reads a stream's events as they arrive (``take``: the same reading the recorded body gets
    afterwards), which also feeds the display.

    While every event is read without a failure, ``whole`` holds: the reader has seen exactly
    the bytes the recorded body holds, split into the same events (``SseReader``), so its result
    may stand for reading the body again — one pass over a long stream, not two. At its first
    failure (an event it cannot read, a display that raises) it stops, and the caller reads the
    recorded body as if there had been no live pass.
    """

    def __init__(self, take: EventListener) -> None:
        self._take = take
        self.whole = True

    def __call__(self, event: SseEvent) -> None:
        if not self.whole:
            return
        try:
            self._take(event)
        except Exception:  # the recorded stream is read again, and says what is wrong
            self.whole = False
            logger.exception("live display of a streamed reply stopped (the recorded body is read instead)")


def read_events(chunks: Iterable[bytes], listener: EventListener | None) -> bytes:
    """All of ``chunks`` joined (the body to record), telling ``listener`` each event on the way."""
    body = bytearray()
    reader = SseReader() if listener is not None else None
    for chunk in chunks:
        body += chunk
        if reader is not None and listener is not None:
            for event in reader.feed(chunk):
                listener(event)
    if reader is not None and listener is not None:
        for event in reader.close():
            listener(event)
    return bytes(body)


def throttled(callback: DeltaCallback, *, interval: float) -> Throttled:
    """``callback`` called at most once per ``interval`` seconds (see ``Throttled``)."""
    return Throttled(callback, interval=interval)


def chunks_of(text: str, size: int) -> Iterator[bytes]:
    """``text`` as UTF-8 in pieces of ``size`` bytes (cut anywhere, even inside a character)."""
    data = text.encode()
    for start in range(0, len(data), size):
        yield data[start : start + size]
