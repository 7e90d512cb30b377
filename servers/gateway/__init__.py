"""The MCP client gateway: pooled sessions, raw capture, timeouts — behind a plain sync API.

Every operation returns an outcome instead of raising: the records it captured (paired JSON-RPC
exchanges, notifications, stderr), the session it ran on, and an error message when it failed.
Callers persist the records; nothing here touches the database.
"""

from __future__ import annotations

import atexit
from dataclasses import dataclass, field
from typing import Any

import anyio
from django.conf import settings
from mcp import MCPError

from inspector.wire import WireExchange
from servers.gateway.capture import Capture, current_capture
from servers.gateway.config import ConfigError, ServerConfig
from servers.gateway.pool import (
    GatewayError,
    GatewayLoop,
    PooledSession,
    SessionInfo,
    SessionPool,
    stderr_record,
)

__all__ = [
    "CallOutcome",
    "ListOutcome",
    "ServerConfig",
    "SessionInfo",
    "call_tool",
    "close_all",
    "list_tools",
]

# Errors after which the connection cannot carry another request.
_CONNECTION_LOST = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, ConnectionError)
_MAX_LIST_PAGES = 50


@dataclass
class Outcome:
    records: list[WireExchange] = field(default_factory=list)
    unclaimed: list[WireExchange] = field(default_factory=list)
    session: SessionInfo | None = None
    error: str = ""
    timed_out: bool = False


@dataclass
class ListOutcome(Outcome):
    tools: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class CallOutcome(Outcome):
    result: dict[str, Any] | None = None


_loop = GatewayLoop()
_pool: SessionPool | None = None


def _get_pool() -> SessionPool:
    global _pool
    if _pool is None:
        _pool = SessionPool(
            stderr_dir=settings.MCP_STDERR_DIR,
            body_limit=settings.EXCHANGE_BODY_LIMIT,
            connect_timeout=settings.MCP_CONNECT_TIMEOUT_SECONDS,
        )
    return _pool


def _connection_lost(exc: BaseException) -> bool:
    if isinstance(exc, MCPError):
        return "connection closed" in str(exc.error.message).lower()
    return isinstance(exc, _CONNECTION_LOST)


def _describe_failure(config: ServerConfig, exc: BaseException) -> str:
    if isinstance(exc, MCPError):
        return f"MCP error {exc.error.code}: {exc.error.message}"
    return f"{type(exc).__name__}: {exc}"


async def _run(config: ServerConfig, outcome: Outcome, operation: Any) -> None:
    """Acquire the session, run ``operation(client)``, and gather everything it captured."""
    capture = Capture()
    current_capture.set(capture)
    pool = _get_pool()
    try:
        session, spawned, reason = await pool.acquire(config, capture)
    except (GatewayError, ConfigError) as exc:
        outcome.error = str(exc)
        outcome.records = capture.records
        for record in outcome.records:
            record.server_id = config.server_id
        return
    outcome.session = session.info(spawned=spawned, respawn_reason=reason)
    try:
        assert session.client is not None
        await operation(session.client)
    except Exception as exc:  # noqa: BLE001 — every failure becomes a recorded, explained outcome
        outcome.error = _describe_failure(config, exc)
        if isinstance(exc, MCPError) and exc.error.code == -32001:
            outcome.timed_out = True
        if _connection_lost(exc):
            session.mark_dead(outcome.error)
            outcome.error = f"{config.name} closed the connection during the call ({outcome.error})"
    finally:
        _finish(session, capture, outcome)


def _finish(session: PooledSession, capture: Capture, outcome: Outcome) -> None:
    session.tap.finish(capture)
    stderr = session.read_stderr()
    if stderr:
        capture.records.append(stderr_record(stderr))
    outcome.records = capture.records
    outcome.unclaimed = session.take_unclaimed()
    for record in (*outcome.records, *outcome.unclaimed):
        record.server_id = session.config.server_id


def list_tools(config: ServerConfig) -> ListOutcome:
    """Every tool the server offers now (all pages, never from a cache)."""
    outcome = ListOutcome()

    async def operation(client: Any) -> None:
        cursor: str | None = None
        for _ in range(_MAX_LIST_PAGES):
            result = await client.list_tools(cursor=cursor, cache_mode="bypass")
            outcome.tools.extend(
                t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in result.tools
            )
            cursor = result.next_cursor
            if not cursor:
                break

    _loop.run(_run(config, outcome, operation), timeout=_budget(config, settings.MCP_CONNECT_TIMEOUT_SECONDS))
    return outcome


def call_tool(config: ServerConfig, name: str, arguments: dict[str, Any]) -> CallOutcome:
    """Call one tool; the server's ``call_timeout`` bounds the wait (the SDK then sends a cancel)."""
    outcome = CallOutcome()

    async def operation(client: Any) -> None:
        result = await client.call_tool(name, arguments, read_timeout_seconds=config.call_timeout)
        outcome.result = result.model_dump(by_alias=True, exclude_none=True, mode="json")

    _loop.run(_run(config, outcome, operation), timeout=_budget(config, settings.MCP_CONNECT_TIMEOUT_SECONDS))
    return outcome


def _budget(config: ServerConfig, connect_timeout: float) -> float:
    # The SDK's own timeouts fire first; this outer bound only guards against a wedged loop.
    return connect_timeout + config.call_timeout + 15


def spawn_count(server_id: int) -> int:
    """How many sessions this process has opened for a server (1 = pooled all along)."""
    return _get_pool().spawns[server_id]


def close_server(server_id: int) -> None:
    _loop.run(_get_pool().close(server_id), timeout=15)


def close_all() -> None:
    """Close every pooled session (tests, shutdown)."""
    if _pool is not None:
        _loop.run(_pool.close_all(), timeout=30)


atexit.register(close_all)
