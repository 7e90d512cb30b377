"""The HTTP proxy's reading of a server's event stream costs the stream's length, however the
server sizes and chunks its events: a 32 MB event in 4 kB chunks is read within a CPU budget
(each chunk is searched once, not the whole unfinished event again), and so is a 32 MB start of
a legacy stream held back before its ``endpoint`` event. The events read are the ones read
before, wherever the chunks split the stream (between CR and LF, inside a UTF-8 character)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from servers.proxy import sse
from servers.proxy.http import EndpointRewrite
from servers.proxy.sse import Event, EventReader, parse
from tests.support import within_cpu_limit

# CPU seconds a subprocess may spend reading 32 MB: reading it once takes a fraction of a second,
# searching the unfinished event again at every 4 kB chunk takes minutes.
CPU_BUDGET = 10

STREAM = (
    b": a comment\n\n"
    b'event: message\r\ndata: {"jsonrpc":"2.0","id":1}\r\n\r\n'
    b"\n\n\r\r\r\n\r\n"
    b"data: caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x98\x80\rdata: second line\r\r"
    b"event: endpoint\ndata: /messages?sessionId=1\n\n"
    b"id: 7\nretry: 10\n\n"
    b"data:no space\r\n\r\n"
    b"data: a\n\rdata: b\r\n\n"
    b"data: the last, unfinished\n"
)


class _Before(EventReader):
    """The reader as it was: the whole unfinished event searched from its first byte at every
    chunk. Kept here as the reading the new one must give."""

    def feed(self, chunk: bytes) -> list[Event]:
        self._buffer += chunk
        events = []
        while True:
            found = re.search(rb"\r\n\r\n|\n\n|\r\r", self._buffer)
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


def _read(reader: EventReader, chunks: list[bytes]) -> tuple[list[Event], list[tuple[Event, int]]]:
    events = [event for chunk in chunks for event in reader.feed(chunk)]
    return events, reader.cut


def _splits(stream: bytes) -> list[list[bytes]]:
    """The stream in two chunks at every byte, in three with the middle one up to six bytes long
    (a boundary across three chunks), and a byte at a time."""
    splits = [[stream[:i], stream[i:]] for i in range(len(stream) + 1)]
    splits += [
        [stream[:i], stream[i:j], stream[j:]]
        for i in range(len(stream))
        for j in range(i + 1, min(i + 7, len(stream) + 1))
    ]
    return [*splits, [stream[i : i + 1] for i in range(len(stream))]]


def test_the_events_are_each_event_the_stream_holds_wherever_the_chunks_split_it() -> None:
    whole = [parse(found.group()) for found in re.finditer(rb"(?s).*?(\r\n\r\n|\n\n|\r\r)", STREAM)]
    expected = [event for event in whole if event.data or event.name]
    assert [event.data for event in expected] == [
        b'{"jsonrpc":"2.0","id":1}',
        "café ✓ 😀\nsecond line".encode(),
        b"/messages?sessionId=1",
        b"no space",
        b"a\nb",
    ]
    assert expected[1].raw.endswith(b"\r\r") and expected[0].raw.endswith(b"\r\n\r\n")
    for chunks in _splits(STREAM):
        assert _read(EventReader(1_000_000), chunks) == (expected, []), chunks


def test_an_event_end_split_across_chunks_ends_one_event_and_leaves_nothing_behind() -> None:
    reader = EventReader(1000)
    assert reader.feed(b"data: x\r\n\r") == []
    assert [event.raw for event in reader.feed(b"\n")] == [b"data: x\r\n\r\n"]
    assert [event.raw for event in reader.feed(b"data: y\n\n")] == [b"data: y\n\n"]


@pytest.mark.parametrize("limit", [5, 16, 40, 1_000_000])
def test_events_and_cut_events_are_the_ones_read_before(limit: int) -> None:
    for chunks in _splits(STREAM):
        assert _read(EventReader(limit), chunks) == _read(_Before(limit), chunks), chunks


class _Counting:
    """The event-end pattern, counting the bytes each search reads (up to the end it finds)."""

    def __init__(self, pattern: re.Pattern[bytes]) -> None:
        self.pattern = pattern
        self.searched = 0

    def search(self, string: Any, pos: int = 0) -> re.Match[bytes] | None:
        found = self.pattern.search(string, pos)
        self.searched += (len(string) if found is None else found.end()) - pos
        return found


@pytest.mark.parametrize("limit", [1_000_000, 10_000])
def test_each_chunk_of_an_unfinished_event_is_searched_once(monkeypatch: Any, limit: int) -> None:
    counting = _Counting(sse._EVENT_END)
    monkeypatch.setattr(sse, "_EVENT_END", counting)
    reader = EventReader(limit)
    chunk, count = b"\n" + b"x" * 1000, 500
    assert reader.feed(b"event: big\ndata: ") == []
    for _ in range(count):
        assert reader.feed(chunk) == []
    whole = reader.feed(b"\n\n")
    assert (len(whole), len(reader.cut)) == ((1, 0) if limit > 500_000 else (0, 1))
    # Each chunk, and the three bytes before it (an event end may begin there), once.
    assert counting.searched <= (len(chunk) + 3) * (count + 2)


def test_the_held_start_of_a_legacy_stream_is_searched_once(monkeypatch: Any) -> None:
    counting = _Counting(sse._EVENT_END)
    monkeypatch.setattr(sse, "_EVENT_END", counting)
    held = EndpointRewrite(lambda endpoint: f"/proxy/k/sse/s/messages?to={endpoint}")
    chunk, count = b": keep-alive\n\n" * 70, 500
    for _ in range(count):
        assert held.feed(chunk) is None
    released = held.feed(b"event: endpoint\ndata: /m?s=1\n\n")
    assert released == (
        chunk * count + b"event: endpoint\ndata: /proxy/k/sse/s/messages?to=/m?s=1\n\n",
        "/m?s=1",
    )
    assert counting.searched <= (len(chunk) + 3) * (count + 2)


def test_the_endpoint_event_is_rewritten_wherever_the_chunks_split_the_stream() -> None:
    stream = b": hello\n\ndata: first\r\n\r\nevent: endpoint\r\ndata: /m?s=\xc3\xa9\r\n\r\ndata: after\n\n"
    rewritten = b": hello\n\ndata: first\r\n\r\nevent: endpoint\ndata: <\xc3\xa9>\n\ndata: after\n\n"
    for chunks in _splits(stream):
        held = EndpointRewrite(lambda endpoint: f"<{endpoint[-1]}>")
        released = [held.feed(chunk) for chunk in chunks]
        first = next(i for i, out in enumerate(released) if out is not None)
        rest = len(b"".join(chunks[first + 1 :]))
        assert released[first] == (rewritten[: len(rewritten) - rest], "/m?s=é"), chunks
        # Released with the chunk that completes the endpoint event.
        assert len(stream) - rest - len(chunks[first]) < stream.index(b"data: after") <= len(stream) - rest


def test_each_event_says_where_it_begins_in_the_stream_cut_events_counted() -> None:
    for chunks in _splits(STREAM):
        reader = EventReader(len(STREAM))
        for event in (event for chunk in chunks for event in reader.feed(chunk)):
            assert STREAM[event.start : event.start + len(event.raw)] == event.raw, chunks
    stream = b"data: " + b"x" * 100 + b"\n\nevent: endpoint\ndata: /m\n\n"
    reader = EventReader(40)
    [after] = [event for i in range(0, len(stream), 7) for event in reader.feed(stream[i : i + 7])]
    assert stream[after.start :] == after.raw
    assert [size for _, size in reader.cut] == [len(b"data: ") + 100 + 2]


def test_an_earlier_event_holding_the_endpoint_events_bytes_is_not_the_one_rewritten() -> None:
    """A server's message whose data lines hold an endpoint event's text: the real endpoint
    event after it is the one pointed back through the proxy (a search for its bytes found the
    copy first, and the host would have posted straight to the server, unrecorded)."""
    decoy = b"data: event: endpoint\ndata: https://elsewhere.example/m\n\n"
    real = b"event: endpoint\ndata: https://elsewhere.example/m\n\n"
    held = EndpointRewrite(lambda endpoint: "/proxy/m")

    released = held.feed(decoy + real)

    assert released == (decoy + b"event: endpoint\ndata: /proxy/m\n\n", "https://elsewhere.example/m")


def _within_cpu_budget(setup: str, work: str) -> str:
    """``setup`` then ``work`` in a Python of its own, stopped once ``work`` has taken CPU_BUDGET
    CPU seconds; what it printed."""
    return within_cpu_limit(work, setup=setup, seconds=CPU_BUDGET)


def test_a_32_mb_event_in_4_kb_chunks_is_read_within_a_cpu_budget() -> None:
    out = _within_cpu_budget(
        "from servers.proxy.sse import EventReader\n",
        """
