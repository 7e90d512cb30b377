"""Over stdio the record keeps each message as the bytes that crossed the pipe, not as the client
library re-serialised it: a server that writes ``{"jsonrpc": "2.0", "id": 1, ...}`` (with
spaces, its own key order, ``\\u00e9`` escapes) is recorded so; what the client wrote is recorded
as it wrote it. A secret a server writes with JSON escapes is still masked. Real parts: a stdio
MCP server written for the test, which keeps a copy of every line it reads and writes."""

from __future__ import annotations

import itertools
import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from servers import gateway
from servers.gateway import ServerConfig

_server_ids = itertools.count(9900)
SECRET = "raw-capture-secret-value"

# Python's json.dumps as is: ", " and ": " separators, non-ASCII escaped. Every line read goes to
# READ, every line written to WRITTEN (the exact bytes, newline excluded). tools/call answers
# with the SECRET environment variable written with a \\u escape for each character.
SPACED_SERVER = textwrap.dedent(
    """
    import json, os, sys

    read_log, written_log = open(sys.argv[1], "ab"), open(sys.argv[2], "ab")

    def send(text):
        data = text.encode()
        written_log.write(data + b"\\n"); written_log.flush()
        os.write(1, data + b"\\n")

    for raw in sys.stdin.buffer:
        read_log.write(raw); read_log.flush()
        message = json.loads(raw)
        mid, method = message.get("id"), message.get("method")
        if mid is None:
            continue
        if method == "initialize":
            send(json.dumps({"jsonrpc": "2.0", "id": mid, "result": {
                "protocolVersion": message["params"]["protocolVersion"],
                "serverInfo": {"name": "spac\\u00e9d", "version": "1"},
                "capabilities": {"tools": {}},
            }}))
        elif method == "tools/list":
            send(json.dumps({"result": {"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]},
                             "id": mid, "jsonrpc": "2.0"}))
        elif method == "tools/call":
            hidden = "".join(f"\\\\u{ord(c):04x}" for c in os.environ["SECRET"])
            send('{"jsonrpc": "2.0", "id": %s, "result": {"content": [{"type": "text", "text": "%s"}]}}'
                 % (json.dumps(mid), hidden))
        else:
            send(json.dumps({"jsonrpc": "2.0", "id": mid, "result": {}}))
    """
)


@pytest.fixture(autouse=True)
def close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


def test_each_stdio_message_is_recorded_as_the_bytes_that_crossed_the_pipe(tmp_path: Path) -> None:
    script, read, written = tmp_path / "spaced_server.py", tmp_path / "read", tmp_path / "written"
    script.write_text(SPACED_SERVER)
    server_id = next(_server_ids)
    config = ServerConfig(
        server_id=server_id,
        name=f"spaced-{server_id}",
        transport="stdio",
        command=sys.executable,
        args=(str(script), str(read), str(written)),
        env=(("SECRET", SECRET),),
        secrets=(SECRET,),
        call_timeout=10.0,
    )

    listing = gateway.list_tools(config)
    call = gateway.call_tool(config, "echo", {"text": "é"})

    assert listing.error == "" and call.error == ""
    records = [
        record
        for record in (*listing.records, *call.records)
        if record.label in ("initialize", "notifications/initialized", "tools/list", "tools/call")
    ]
    assert [record.label for record in records] == [
        "initialize",
        "notifications/initialized",
        "tools/list",
        "tools/call",
    ]
    server_wrote = written.read_text().splitlines()
    assert ": " in server_wrote[0] and "\\u00e9" in server_wrote[0]
    answers = [record.response_body for record in records if record.label in ("initialize", "tools/list")]
    assert answers == server_wrote[:2]
    assert [record.request_body for record in records] == read.read_text().splitlines()
    # The secret the server wrote escaped is masked all the same.
    [called] = [record for record in records if record.label == "tools/call"]
    assert SECRET not in json.dumps(json.loads(called.response_body), ensure_ascii=False)
    assert "[REDACTED:secret]" in called.response_body
