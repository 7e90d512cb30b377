"""The stdio proxy's recorder in a process of its own (``Recorder.start(own_process=True)``, as
``manage.py proxy stdio`` starts it): it records in another process than the one that taps the
bytes, ends once it has recorded what it was sent, and keeps recording what a proxy that was
killed had already passed on. Each case runs in a fresh interpreter of its own: a process with
threads (this one) does not fork its recorder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from servers.proxy.recorder import RECORDER_NICENESS
from tests.servers.proxy.support import REPO
from tests.support import wait_until

# The proxy's side: a recorder whose store writes each record, with the storing process's id,
# to OUT; two messages tapped, then finished (or, with KILL set, the proxy killed at once).
SCRIPT = """
import json, os, signal, sys
import django
django.setup()
from servers.proxy.pairing import HOST, SERVER, Pairer
from servers.proxy.recorder import Recorder
from servers.proxy.spool import Spool
out, var, kill = sys.argv[1], sys.argv[2], sys.argv[3] == "kill"

def store(session, server_name, records):
    with open(out, "a") as kept:
        for record in records:
            kept.write(json.dumps({"pid": os.getpid(), "nice": os.getpriority(os.PRIO_PROCESS, 0),
                                   "label": record.label,
                                   "size": len(record.request_body) + len(record.response_body)}) + "\\n")

from pathlib import Path
recorder = Recorder(store=store, spool=Spool(Path(var), "tci_test-key"),
                    pairer=Pairer(line_limit=10_000_000, body_limit=10_000_000),
                    session=None, server_name="tee")
recorder.start(own_process=True)
print(json.dumps({"pid": os.getpid(), "own": recorder.in_own_process,
                  "nice": os.getpriority(os.PRIO_PROCESS, 0)}), flush=True)
recorder.tap(HOST, b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"}}\\n')
recorder.tap(SERVER, b'{"jsonrpc":"2.0","id":1,"result":{"content":[]}}\\n')
recorder.tap(HOST, b'{"jsonrpc":"2.0","id":2,"method":"ping"}\\n')
# Finishing: a chunk larger than the pipe takes at once (it waits in memory for finish).
tail = b"" if kill else b"x" * 3_000_000 + b"\\n"
recorder.tap(SERVER, b'{"jsonrpc":"2.0","id":2,"result":{}}\\n' + tail)
if kill:
    os.kill(os.getpid(), signal.SIGKILL)
print(json.dumps({"finished": recorder.finish(30)}), flush=True)
"""


def _script(tmp_path: Path, script: str, mode: str) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in a fresh interpreter with its records file, var dir and ``mode``."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "VAR_DIR": str(tmp_path / "var")}
    env.setdefault("DJANGO_SETTINGS_MODULE", "inspector.settings")
    return subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "records.jsonl"), str(tmp_path / "var"), mode],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _run(tmp_path: Path, mode: str) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    done = _script(tmp_path, SCRIPT, mode)
    printed = [json.loads(line) for line in done.stdout.splitlines()]
    return printed, _records(tmp_path / "records.jsonl", 2)


def _records(out: Path, count: int) -> list[dict[str, object]]:
    # The recorder's process may outlive a killed proxy by a moment: bounded wait for its lines.
    assert wait_until(lambda: out.exists() and len(out.read_text().splitlines()) >= count, 30)
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_a_recorder_of_its_own_records_in_another_process_and_has_finished_when_finish_returns(
    tmp_path: Path,
) -> None:
    printed, records = _run(tmp_path, "finish")

    assert printed[0]["own"] is True
    assert printed[1] == {"finished": True}
    assert [record["label"] for record in records] == ["tools/call", "ping", "stdout (not JSON)"]
    assert printed[0]["pid"] not in {record["pid"] for record in records}
    # The chunk larger than the pipe holds at once went whole.
    assert records[2]["size"] == 3_000_000


def test_the_recorders_process_is_nicer_than_the_proxy(tmp_path: Path) -> None:
    """Where the cores are busy, the host, the pumps and the server go first (decision 0550)."""
    printed, records = _run(tmp_path, "finish")

    assert printed[0]["nice"] < 19  # else nothing could be nicer
    assert {record["nice"] for record in records} == {min(19, printed[0]["nice"] + RECORDER_NICENESS)}


def test_what_a_killed_proxy_had_passed_on_is_still_recorded(tmp_path: Path) -> None:
    printed, records = _run(tmp_path, "kill")

    assert len(printed) == 1  # the proxy died before finishing
    assert [record["label"] for record in records] == ["tools/call", "ping"]


# A chunk larger than the recorder may hold is passed on but not kept: only its description
# reaches the recorder. The newlines in it still end the lines they ended.
DROPPED_SCRIPT = """
import json, sys
import django
django.setup()
from pathlib import Path
from servers.proxy.pairing import HOST, SERVER, Pairer
from servers.proxy.recorder import Recorder
from servers.proxy.spool import Spool
out, var, mode = sys.argv[1], sys.argv[2], sys.argv[3]

def store(session, server_name, records):
    with open(out, "a") as kept:
        for record in records:
            kept.write(json.dumps({"label": record.label, "error": record.error}) + "\\n")

recorder = Recorder(store=store, spool=Spool(Path(var), "tci_test-key"),
                    pairer=Pairer(line_limit=10_000, body_limit=10_000),
                    session=None, server_name="tee", queue_limit=1000)
recorder.start(own_process=mode == "own")
print(json.dumps({"own": recorder.in_own_process}), flush=True)
big = b'{"jsonrpc":"2.0","method":"notifications/big","params":{"x":"' + b"x" * 2000 + b'"}}\\n'
recorder.tap(HOST, big + b'{"jsonrpc":"2.0","id":7,"method":"ping"}\\n{"jsonrpc":')
recorder.tap(HOST, b'"2.0","method":"notifications/cut"}\\n')
recorder.tap(SERVER, b'{"jsonrpc":"2.0","id":7,"result":{}}\\n')
recorder.tap(HOST, b'{"jsonrpc":"2.0","method":"notifications/after"}\\n')
print(json.dumps({"finished": recorder.finish(30)}), flush=True)
"""


@pytest.mark.parametrize("mode", ["own", "thread"])
def test_a_chunk_too_large_to_keep_still_ends_its_lines_so_the_next_messages_are_read(
    tmp_path: Path, mode: str
) -> None:
    done = _script(tmp_path, DROPPED_SCRIPT, mode)
    printed = [json.loads(line) for line in done.stdout.splitlines()]
    assert printed == [{"own": mode == "own"}, {"finished": True}], done.stderr[-2000:]
    records = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]

    labels = [record["label"] for record in records]
    assert "notifications/after" in labels, records
    assert "response to unknown id" in labels  # its ping passed in the chunk not kept
    behind = [record["error"] for record in records if "recorder was behind" in record["error"]]
    assert any("2,064 bytes of it passed" in error for error in behind), behind
    assert any("1 line (40 bytes) passed" in error for error in behind), behind
    assert any("11 bytes of it passed" in error for error in behind), behind
