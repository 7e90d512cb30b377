"""A pooled session is never closed under a call running on it. A user's workbench (which offers
elicitation) and the same user's turns (which do not) ask for different sessions and keep them;
a server whose configuration changed, or that is closed, gets new sessions at once while a call
still running on an old one finishes there, the old one closed when that call ends. (A tester
ran a Compare while clicking "List tools": every turn's tools were closed mid-connect and the
turns went on without tools.) Real parts: the bundled demo server over stdio."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

from servers.gateway.capture import Capture
from servers.gateway.pool import SessionPool
from tests.servers.test_pool_bound import demo, demo_processes, scenario


async def _notes(session: object) -> str:
    client = session.client  # type: ignore[attr-defined]
    result = await client.call_tool("list_notes", {})
    assert not result.is_error
    return str(result.content[0].text)


def test_a_users_workbench_and_turns_keep_a_session_each_and_never_respawn_the_other(tmp_path: Path) -> None:
    turn, workbench = demo(7301, user_id=1), demo(7301, user_id=1, elicitation=True)

    async def work(pool: SessionPool) -> tuple[bool, bool, bool, str, str, int]:
        for_turn, _, _ = await pool.acquire(turn, Capture())
        for_workbench, workbench_spawned, reason = await pool.acquire(workbench, Capture())
        try:
            still = await _notes(for_turn)
        finally:
            pool.release(for_turn)
            pool.release(for_workbench)
        again, turn_spawned, _ = await pool.acquire(turn, Capture())
        pool.release(again)
        return workbench_spawned, turn_spawned, for_turn.dead, reason, still, demo_processes()

    workbench_spawned, turn_spawned, closed, reason, notes, processes = scenario(tmp_path, work)

    assert workbench_spawned and reason == ""
    assert not turn_spawned and not closed
    assert notes.startswith("No notes yet")
    assert processes == 2


def test_a_call_running_when_its_server_changes_finishes_on_its_session_then_that_one_closes(
    tmp_path: Path,
) -> None:
    before, after = demo(7302, user_id=1), demo(7302, user_id=1, env=(("CHANGED", "1"),))

    async def work(pool: SessionPool) -> tuple[str, bool, bool, bool, int, int]:
        running, _, _ = await pool.acquire(before, Capture())
        fresh, spawned, reason = await pool.acquire(after, Capture())
        pool.release(fresh)
        # The call on the old session still gets its answer.
        open_meanwhile = not running.dead and (await _notes(running)).startswith("No notes yet")
        held_meanwhile = pool.held
        pool.release(running)
        for _ in range(200):
            if running.dead:
                break
            await asyncio.sleep(0.05)
        return reason, spawned, open_meanwhile, running.dead, held_meanwhile, pool.held

    reason, spawned, open_meanwhile, closed_after, held_meanwhile, held = scenario(tmp_path, work)

    assert spawned and reason == "the server's configuration changed"
    assert open_meanwhile and closed_after
    assert held_meanwhile == 2 and held == 1


def test_closing_a_servers_sessions_lets_the_calls_on_them_finish(tmp_path: Path) -> None:
    config = demo(7303, user_id=1)

    async def work(pool: SessionPool) -> tuple[bool, str, bool, bool]:
        running, _, _ = await pool.acquire(config, Capture())
        await pool.close(7303)
        open_meanwhile = not running.dead
        notes = await _notes(running)
        pool.release(running)
        for _ in range(200):
            if running.dead:
                break
            await asyncio.sleep(0.05)
        fresh, spawned, _ = await pool.acquire(config, Capture())
        pool.release(fresh)
        return open_meanwhile, notes, running.dead, spawned

    open_meanwhile, notes, closed_after, spawned = scenario(tmp_path, work)

    assert open_meanwhile and notes.startswith("No notes yet")
    assert closed_after and spawned


def test_a_replaced_session_a_call_never_lets_go_of_is_closed_after_its_call_timeout(tmp_path: Path) -> None:
    before = dataclasses.replace(demo(7304, user_id=1), call_timeout=3.0)
    after = dataclasses.replace(before, env=(*before.env, ("CHANGED", "1")))

    async def work(pool: SessionPool) -> tuple[bool, bool, int]:
        held_forever, _, _ = await pool.acquire(before, Capture())  # a subscription, say
        fresh, _, _ = await pool.acquire(after, Capture())
        pool.release(fresh)
        open_at_first = not held_forever.dead
        for _ in range(300):
            if held_forever.dead:
                break
            await asyncio.sleep(0.05)
        return open_at_first, held_forever.dead, pool.held

    open_at_first, closed, held = scenario(tmp_path, work)

    assert open_at_first and closed
    assert held == 1
