"""P13 (MCP half): a 200-call MCP stdio session through the recording proxy ÷ the same session direct.

The host is the official ``mcp`` SDK's stdio client; the server is ``mcp-server-time``. Each
repeat runs the session four times, direct-proxy-proxy-direct (then the reverse): connect,
initialize, then 200 ``tools/call``s of ``get_current_time``, one after another. Timed: the 200
calls (the proxy's own start — Django's setup, once per host session — is reported beside them,
not in the ratio). Through the proxy every message is recorded into the key's session, by the
proxy's recorder thread, while the calls run. Target: the median ratio ≤ 1.10.

The machine may be shared (the load average is in the details): a ratio taken in one run, each
repeat's pair back to back, is what holds up under it.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from bench import fixtures
from bench.context import Context
from bench.stats import Result, judged, summary
from conversations.models import Exchange
from conversations.proxy.keys import create_key
from conversations.proxy.models import ProxySession

ID, NAME, UNIT, TARGET, LIMIT = (
    "P13.mcp",
    "proxy overhead (MCP stdio)",
    "× direct",
    "≤ 1.10× (200 calls)",
    1.10,
)
SERVER = [sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"]


async def _session(command: list[str], calls: int) -> tuple[float, float]:
    """(seconds to connect and initialize, seconds for ``calls`` tools/call one after another)."""
    started = time.perf_counter()
    # The whole environment: the proxy records into the bench's database (DATABASE_URL…).
    params = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        ready = time.perf_counter()
        for _ in range(calls):
            result = await session.call_tool("get_current_time", {"timezone": "UTC"})
            if result.is_error:
                raise RuntimeError(f"get_current_time failed: {result.content}")
        done = time.perf_counter()
    return ready - started, done - ready


def run(ctx: Context) -> list[Result]:
    calls = 50 if ctx.quick else 200
    repeats = ctx.repeats(full=5, quick=2)
    owner = fixtures.user("bench-p13")
    fixtures.purge(owner)
    _, raw_key = create_key(owner, name="bench P13")
    proxied = [
        sys.executable,
        "manage.py",
        "proxy",
        "stdio",
        "--key",
        raw_key,
        "--name",
        "time",
        "--",
        *SERVER,
    ]
    ratios: list[float] = []
    direct_ms: list[float] = []
    proxy_ms: list[float] = []
    proxy_start_ms: list[float] = []
    direct_start_ms: list[float] = []
    # Warm both paths once (imports, the server's own first-call costs), untimed.
    for command in (SERVER, proxied):
        asyncio.run(_session(command, 5))
    for repeat in range(repeats):
        # ABBA (then BAAB): a drift of the machine's load within a repeat weighs on both alike.
        order = [("direct", SERVER), ("proxy", proxied), ("proxy", proxied), ("direct", SERVER)]
        if repeat % 2:
            order = [order[1], order[0], order[0], order[1]]
        timed: dict[str, float] = {"direct": 0.0, "proxy": 0.0}
        for kind, command in order:
            start, seconds = asyncio.run(_session(command, calls))
            timed[kind] += seconds
            (proxy_start_ms if kind == "proxy" else direct_start_ms).append(start * 1000)
        ratios.append(timed["proxy"] / timed["direct"])
        direct_ms.append(timed["direct"] * 500)
        proxy_ms.append(timed["proxy"] * 500)
        ctx.log(
            f"P13 MCP {repeat + 1}/{repeats}: {ratios[-1]:.2f}× ({proxy_ms[-1]:.0f} vs {direct_ms[-1]:.0f} ms)"
        )
    recorded = Exchange.objects.filter(
        step__turn__conversation__proxy_session__in=ProxySession.objects.filter(key__user_id=owner.pk),
        label="tools/call",
    ).count()
    return [
        judged(
            id=ID,
            name=NAME,
            unit=UNIT,
            target=TARGET if calls == 200 else f"≤ 1.10× ({calls} calls)",
            limit=LIMIT,
            samples=ratios,
            details={
                "calls_per_session": calls,
                "direct_calls_ms": summary(direct_ms),
                "proxy_calls_ms": summary(proxy_ms),
                "direct_start_ms": summary(direct_start_ms),
                "proxy_start_ms": summary(proxy_start_ms),
                "tools_call_exchanges_recorded": recorded,
                "summary": f"{repeats} sessions each way of {calls} calls; {recorded} tools/call recorded",
            },
        )
    ]
