"""``manage.py proxy stdio`` as a host runs it: the official ``mcp`` SDK client through the proxy
to real servers (mcp-server-time, server-everything), every message recorded live into the key's
session, bytes unchanged both ways, the key nowhere in storage, signals and exit codes passed."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from conversations.models import Exchange
from conversations.proxy.keys import create_key
from conversations.proxy.models import ProxySession
from tests.servers.proxy import tee_server
from tests.servers.proxy.support import proxy_command, proxy_env, recorded
from tests.servers.test_third_party import node_server
from tests.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)
TIME_SERVER = (sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC")


def _alice_key() -> tuple[object, str]:
    alice = get_user_model().objects.create_user("alice", password="pw")
    return create_key(alice, name="laptop")


async def _time_session(command: list[str], env: dict[str, str]) -> tuple[list[str], str]:
    params = StdioServerParameters(command=command[0], args=command[1:], env=env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = await session.list_tools()
        result = await session.call_tool("get_current_time", {"timezone": "Asia/Tokyo"})
        text = result.content[0].text  # type: ignore[union-attr]
    return [tool.name for tool in tools.tools], text


def test_the_sdk_client_works_through_the_proxy_and_every_message_is_recorded(tmp_path: Path) -> None:
    key, raw = _alice_key()
    env = proxy_env(tmp_path / "var")
    names, text = asyncio.run(_time_session(proxy_command(raw, "time", *TIME_SERVER, session="desk"), env))
    assert "get_current_time" in names and "Asia/Tokyo" in text
    assert wait_until(lambda: any(e.label == "tools/call" for e in recorded(key)), 30)  # type: ignore[arg-type]
    rows = recorded(key)  # type: ignore[arg-type]
    labels = [row.label for row in rows]
    assert {"initialize", "notifications/initialized", "tools/list", "tools/call"} <= set(labels)
    call = next(row for row in rows if row.label == "tools/call")
    assert call.jsonrpc_id and '"Asia/Tokyo"' in call.request_body and "Asia/Tokyo" in call.response_body
    assert call.direction == "client" and call.status == "ok"
    assert ProxySession.objects.get(key=key).hint == "desk"


def test_the_key_is_nowhere_in_storage_even_when_the_traffic_carries_it(tmp_path: Path) -> None:
    key, raw = _alice_key()
    command = proxy_command(raw, "time", *TIME_SERVER)

    async def session() -> None:
        params = StdioServerParameters(command=command[0], args=command[1:], env=proxy_env(tmp_path / "var"))
        async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            await client.call_tool("get_current_time", {"timezone": raw})  # the server echoes it back

    asyncio.run(session())
    assert wait_until(lambda: any(e.label == "tools/call" for e in recorded(key)), 30)  # type: ignore[arg-type]
    call = next(row for row in recorded(key) if row.label == "tools/call")  # type: ignore[arg-type]
    assert "REDACTED" in call.request_body
    for row in Exchange.objects.all():
        stored = " ".join(
            [
                row.request_body,
                row.response_body,
                str(row.request_headers),
                str(row.response_headers),
                row.error,
            ]
        )
        assert raw not in stored
    assert not list((tmp_path / "var").rglob("*.jsonl"))  # nothing was spooled


def test_server_everything_through_the_proxy(tmp_path: Path) -> None:
    key, raw = _alice_key()
    env = proxy_env(tmp_path / "var")
    command = proxy_command(raw, "everything", *node_server("server-everything"), "stdio")

    async def session() -> str:
        params = StdioServerParameters(command=command[0], args=command[1:], env=env)
        async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            await client.list_tools()
            result = await client.call_tool("echo", {"message": "through the proxy"})
            return result.content[0].text  # type: ignore[union-attr]

    assert "through the proxy" in asyncio.run(session())
    assert wait_until(lambda: any(e.label == "tools/call" for e in recorded(key)), 30)  # type: ignore[arg-type]
    call = next(row for row in recorded(key) if row.label == "tools/call")  # type: ignore[arg-type]
    assert "through the proxy" in call.response_body


def _pump_out(stream: object, into: bytearray) -> threading.Thread:
    def drain() -> None:
        while chunk := stream.read1(65536):  # type: ignore[attr-defined]
            into.extend(chunk)

    thread = threading.Thread(target=drain)
    thread.start()
    return thread


HOST_BYTES = [
    b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n',
    b"not json\n",
    b"\xff\xfe\x00 not utf-8\n",
    b'{"jsonrpc":"2.0",',
    b'"id":2,"method":"ping"}\n',
    b'{"jsonrpc":"2.0","id":3,"method":"x","params":{"s":"' + b"z" * 1_500_000 + b'"}}\n',
]


def test_the_real_command_passes_every_byte_and_the_servers_exit_code(tmp_path: Path) -> None:
    key, raw = _alice_key()
    received = tmp_path / "received"
    command = proxy_command(raw, "tee", sys.executable, tee_server.__file__, str(received), "5")
    proxy = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=proxy_env(tmp_path / "var"),
    )
    out, err = bytearray(), bytearray()
    readers = [_pump_out(proxy.stdout, out), _pump_out(proxy.stderr, err)]
    assert proxy.stdin is not None
    for piece in HOST_BYTES:
        proxy.stdin.write(piece)
        proxy.stdin.flush()
    proxy.stdin.close()
    assert proxy.wait(timeout=60) == 5
    for reader in readers:
        reader.join()
    assert bytes(out) == b"".join(tee_server.SCRIPT) + tee_server.TAIL
    assert received.read_bytes() == b"".join(HOST_BYTES)
    assert tee_server.STDERR in bytes(err)
    rows = recorded(key)  # type: ignore[arg-type]
    assert {"ping", "stdin (not JSON)", "stdout (not JSON)", "stderr", "notifications/bye"} <= {
        r.label for r in rows
    }


def test_a_signal_to_the_proxy_reaches_the_server_and_its_death_is_the_proxys(tmp_path: Path) -> None:
    _, raw = _alice_key()
    command = proxy_command(raw, "tee", sys.executable, tee_server.__file__, str(tmp_path / "received"), "0")
    proxy = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=proxy_env(tmp_path / "var"),
    )
    out = bytearray()
    reader = _pump_out(proxy.stdout, out)
    # The server has started once its script reached the host.
    assert wait_until(lambda: bytes(out).endswith(tee_server.SCRIPT[-1]), 60)
    proxy.send_signal(signal.SIGTERM)
    assert proxy.wait(timeout=60) == 128 + signal.SIGTERM
    reader.join()


def test_a_second_user_gets_404_on_the_session_and_the_owner_sees_it(tmp_path: Path) -> None:
    key, raw = _alice_key()
    asyncio.run(_time_session(proxy_command(raw, "time", *TIME_SERVER), proxy_env(tmp_path / "var")))
    assert wait_until(lambda: ProxySession.objects.filter(key=key).exists(), 30)
    conversation = ProxySession.objects.get(key=key).conversation
    url = reverse("inspector-conversation", args=[conversation.public_id])
    bob = get_user_model().objects.create_user("bob", password="pw")
    as_bob = Client()
    as_bob.force_login(bob)
    assert as_bob.get(url).status_code == 404
    as_alice = Client()
    as_alice.force_login(key.user)  # type: ignore[attr-defined]
    assert as_alice.get(url).status_code == 200


async def _spaced_calls(command: list[str], env: dict[str, str], errlog: Path, calls: int) -> None:
    params = StdioServerParameters(command=command[0], args=command[1:], env=env)
    with errlog.open("w") as log:
        async with stdio_client(params, errlog=log) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            for _ in range(calls):
                await session.call_tool("get_current_time", {"timezone": "Asia/Tokyo"})
                await asyncio.sleep(0.3)  # a pause: each call is stored in a group of its own


def test_the_proxy_writes_no_note_of_its_own_to_the_hosts_stderr_while_all_is_well(tmp_path: Path) -> None:
    """A host shows a server's stderr in its log: every group stored must not add a line there."""
    key, raw = _alice_key()
    errlog = tmp_path / "stderr.log"
    asyncio.run(
        _spaced_calls(proxy_command(raw, "time", *TIME_SERVER), proxy_env(tmp_path / "var"), errlog, calls=4)
    )

    assert wait_until(lambda: sum(r.label == "tools/call" for r in recorded(key)) == 4, 30)  # type: ignore[arg-type]
    assert errlog.read_text() == ""
