"""The session pool is bounded: however many keys ask (servers, grants, users), a process holds at
most ``max_sessions`` sessions — so at most that many stdio server processes — closes the least
recently used idle one to make room, waits (at most the connect timeout) when all are in use,
and closes a session nobody used for ``idle_seconds``. Real parts: the bundled demo server over
stdio, through a pool of the test's own on an event loop of its own."""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from servers.gateway.capture import Capture
from servers.gateway.config import ServerConfig
from servers.gateway.pool import GatewayError, SessionOptions, SessionPool

REPO_ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")

# In the environment of every demo server these tests start: the count below tells them from the
# ones other tests of this process left in the process's own pool (open until they are idle).
MARK = ("INSPECTOR_POOL_TEST", f"{os.getpid()}-{uuid.uuid4().hex}")


def demo(server_id: int = 7000, **fields: Any) -> ServerConfig:
    env = (MARK, *fields.pop("env", ()))
    return ServerConfig(
        server_id=server_id,
        name="demo",
        transport="stdio",
        command=sys.executable,
        args=("-m", "servers.demo_server"),
        cwd=str(REPO_ROOT),
        call_timeout=10.0,
        env=env,
        **fields,
    )


def demo_processes() -> int:
    """The demo servers these tests started that run now (live children of this process with the
    tests' mark in their environment; not yet reaped ones excepted)."""
    mark = "=".join(MARK).encode()
    count = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, parent = stat.read_text().rsplit(")", 1)[1].split()[:2]
            command = (stat.parent / "cmdline").read_bytes()
            environment = (stat.parent / "environ").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        if (
            state != "Z"
            and int(parent) == os.getpid()
            and b"servers.demo_server" in command
            and mark in environment
        ):
            count += 1
    return count


def scenario(
    tmp_path: Path, work: Callable[[SessionPool], Awaitable[T]], *, connect: float = 20.0, **limits: Any
) -> T:
    """Run ``work`` against a fresh pool on a loop of its own, closing every session after."""

    async def run() -> T:
        pool = SessionPool(
            lambda: SessionOptions(stderr_dir=tmp_path, body_limit=100_000, connect_timeout=connect, **limits)
        )
        try:
            return await work(pool)
        finally:
            await pool.close_all()

    return asyncio.run(run())


async def used(pool: SessionPool, config: ServerConfig) -> bool:
    """One operation on ``config``'s session: whether it opened a new one."""
    session, spawned, _ = await pool.acquire(config, Capture())
    try:
        assert session.client is not None
        result = await session.client.call_tool("list_notes", {})
        assert not result.is_error
    finally:
        pool.release(session)
    return spawned


def test_many_keys_never_hold_more_than_max_sessions_processes(tmp_path: Path) -> None:
    async def work(pool: SessionPool) -> tuple[list[tuple[int, int]], bool, bool]:
        seen = []
        for server_id in range(7001, 7009):
            await used(pool, demo(server_id))
            seen.append((pool.held, demo_processes()))
        newest_again = await used(pool, demo(7008))
        oldest_again = await used(pool, demo(7001))
        return seen, newest_again, oldest_again

    seen, newest_again, oldest_again = scenario(tmp_path, work, max_sessions=3)

    assert [held for held, _ in seen] == [1, 2, 3, 3, 3, 3, 3, 3]
    assert max(processes for _, processes in seen) <= 3
    assert newest_again is False  # the most recently used stayed open
    assert oldest_again is True  # the least recently used was closed to make room
    assert demo_processes() == 0


def test_when_every_session_is_in_use_a_new_one_waits_for_room_then_gives_up(tmp_path: Path) -> None:
    async def work(pool: SessionPool) -> tuple[str, float, int, bool, bool, int]:
        first, _, _ = await pool.acquire(demo(7101), Capture())
        began = time.monotonic()
        with pytest.raises(GatewayError) as refused:
            await pool.acquire(demo(7102), Capture())
        waited = time.monotonic() - began
        later = asyncio.ensure_future(pool.acquire(demo(7103), Capture()))
        await asyncio.sleep(0.3)
        still_waiting = not later.done()
        held_meanwhile = pool.held
        pool.release(first)
        second, spawned, _ = await later
        pool.release(second)
        return str(refused.value), waited, held_meanwhile, still_waiting, spawned and first.dead, pool.held

    message, waited, held_meanwhile, still_waiting, replaced, held = scenario(
        tmp_path, work, connect=4.0, max_sessions=1
    )

    assert message == (
        "this process already holds 1 MCP sessions, the most it keeps, and all were in use for 4 s; "
        "try again when one ends"
    )
    assert waited >= 3.9
    assert still_waiting and held_meanwhile == 1
    assert replaced  # the first session, released, was closed to make room for the waiting one
    assert held == 1


def test_a_session_nobody_uses_is_closed_after_the_idle_time(tmp_path: Path) -> None:
    async def work(pool: SessionPool) -> tuple[int, int, int, int, bool]:
        await used(pool, demo(7201))
        open_after_use = pool.held, demo_processes()
        await asyncio.sleep(1.5)
        closed_when_idle = pool.held, demo_processes()
        return (*open_after_use, *closed_when_idle, await used(pool, demo(7201)))

    held, processes, held_idle, processes_idle, reopened = scenario(tmp_path, work, idle_seconds=0.5)

    assert (held, processes) == (1, 1)
    assert (held_idle, processes_idle) == (0, 0)
    assert reopened is True


def test_many_users_of_one_server_get_a_session_each_within_the_bound(tmp_path: Path) -> None:
    async def work(pool: SessionPool) -> tuple[list[tuple[int, int]], list[bool], str, str]:
        seen = []
        for user_id in range(1, 11):
            await used(pool, demo(user_id=user_id))
            seen.append((pool.held, demo_processes()))
        again = [await used(pool, demo(user_id=user_id)) for user_id in (9, 10, 8)]
        # Each session is its user's own: a note written by user 10 is not in user 9's.
        mine, _, _ = await pool.acquire(demo(user_id=10), Capture())
        theirs, _, _ = await pool.acquire(demo(user_id=9), Capture())
        try:
            assert mine.client is not None and theirs.client is not None
            await mine.client.call_tool("write_note", {"title": "ten", "text": "user 10's"})
            own = await mine.client.call_tool("list_notes", {})
            other = await theirs.client.call_tool("list_notes", {})
        finally:
            pool.release(mine)
            pool.release(theirs)
        return seen, again, own.content[0].text, other.content[0].text  # type: ignore[union-attr]

    seen, again, own, other = scenario(tmp_path, work, max_sessions=4)

    assert [held for held, _ in seen] == [1, 2, 3, 4, 4, 4, 4, 4, 4, 4]
    assert max(processes for _, processes in seen) <= 4
    assert again == [False, False, False]  # the newest users' sessions were kept, and reused
    assert own == "1 note:\n- ten (9 characters)"
    assert other == "No notes yet. Use write_note to add one."
    assert demo_processes() == 0
