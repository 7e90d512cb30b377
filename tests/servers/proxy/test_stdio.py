"""The stdio proxy's byte pumps: whatever the host and the server send passes unchanged both ways
(lines that are not JSON, lines of megabytes, bytes that are not UTF-8, lines split across
writes), stderr is passed on too, and the server's exit code becomes the proxy's."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from conversations.loop.wire import WireExchange
from servers.proxy.pairing import Pairer
from servers.proxy.recorder import Recorder
from servers.proxy.spool import Spool
from servers.proxy.stdio import run
from tests.servers.proxy import tee_server

TEE = Path(tee_server.__file__)


class ListStore:
    """A test's stand-in for ``record_mcp``: keeps what it is given."""

    def __init__(self) -> None:
        self.records: list[WireExchange] = []

    def __call__(self, session: str | None, server_name: str, records: Sequence[WireExchange]) -> object:
        self.records.extend(records)
        return None


def _recorder(tmp_path: Path, store: ListStore, **options: int) -> Recorder:
    return Recorder(
        store=store,
        spool=Spool(tmp_path / "var", "tci_test-key"),
        pairer=Pairer(line_limit=options.get("line_limit", 10_000_000), body_limit=10_000_000),
        session=None,
        server_name="tee",
        queue_limit=options.get("queue_limit", 64_000_000),
    )


def _read_all(fd: int, into: bytearray) -> threading.Thread:
    def drain() -> None:
        while chunk := os.read(fd, 65536):
            into.extend(chunk)
        os.close(fd)

    thread = threading.Thread(target=drain)
    thread.start()
    return thread


def _proxy(
    tmp_path: Path, host_pieces: list[bytes], recorder: Recorder, code: int = 7
) -> tuple[int, bytes, bytes]:
    """Run the tee server behind the proxy, the host side on pipes: returns (exit code, what the
    host received on stdout, what reached the proxy's stderr)."""
    host_in_r, host_in_w = os.pipe()
    host_out_r, host_out_w = os.pipe()
    err_r, err_w = os.pipe()
    out, err = bytearray(), bytearray()
    readers = [_read_all(host_out_r, out), _read_all(err_r, err)]

    def host() -> None:
        for piece in host_pieces:  # each piece its own write: the proxy sees partial lines
            os.write(host_in_w, piece)
        os.close(host_in_w)  # the host goes away: the server must see EOF

    writer = threading.Thread(target=host)
    writer.start()
    recorder.start()
    received = tmp_path / "received"
    command = [sys.executable, str(TEE), str(received), str(code)]
    try:
        status = asyncio.run(
            run(command, recorder, stdin_fd=host_in_r, stdout_fd=host_out_w, stderr_fd=err_w)
        )
    finally:
        for fd in (host_in_r, host_out_w, err_w):
            os.close(fd)
    writer.join()
    for reader in readers:
        reader.join()
    assert recorder.finish(30)
    assert received.read_bytes() == b"".join(host_pieces)
    return status, bytes(out), bytes(err)


HOST_PIECES = [
    b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}\n',
    b"plain text, not JSON\n",
    b'{"jsonrpc":"2.0","method":"\xc3\x28 not utf8"}\n',
    b'{"jsonrpc":"2.0","id":2,',  # split across writes
    b'"method":"tools/list"}\r\n',
    b'{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"arguments":{"s":"'
    + b"y" * 2_000_000
    + b'"}}}\n',
    b"no newline at the end",
]


def test_every_byte_passes_unchanged_both_ways_and_the_exit_code_is_the_servers(tmp_path: Path) -> None:
    store = ListStore()
    status, out, err = _proxy(tmp_path, HOST_PIECES, _recorder(tmp_path, store))
    assert out == b"".join(tee_server.SCRIPT) + tee_server.TAIL
    assert err == tee_server.STDERR
    assert status == 7
    labels = [record.label for record in store.records]
    assert "stdout (not JSON)" in labels and "stdin (not JSON)" in labels and "stderr" in labels
    assert {"initialize", "tools/list", "tools/call", "notifications/message", "notifications/bye"} <= set(
        labels
    )
    big = next(record for record in store.records if record.label == "tools/call")
    assert len(big.request_body) > 2_000_000
    stderr = next(record for record in store.records if record.label == "stderr")
    assert stderr.response_body.encode("utf-8", "surrogateescape") == tee_server.STDERR


def test_a_line_over_the_limit_is_passed_whole_and_recorded_cut_and_marked(tmp_path: Path) -> None:
    store = ListStore()
    status, out, _ = _proxy(tmp_path, HOST_PIECES, _recorder(tmp_path, store, line_limit=1000))
    assert out == b"".join(tee_server.SCRIPT) + tee_server.TAIL
    assert status == 7
    cut = [record for record in store.records if "MCP_STDOUT_LINE_LIMIT" in record.error]
    assert {record.label for record in cut} == {"stdin (not JSON)", "stdout (not JSON)"}
    assert all(len(record.response_body) <= 1000 for record in cut)
    assert any("3,000,0" in record.error for record in cut)


def test_when_the_recorder_falls_behind_traffic_still_passes_and_the_gap_is_marked(tmp_path: Path) -> None:
    store = ListStore()
    status, out, _ = _proxy(tmp_path, HOST_PIECES, _recorder(tmp_path, store, queue_limit=100_000))
    assert out == b"".join(tee_server.SCRIPT) + tee_server.TAIL
    assert status == 7
    assert any("recorder was behind" in record.error for record in store.records)


def test_a_host_whose_stdin_and_stdout_are_regular_files_is_proxied_byte_for_byte(tmp_path: Path) -> None:
    source, sink, errors = tmp_path / "in", tmp_path / "out", tmp_path / "err"
    source.write_bytes(b"".join(HOST_PIECES))
    store = ListStore()
    recorder = _recorder(tmp_path, store)
    recorder.start()
    received = tmp_path / "received"
    with source.open("rb") as host_in, sink.open("wb") as host_out, errors.open("wb") as host_err:
        status = asyncio.run(
            run(
                [sys.executable, str(TEE), str(received), "3"],
                recorder,
                stdin_fd=host_in.fileno(),
                stdout_fd=host_out.fileno(),
                stderr_fd=host_err.fileno(),
            )
        )
    assert recorder.finish(30)
    assert status == 3
    assert received.read_bytes() == b"".join(HOST_PIECES)
    assert sink.read_bytes() == b"".join(tee_server.SCRIPT) + tee_server.TAIL
    assert errors.read_bytes() == tee_server.STDERR
    assert "tools/call" in [record.label for record in store.records]
