"""Pairing across processes: a request one pairer handed to the shared store pairs with the answer
another pairer sees (two web processes behind a load balancer); the stream that carried it takes
back what no answer took; one pop wins; a store that fails leaves pairing as it was."""

from __future__ import annotations

from datetime import UTC, datetime

from conversations.loop.wire import WireExchange
from servers.proxy.http import CachePending
from servers.proxy.pairing import HOST, SERVER, Pairer, Shared

SAMPLING = b'{"jsonrpc":"2.0","id":0,"method":"sampling/createMessage","params":{}}'
ANSWER = b'{"jsonrpc":"2.0","id":0,"result":{"role":"assistant","content":{"type":"text","text":"ok"}}}'


class DictStore:
    """One shared store of two pairers (as the cache is of two web processes)."""

    def __init__(self) -> None:
        self.entries: dict[str, Shared] = {}

    def put(self, key: str, entry: Shared) -> None:
        self.entries[key] = entry

    def pop(self, key: str) -> Shared | None:
        return self.entries.pop(key, None)


class DownStore:
    def put(self, key: str, entry: Shared) -> None:
        raise ConnectionError("the cache is down")

    def pop(self, key: str) -> Shared | None:
        raise ConnectionError("the cache is down")


def _pairer(store: object) -> Pairer:
    return Pairer(line_limit=10_000, body_limit=10_000, shared=store)  # type: ignore[arg-type]


def test_a_request_handed_off_by_one_pairer_pairs_with_the_answer_another_sees() -> None:
    store = DictStore()
    first, second = _pairer(store), _pairer(store)
    asked = first.message(SERVER, SAMPLING)
    key = first.hand_off(asked)
    assert key is not None and not first.pending(asked) and first.take() == []

    paired = second.message(HOST, ANSWER)

    assert paired.label == "sampling/createMessage" and paired.direction == "server"
    assert paired.status == "ok" and paired.request_body == SAMPLING.decode()
    assert paired.response_body == ANSWER.decode() and paired.duration_ms is not None
    assert second.take() == [paired]
    # The stream that carried it ends: nothing is left to take back.
    assert not first.take_back(key, asked)


def test_what_no_answer_took_is_taken_back_once_and_recorded_as_unanswered() -> None:
    store = DictStore()
    first, second = _pairer(store), _pairer(store)
    asked = first.message(SERVER, SAMPLING)
    key = first.hand_off(asked)
    assert key is not None

    assert first.take_back(key, asked)
    assert not second.take_back(key, asked)
    first.settle(asked, body="", error="its stream ended", status="no response")

    [record] = first.take()
    assert (record.label, record.status, record.error) == (
        "sampling/createMessage",
        "no response",
        "its stream ended",
    )
    # A late answer is still recorded, as a response to an id no request waits for.
    late = second.message(HOST, ANSWER)
    assert late.label == "response to unknown id" and second.take() == [late]


def test_a_store_that_fails_leaves_the_request_pairing_in_its_own_process() -> None:
    pairer = _pairer(DownStore())
    asked = pairer.message(SERVER, SAMPLING)
    assert pairer.hand_off(asked) is None and pairer.pending(asked)

    paired = pairer.message(HOST, ANSWER)

    assert paired is asked and paired.status == "ok"


def test_the_cache_store_gives_an_entry_to_one_pop_only() -> None:
    record = WireExchange(channel="mcp", label="sampling/createMessage", started_at=datetime.now(UTC))
    one, other = CachePending(("key", "server", "session")), CachePending(("key", "server", "session"))
    one.put("server:0", (record, 1.0))
    assert CachePending(("key", "server", "another session")).pop("server:0") is None

    taken = other.pop("server:0")

    assert taken is not None and taken[0].label == "sampling/createMessage" and taken[1] == 1.0
    assert one.pop("server:0") is None
