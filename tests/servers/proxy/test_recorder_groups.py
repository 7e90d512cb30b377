"""When the stdio proxy's recorder stores what it read: in groups, once traffic pauses (at most
one group per ``spacing_seconds``), during a burst once its oldest record has waited
``flush_seconds`` or ``group_records`` are waiting, and at the end what is left (decision 0600). Storing a group costs the most per record for small
groups, and that CPU is what the host, the byte pumps and the server would use during a burst.

The recorder runs in a thread here with a store that keeps each group's labels; the delays are
chosen so that only the rule under test can store a group in the time the test allows."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path

from conversations.loop.wire import WireExchange
from servers.proxy.pairing import HOST, SERVER, Pairer
from servers.proxy.recorder import Recorder
from servers.proxy.spool import Spool
from tests.support import wait_until

# Longer than any test here runs: a rule with this delay never stores a group.
NEVER = 600.0


class _Groups:
    """A store that keeps each group's size, as it is stored."""

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self._lock = threading.Lock()

    def __call__(self, session: str | None, server_name: str, records: Sequence[WireExchange]) -> None:
        with self._lock:
            self.sizes.append(len(records))

    def stored(self) -> int:
        with self._lock:
            return sum(self.sizes)


def _recorder(tmp_path: Path, store: _Groups, **timing: float) -> Recorder:
    recorder = Recorder(
        store=store,
        spool=Spool(tmp_path, "tci_test-key"),
        pairer=Pairer(line_limit=1_000_000, body_limit=1_000_000),
        session=None,
        server_name="time",
        **timing,  # type: ignore[arg-type]
    )
    recorder.start()
    return recorder


def _call(recorder: Recorder, number: int) -> None:
    """One ``tools/call`` and its answer, tapped as the pumps pass them on."""
    recorder.tap(HOST, b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"t"}}\n' % number)
    recorder.tap(SERVER, b'{"jsonrpc":"2.0","id":%d,"result":{"content":[]}}\n' % number)


def test_a_record_is_stored_once_traffic_pauses(tmp_path: Path) -> None:
    store = _Groups()
    recorder = _recorder(tmp_path, store, quiet_seconds=0.05, flush_seconds=NEVER)
    _call(recorder, 1)

    # Only the pause can have stored it: no flush is due, the session goes on.
    assert wait_until(lambda: store.stored() == 1, 30), store.sizes
    assert recorder.finish(30)
    assert store.sizes == [1]


def test_traffic_that_pauses_often_is_stored_a_group_per_spacing_not_a_group_per_pause(
    tmp_path: Path,
) -> None:
    store = _Groups()
    spacing = 0.3
    recorder = _recorder(tmp_path, store, quiet_seconds=0.01, spacing_seconds=spacing, flush_seconds=NEVER)
    started = time.monotonic()
    for number in range(30):  # each call followed by a pause three times the quiet time
        _call(recorder, number)
        time.sleep(0.03)
    took = time.monotonic() - started
    assert recorder.finish(30)

    assert store.stored() == 30
    # At most one group per spacing (and the last, at the end), where each pause made one before.
    assert 2 <= len(store.sizes) <= took / spacing + 2, (took, store.sizes)


def test_a_burst_is_stored_as_one_group_when_it_pauses(tmp_path: Path) -> None:
    store = _Groups()
    recorder = _recorder(tmp_path, store, quiet_seconds=2.0, flush_seconds=NEVER)
    # 0.3 s of traffic, a call every 2.5 ms: a recorder storing every 0.2 s made two groups of it.
    for number in range(120):
        _call(recorder, number)
        time.sleep(0.0025)

    assert wait_until(lambda: store.stored() == 120, 30), store.sizes
    assert store.sizes == [120]
    assert recorder.finish(30)


def test_a_long_burst_is_stored_as_it_goes_once_its_oldest_record_has_waited(tmp_path: Path) -> None:
    store = _Groups()
    recorder = _recorder(tmp_path, store, quiet_seconds=NEVER, flush_seconds=0.2)
    number = 0
    started = time.monotonic()
    while time.monotonic() - started < 1.0:  # no pause the recorder would wait for
        _call(recorder, number)
        number += 1
        time.sleep(0.002)
    during = list(store.sizes)

    assert recorder.finish(30)
    assert len(during) >= 2, during  # a group about every 0.2 s while the burst went on
    assert store.stored() == number


def test_a_group_holds_at_most_group_records(tmp_path: Path) -> None:
    store = _Groups()
    recorder = _recorder(tmp_path, store, quiet_seconds=NEVER, flush_seconds=NEVER, group_records=50)
    for number in range(175):
        _call(recorder, number)

    # The first 150 are stored before the session ends, whatever the delays.
    assert wait_until(lambda: store.stored() == 150, 30), store.sizes
    assert recorder.finish(30)
    assert store.sizes == [50, 50, 50, 25]


def test_a_group_holds_about_group_chars_characters_of_bodies_at_most(tmp_path: Path) -> None:
    store = _Groups()
    recorder = _recorder(tmp_path, store, quiet_seconds=NEVER, flush_seconds=NEVER, group_chars=1_000)
    call = len(b'{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"t"}}') + len(
        b'{"jsonrpc":"2.0","id":10,"result":{"content":[]}}'
    )
    for number in range(10, 60):
        _call(recorder, number)

    # Each group is stored once its bodies reach the limit: the last call it holds crosses it.
    per_group = -(-1_000 // call)
    assert wait_until(lambda: store.stored() >= per_group, 30), store.sizes
    assert recorder.finish(30)
    assert store.stored() == 50
    assert all(size == per_group for size in store.sizes[:-1]), (per_group, store.sizes)


def test_what_is_left_at_the_end_is_stored(tmp_path: Path) -> None:
    store = _Groups()
    recorder = _recorder(tmp_path, store, quiet_seconds=NEVER, flush_seconds=NEVER)
    for number in range(3):
        _call(recorder, number)
    recorder.tap(HOST, b'{"jsonrpc":"2.0","id":"open","method":"tools/call","params":{"name":"t"}}\n')

    assert recorder.finish(30)
    # The three calls and the request still unanswered, recorded as such.
    assert store.stored() == 4, store.sizes
