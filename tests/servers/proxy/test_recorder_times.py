"""A record of ``proxy stdio`` carries the time its message crossed the proxy, not the time the
recorder got to it. The recorder reads what was tapped in its own thread or process, and that
may be seconds later: it stores a group meanwhile (the first store of a session opens its
connection), or its process is frozen. A ``tools/call`` stamped late would be filed under the
next question's turn and left unlinked (docs/proxy.md §3), and its duration would read 0 ms.

Each case runs in a fresh interpreter of its own, as ``tests/servers/proxy/test_recorder.py``'s
do: a process with threads (this one) does not fork its recorder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.servers.proxy.support import REPO

# The first group's store takes STORE_SECONDS (the recorder is busy); meanwhile a request
# crosses, and its answer GAP seconds after it. The records are written to OUT with their times.
SCRIPT = """
import json, os, sys, time
from pathlib import Path
import django
django.setup()
from servers.proxy.pairing import HOST, SERVER, Pairer
from servers.proxy.recorder import Recorder
from servers.proxy.spool import Spool
out, var, mode = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
STORE_SECONDS, GAP = 1.0, 0.3
storing = Path(var) / "storing"

def store(session, server_name, records):
    first = not storing.exists()
    storing.write_text("")
    if first:
        time.sleep(STORE_SECONDS)
    with out.open("a") as kept:
        for record in records:
            kept.write(json.dumps({"label": record.label, "direction": record.direction,
                                   "at": record.started_at.timestamp(),
                                   "duration_ms": record.duration_ms}) + "\\n")

Path(var).mkdir(parents=True, exist_ok=True)
recorder = Recorder(store=store, spool=Spool(Path(var), "tci_test-key"),
                    pairer=Pairer(line_limit=10_000, body_limit=10_000),
                    session=None, server_name="time", quiet_seconds=0.01, spacing_seconds=0.01)
recorder.start(own_process=mode == "own")
recorder.tap(HOST, b'{"jsonrpc":"2.0","method":"notifications/initialized"}\\n')
deadline = time.monotonic() + 30
while not storing.exists() and time.monotonic() < deadline:
    time.sleep(0.005)
sent = time.time()
recorder.tap(HOST, b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"}}\\n')
time.sleep(GAP)
answered = time.time()
recorder.tap(SERVER, b'{"jsonrpc":"2.0","id":1,"result":{"content":[]}}\\n')
time.sleep(GAP)
recorder.tap(HOST, b'not json')
recorder.tap(HOST, b'\\n')
print(json.dumps({"own": recorder.in_own_process, "sent": sent, "answered": answered,
                  "finished": recorder.finish(30)}), flush=True)
"""


@pytest.mark.parametrize("mode", ["own", "thread"])
def test_a_record_is_stamped_when_its_message_crossed_while_the_recorder_was_busy(
    tmp_path: Path, mode: str
) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "VAR_DIR": str(tmp_path / "var")}
    env.setdefault("DJANGO_SETTINGS_MODULE", "inspector.settings")
    out = tmp_path / "records.jsonl"
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(out), str(tmp_path / "var"), mode],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    printed = json.loads(done.stdout.splitlines()[-1])
    assert printed["own"] is (mode == "own") and printed["finished"] is True, done.stderr[-2000:]
    records = {record["label"]: record for record in map(json.loads, out.read_text().splitlines())}

    # The request crossed while the first group was being stored (1 s), read after it: stamped
    # when it crossed all the same, and its duration is the 0.3 s its answer took.
    call = records["tools/call"]
    assert abs(call["at"] - printed["sent"]) < 0.1, (call, printed)
    assert 250 <= call["duration_ms"] <= 600, call
    # A line that is not JSON is stamped when its end crossed, as a message is.
    line = records["stdin (not JSON)"]
    assert 0.5 <= line["at"] - printed["sent"] < 0.75, (line, printed)
