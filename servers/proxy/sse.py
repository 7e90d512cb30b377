"""Server-sent events read from a stream of raw chunks, for recording only (the bytes are passed
on as they came). The format: https://html.spec.whatwg.org/multipage/server-sent-events.html
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")
# The longest event end less one byte: how much of what was searched a new chunk's search takes
# in again, for an end that the chunk completes.
_SEAM = 3


@dataclass
class Event:
    name: str
    data: bytes
    raw: bytes  # the event's exact bytes, its blank line included
    # Where ``raw`` begins in the stream its reader was fed (set by ``EventReader``).
    start: int = field(default=0, compare=False)


class EventReader:
    """Chunks in, whole events out. Keeps at most ``limit`` bytes of an event still unfinished
    (a longer one is reported cut: ``Event.data`` is what was kept, ``cut`` its full size).

    Linear in the stream's length however its events are sized and chunked: a chunk is searched
    for an event's end once, with the few bytes before it, never the unfinished event again.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._buffer = bytearray()
        # Where ``_buffer`` begins in the stream.
        self._position = 0
        self._dropped = 0
        self.cut: list[tuple[Event, int]] = []

    def feed(self, chunk: bytes) -> list[Event]:
        # The unfinished event holds no end: only its last bytes may begin one.
        searched = max(0, len(self._buffer) - _SEAM)
        self._buffer += chunk
        events: list[Event] = []
        taken = 0
        skipped = 0  # bytes of cut events before ``taken`` that were never kept
        while (found := _EVENT_END.search(self._buffer, searched)) is not None:
            raw = bytes(self._buffer[taken : found.end()])
            start = self._position + taken + skipped
            taken = searched = found.end()
            event = parse(raw)
            event.start = start
            if self._dropped:
                self.cut.append((event, self._dropped + len(raw)))
                skipped += self._dropped
                self._dropped = 0
            elif event.data or event.name:
                events.append(event)
        del self._buffer[:taken]
        self._position += taken + skipped
        if len(self._buffer) > self.limit:
            self._dropped += len(self._buffer) - self.limit
            del self._buffer[self.limit :]
        return events


def parse(raw: bytes) -> Event:
    name, data = "", []
    for line in re.split(rb"\r\n|\n|\r", raw):
        field, _, value = line.partition(b":")
        if value.startswith(b" "):
            value = value[1:]
        if field == b"event":
            name = value.decode("utf-8", "replace")
        elif field == b"data":
            data.append(value)
    return Event(name=name, data=b"\n".join(data), raw=raw)