chunk = b"\\n" + b"x" * 4095
for limit in (64_000_000, 1_000_000):  # kept whole; kept cut
    reader = EventReader(limit)
    reader.feed(b"event: big\\ndata: ")
    for _ in range(8192):
        assert reader.feed(chunk) == []
    events = reader.feed(b"\\n\\n")
    print(len(events[0].raw) if events else reader.cut[0][1])
""",
    )
    assert out.split() == [str(17 + 32 * 2**20 + 2)] * 2


def test_a_32_mb_start_of_a_legacy_stream_before_its_endpoint_is_read_within_a_cpu_budget() -> None:
    out = _within_cpu_budget(
        """
import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "inspector.settings")
django.setup()
from servers.proxy.http import EndpointRewrite
""",
        """
held = EndpointRewrite(lambda endpoint: "/proxy" + endpoint)
assert held.feed(b"data: ") is None
for _ in range(8192):
    assert held.feed(b"x" * 4096) is None
released, endpoint = held.feed(b"\\n\\nevent: endpoint\\ndata: /m\\n\\n")
print(len(released), endpoint, repr(released[-32:]), sep="\\n")
""",
    )
    endpoint = b"event: endpoint\ndata: /proxy/m\n\n"
    assert out.splitlines() == [str(6 + 32 * 2**20 + 2 + len(endpoint)), "/m", repr(endpoint)]
