"""A streamed reply costs work in proportion to its length: each piece is handled once, and the
live display's snapshots are bounded and built only when one is due. (Wall time is measured in
``bench/p11_streaming.py``; these tests count the work instead.)"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from conversations.lifecycle import TurnSignal
from conversations.loop.providers.base import ModelReply, ModelRequest
from conversations.loop.providers.openai_chat import _ChunkAssembler
from conversations.loop.providers.openai_responses import _ItemAssembler
from conversations.loop.providers.streaming import (
    SNAPSHOT_TAIL_CHARS,
    PartialEmitter,
    PartialReply,
    SseReader,
    Throttled,
    parse_sse,
)
from conversations.loop.wire import WireExchange
from conversations.record import recording
from conversations.record.recording import TurnRecorder
from conversations.runner import AbandonableProvider
from inspector import live
from tests.factories import TurnFactory

KEY = "sk-proj-Abcdefghijklmnopqrstuvwxyz0123456789"
MEGABYTE = 1_000_000


# A snapshot that shows something is sent once, then none is built until the next is due; the
# events of a stream may show nothing for a long while (events of no known type, an item with
# nothing to show yet): nothing is sent, and nothing may be built at every event either.
@pytest.mark.parametrize(("text", "sent"), [("piece", 1), ("", 0)], ids=["shows-something", "shows-nothing"])
def test_a_snapshot_is_built_only_when_the_display_would_take_it(text: str, sent: int) -> None:
    shown: list[PartialReply] = []
    emitter = PartialEmitter(Throttled(shown.append, interval=3600))
    built = 0

    def snapshot() -> PartialReply:
        nonlocal built
        built += 1
        return PartialReply(text=text and f"{text} {built}")

    for _ in range(100_000):
        emitter.offer(snapshot)

    assert built == 1 and len(shown) == sent


class _ManyCalls:
    """A provider streaming a Responses reply of ``CALLS`` function calls to its ``on_delta``."""

    CALLS = 10_000

    def __init__(self) -> None:
        self.assembler: _ItemAssembler | None = None

    def complete(self, request: ModelRequest, *, on_delta: Any = None) -> ModelReply:
        self.assembler = _ItemAssembler(emitter=PartialEmitter(on_delta))
        for index in range(self.CALLS):
            item = {"type": "function_call", "call_id": f"c{index}", "name": "echo", "arguments": ""}
            self.assembler.add({"type": "response.output_item.added", "output_index": index, "item": item})
            self.assembler.add(
                {"type": "response.function_call_arguments.delta", "output_index": index, "delta": "{}"}
            )
        exchange = WireExchange(channel="llm", label="responses", started_at=datetime.now(UTC))
        return ModelReply(text=None, tool_calls=[], finish_reason="tool_calls", exchange=exchange)


def test_a_reply_of_ten_thousand_calls_through_a_turns_provider_builds_few_snapshots(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A turn's provider hands the model call a relay of the display's callback: the throttle
    # behind the relay must still keep snapshots from being built at each of the 20,000 events
    # (each one walks every call so far: a minute and more of a worker's CPU for one reply).
    inner = _ManyCalls()
    built = 0
    original = _ItemAssembler.partial

    def counted(self: _ItemAssembler) -> PartialReply:
        nonlocal built
        built += 1
        return original(self)

    monkeypatch.setattr(_ItemAssembler, "partial", counted)
    shown: list[PartialReply] = []
    provider = AbandonableProvider(inner=inner, signal=TurnSignal(turn_id=1))  # type: ignore[arg-type]
    request = ModelRequest(messages=[])

    provider.complete(request, on_delta=Throttled(shown.append, interval=3600))

    assert len(shown) == 1 and shown[0].calls[0].id == "c0"
    assert built == 1


def test_a_megabyte_reply_gives_snapshots_of_its_tail_only() -> None:
    shown: list[PartialReply] = []
    assembler = _ChunkAssembler(emitter=PartialEmitter(shown.append))
    piece = "0123456789abcdef"
    for _ in range(MEGABYTE // len(piece) // 100):
        assembler.add({"choices": [{"index": 0, "delta": {"content": piece * 100}}]})
    arguments = '{"text": "' + "x" * MEGABYTE + '"}'
    for start in range(0, len(arguments), 100_000):
        fragment = {
            "index": 0,
            "id": "c",
            "function": {"name": "echo", "arguments": arguments[start : start + 100_000]},
        }
        assembler.add({"choices": [{"index": 0, "delta": {"tool_calls": [fragment]}}]})

    last = shown[-1]
    assert len(last.text) == SNAPSHOT_TAIL_CHARS and last.text.endswith(piece)
    assert len(last.calls[0].arguments) == SNAPSHOT_TAIL_CHARS and last.calls[0].arguments.endswith('x"}')
    # The reply itself is whole.
    message = assembler.message()
    assert len(str(message["content"])) == MEGABYTE - MEGABYTE % (len(piece) * 100)


def test_an_event_arriving_in_a_thousand_pieces_is_read_once_whole() -> None:
    event = b"data: " + b'{"x": "' + b"y" * MEGABYTE + b'"}\n\n'
    reader = SseReader()
    events = []
    for start in range(0, len(event), 1000):
        events.extend(reader.feed(event[start : start + 1000]))

    assert len(events) == 1 and len(events[0].data) == MEGABYTE + 9
    assert events == parse_sse(event.decode())


@pytest.mark.django_db
def test_a_tail_that_begins_inside_a_secret_shows_none_of_it(monkeypatch: pytest.MonkeyPatch) -> None:
    published: list[dict[str, Any]] = []
    monkeypatch.setattr(live, "publish_step_partial", lambda **event: published.append(event))
    # A display as long as the snapshot (it is shorter by default, which only helps).
    monkeypatch.setattr(recording, "PARTIAL_TAIL_CHARS", SNAPSHOT_TAIL_CHARS)
    recorder = TurnRecorder(TurnFactory())
    # The snapshot's tail was cut in the middle of a key: its end matches no redaction pattern.
    tail = KEY[10:] + " then words " + "z " * (SNAPSHOT_TAIL_CHARS // 2)
    tail = tail[:SNAPSHOT_TAIL_CHARS]

    recorder.partial_sink(1)(PartialReply(text=tail))

    shown = published[-1]["text"]
    assert KEY[10:] not in shown and shown.startswith(" then words ")
