"""The stdio proxy's recorder survives whatever goes wrong while recording: hostile lines through a
real ``manage.py proxy stdio`` (an id of the wrong shape, NUL bytes raw and escaped, a lone
surrogate, bytes that are not UTF-8, a label and an id longer than their columns) are passed on
byte for byte and recorded, and the line after them is recorded too; a failure no real input
triggers (the parser raising, the store raising something other than "the database is away",
a full disk while spooling) is logged, the message it hit is stored marked, and recording goes
on."""

from __future__ import annotations

import io
import json
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.db import IntegrityError, OperationalError

from conversations.loop.wire import WireExchange, decode_body
from conversations.models import Exchange
from conversations.proxy.keys import create_key
from conversations.proxy.models import ProxyKey
from servers.proxy.pairing import HOST, READ_FAILED, SERVER, Pairer
from servers.proxy.recorder import Recorder
from servers.proxy.service import key_store
from servers.proxy.spool import Spool
from tests.servers.proxy.support import proxy_command, proxy_env, recorded

pytestmark = pytest.mark.django_db(transaction=True)

HOSTILE = [
    b'{"jsonrpc":"2.0","id":{"a":1},"result":[]}\n',
    b'{"jsonrpc":"2.0","method":"raw nul \x00 here"}\n',
    b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"t","arguments":{"a":"\\u0000"}}}\n',
    b'{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"t\\ud800","arguments":{"b":"\\udfff"}}}\n',
    b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t","arguments":{"n":NaN}}}\n',
    b'\xff\xfe{"jsonrpc":"2.0","method":"not utf-8 \xc3"}\n',
    b'{"jsonrpc":"2.0","method":"' + b"m" * 1000 + b'"}\n',
    b'{"jsonrpc":"2.0","id":"' + b"i" * 500 + b'","method":"ping"}\n',
    b'{"jsonrpc":"2.0","id":[1,{"x":null}],"method":"tools/list","params":{"cursor":{}}}\n',
    b'{"jsonrpc":"2.0","id":8,"result":{"tools":[{"name":{"deep":[]}},7,null]}}\n',
    b"[]\n",
    # One id twice in flight: the first request is not lost under the second.
    b'{"jsonrpc":"2.0","id":"twice","method":"tools/call","params":{"name":"first"}}\n',
    b'{"jsonrpc":"2.0","id":"twice","method":"tools/call","params":{"name":"second"}}\n',
    *(
        b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"t","arguments":{"a":' % depth
        + b"[" * depth
        + b"]" * depth
        + b"}}}\n"
        for depth in (400, 800, 900, 950, 990)
    ),
    b"\x00\x00\x00\n",
]
AFTER = b'{"jsonrpc":"2.0","method":"notifications/after"}\n'


def _alice_key() -> tuple[ProxyKey, str]:
    alice = get_user_model().objects.create_user("alice", password="pw")
    return create_key(alice, name="laptop")


def _bodies(rows: Sequence[Exchange]) -> list[str]:
    """Every body stored, and the text a body stored escaped (a JSON string literal) stands for."""
    out = []
    for row in rows:
        for body in (row.request_body, row.response_body):
            out.append(body)
            for piece in (body, body.split("\n", 1)[0]):
                try:
                    value = json.loads(piece)
                except (ValueError, RecursionError):
                    continue
                if isinstance(value, str):
                    out.append(value)
    return out


def _kept(line: bytes, bodies: list[str]) -> bool:
    text = decode_body(line.rstrip(b"\n"))
    return any(body == text or body.startswith(text) for body in bodies)


