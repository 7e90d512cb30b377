"""A session whose request timed out is retired: the next operation gets a new session (a new
process) at once, and the old one's whole process group is killed once no call runs on it — a
stopped server (SIGSTOP) reads no EOF and handles no SIGTERM, so it is sent SIGKILL. (A tester's
server stopped itself during tools/call: the call timed out, the next turns reused the pooled
session, waited 20 s on tools/list and got no tools, and the stopped process was still there 16
minutes later.) Real parts: a stdio MCP server written for the test, which stops itself, and a
child of it, stopped too, in its process group; the bundled demo server for the drain."""

from __future__ import annotations

import asyncio
import itertools
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from servers import gateway
from servers.gateway import ServerConfig
from servers.gateway.capture import Capture
from servers.gateway.pool import SessionPool
from tests.servers.test_pool_bound import demo, demo_processes, scenario

_server_ids = itertools.count(9800)

# Writes its pid and its child's to PIDS (one a line); tools/call stops it (SIGSTOP).
FREEZING_SERVER = textwrap.dedent(
    """
    import json, os, signal, subprocess, sys

    child = subprocess.Popen(
        [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSTOP)"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
    )
    with open(sys.argv[1], "a") as pids:
        pids.write(f"{os.getpid()}\\n{child.pid}\\n")

    def send(message):
        sys.stdout.write(json.dumps(message) + "\\n")
        sys.stdout.flush()

    for raw in sys.stdin:
        message = json.loads(raw)
        mid, method = message.get("id"), message.get("method")
        if mid is None:
            continue
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": mid, "result": {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "freezing", "version": "1"},
            }})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": mid, "result": {"tools": [
                {"name": "freeze", "inputSchema": {"type": "object"}},
            ]}})
        elif method == "tools/call":
            os.kill(os.getpid(), signal.SIGSTOP)
        else:
            send({"jsonrpc": "2.0", "id": mid, "result": {}})
    """
)


@pytest.fixture(autouse=True)
def close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


def freezing_server(tmp_path: Path) -> tuple[ServerConfig, Path]:
    script, pids = tmp_path / "freezing_server.py", tmp_path / "pids"
    script.write_text(FREEZING_SERVER)
    server_id = next(_server_ids)
    config = ServerConfig(
        server_id=server_id,
        name=f"freezing-{server_id}",
        transport="stdio",
        command=sys.executable,
        args=(str(script), str(pids)),
        call_timeout=2.0,
    )
    return config, pids


def state(pid: int) -> str:
    """The process's state letter (T: stopped, Z: exited, not reaped), or "" once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def test_after_a_call_times_out_the_next_operation_gets_a_new_process_and_the_stopped_one_is_killed(
    tmp_path: Path,
) -> None:
    config, pids = freezing_server(tmp_path)

    call = gateway.call_tool(config, "freeze", {})
    assert call.timed_out, call.error
    stopped = [int(pid) for pid in pids.read_text().split()]
    assert len(stopped) == 2

    began = time.monotonic()
    listing = gateway.list_tools(config)

    assert listing.error == ""
    assert [tool["name"] for tool in listing.tools] == ["freeze"]
    assert listing.session is not None and listing.session.spawned
    assert listing.session.generation == 2
    assert "timed out" in listing.session.respawn_reason
    # A new process answered at once, not after a wait on the stopped one.
    assert time.monotonic() - began < config.call_timeout
    assert len(pids.read_text().split()) == 4

    deadline = time.monotonic() + 20
    while any(state(pid) not in ("", "Z") for pid in stopped) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [state(pid) for pid in stopped if state(pid) not in ("", "Z")] == []


def test_a_session_given_up_keeps_serving_the_call_still_running_on_it_then_closes(tmp_path: Path) -> None:
    config = demo(7401, user_id=1)

    async def work(pool: SessionPool) -> tuple[bool, str, bool, int, int]:
        timed_out, _, _ = await pool.acquire(config, Capture())
        running, _, _ = await pool.acquire(config, Capture())
        assert running is timed_out
        await pool.give_up(timed_out, "MCP error -32001: Request 'tools/call' timed out")
        pool.release(timed_out)
        fresh, spawned, reason = await pool.acquire(config, Capture())
        pool.release(fresh)
        assert running.client is not None
        result = await running.client.call_tool("list_notes", {})
        served = not result.is_error
        both = demo_processes()
        pool.release(running)
        for _ in range(400):
            if demo_processes() == 1:
                break
            await asyncio.sleep(0.05)
        return spawned, reason, served, both, demo_processes()

    spawned, reason, served, both, after = scenario(tmp_path, work)

    assert spawned and reason.startswith("a request on the previous session timed out")
    assert served and both == 2
    assert after == 1
