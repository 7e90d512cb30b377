"""Server-sent events read from a stream of raw chunks, for recording only (the bytes are passed
on as they came). The format: https://html.spec.whatwg.org/multipage/server-sent-events.html
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")


@dataclass
class Event:
    name: str
    data: bytes
    raw: bytes  # the event's exact bytes, its blank line included


class EventReader:
    """Chunks in, whole events out. Keeps at most ``limit`` bytes of an event still unfinished
    (a longer one is reported cut: ``Event.data`` is what was kept, ``cut`` its full size)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._buffer = bytearray()
        self._dropped = 0
        self.cut: list[tuple[Event, int]] = []

    def feed(self, chunk: bytes) -> list[Event]:
        self._buffer += chunk
        events = []
        while True:
            found = _EVENT_END.search(self._buffer)
            if found is None:
                break
            raw = bytes(self._buffer[: found.end()])
            del self._buffer[: found.end()]
            event = parse(raw)
            if self._dropped:
                self.cut.append((event, self._dropped + len(raw)))
                self._dropped = 0
            elif event.data or event.name:
                events.append(event)
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