def test_hostile_lines_through_the_real_proxy_pass_unchanged_and_are_each_recorded_with_what_follows(
    tmp_path: Path,
) -> None:
    key, raw = _alice_key()
    proxy = subprocess.Popen(
        proxy_command(raw, "echo", "cat", session="hostile"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=proxy_env(tmp_path / "var"),
    )
    sent = b"".join(HOSTILE) + AFTER
    out, err = proxy.communicate(sent, timeout=120)

    assert proxy.returncode == 0
    assert out == sent, "the echo did not come back byte for byte"
    assert b"Traceback" not in err, err.decode(errors="replace")[-3000:]
    rows = recorded(key)
    bodies = _bodies(rows)
    missing = [line for line in HOSTILE if not _kept(line, bodies)]
    assert not missing, f"not recorded: {missing!r}"
    assert [row.direction for row in rows if row.label == "notifications/after"] == ["client", "server"]


class _Store:
    """``record_mcp`` under a real key, made to fail on the records ``fails`` picks out."""

    def __init__(self, raw_key: str, fails: type[BaseException], when: str) -> None:
        self.real = key_store(raw_key)
        self.fails, self.when = fails, when

    def __call__(self, session: str | None, server_name: str, records: Sequence[WireExchange]) -> object:
        if any(record.label == self.when for record in records):
            raise self.fails(f"injected: {self.when}")
        return self.real(session, server_name, records)


class _ChokingPairer(Pairer):
    """A parser that raises on one message (no real line makes the real one raise)."""

    def message(self, stream: str, raw: bytes, *, cut_at: int = 0, at: float | None = None) -> WireExchange:
        if b"choke" in raw:
            raise RuntimeError("injected: the parser choked")
        return super().message(stream, raw, cut_at=cut_at, at=at)


def _recorder(tmp_path: Path, store: object, pairer: Pairer | None = None) -> tuple[Recorder, io.StringIO]:
    log = io.StringIO()
    recorder = Recorder(
        store=store,  # type: ignore[arg-type]
        spool=Spool(tmp_path / "var", "tci_test-key"),
        pairer=pairer or Pairer(line_limit=1_000_000, body_limit=1_000_000),
        session="failures",
        server_name="echo",
        log=log,
    )
    recorder.start()
    return recorder, log


def _both_ways(recorder: Recorder, *lines: bytes) -> None:
    for line in lines:
        recorder.tap(HOST, line)
        recorder.tap(SERVER, line)


def _note(name: str) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "method": name}).encode() + b"\n"


@pytest.mark.parametrize("fails", [IntegrityError, RuntimeError, ValueError, MemoryError])
def test_a_store_failure_that_is_not_the_database_away_is_logged_the_message_kept_marked_and_recording_goes_on(
    tmp_path: Path, fails: type[BaseException]
) -> None:
    key, raw = _alice_key()
    recorder, log = _recorder(tmp_path, _Store(raw, fails, "poison"))
    _both_ways(recorder, _note("notifications/before"))
    assert threading.active_count() > 1
    _both_ways(recorder, _note("poison"), _note("notifications/after"))
    assert recorder.finish(30)

    rows = recorded(key)
    labels = [row.label for row in rows]
    assert labels.count("notifications/before") == 2 and labels.count("notifications/after") == 2
    marked = [row for row in rows if "injected: poison" in row.error]
    assert len(marked) == 2 and all(row.direction == "local" for row in marked)
    assert all(_kept(_note("poison"), _bodies([row])) for row in marked)
    assert "injected: poison" in log.getvalue() and "recording goes on" in log.getvalue()


def test_the_parser_raising_on_a_line_is_logged_the_line_kept_marked_and_recording_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    key, raw = _alice_key()
    pairer = _ChokingPairer(line_limit=1_000_000, body_limit=1_000_000)
    recorder, log = _recorder(tmp_path, key_store(raw), pairer)
    # The bad line split across chunks, with good lines before and after it in the same chunks.
    recorder.tap(HOST, _note("notifications/before") + b'{"method":"ch')
    recorder.tap(HOST, b'oke"}\n' + _note("notifications/after"))
    assert recorder.finish(30)

    rows = recorded(key)
    assert [row.label for row in rows if row.direction == "client"] == [
        "notifications/before",
        "notifications/after",
    ]
    (marked,) = [row for row in rows if "injected: the parser choked" in row.error]
    assert READ_FAILED in marked.error
    assert marked.direction == "local" and '{"method":"choke"}' in _bodies([marked])
    assert "RuntimeError" in caplog.text


def test_a_full_disk_while_the_database_is_away_is_logged_and_recording_goes_on_when_it_is_back(
    tmp_path: Path,
) -> None:
    key, raw = _alice_key()
    real = key_store(raw)
    away = threading.Event()
    away.set()

    def store(session: str | None, server_name: str, records: Sequence[WireExchange]) -> object:
        if away.is_set():
            raise OperationalError("injected: the database is away")
        return real(session, server_name, records)

    recorder, log = _recorder(tmp_path, store)
    recorder.spool.path = Path("/dev/full")  # a real full disk: every write gets ENOSPC
    _both_ways(recorder, _note("notifications/lost"))
    # The spool write failed (logged); the recorder is alive and records once the database is back.
    assert _wait(lambda: "No space left on device" in log.getvalue())
    away.clear()

    def back() -> bool:
        _both_ways(recorder, _note("notifications/heartbeat"))
        return Exchange.objects.filter(label="notifications/heartbeat").exists()

    assert _wait(back)
    _both_ways(recorder, _note("notifications/after"))
    assert recorder.finish(30)

    labels = [row.label for row in recorded(key)]
    assert labels.count("notifications/after") == 2
    assert "recording goes on" in log.getvalue()


def _wait(condition: object) -> bool:
    from tests.support import wait_until

    return wait_until(condition, 30)  # type: ignore[arg-type]
