"""P13 (MCP half): a 200-call MCP stdio session through the recording proxy ÷ the same session direct.

The host is the official ``mcp`` SDK's stdio client; the server is ``mcp-server-time``. Each
repeat runs the session six times, direct-proxy-floor-floor-proxy-direct (then the reverse;
eight with ``socat`` after the floor): connect,
initialize, then 200 ``tools/call``s of ``get_current_time``, one after another. Timed: the 200
calls (the proxy's own start — Django's setup, once per host session — is reported beside them,
not in the ratio). Through the proxy every message is recorded into the key's session, by the
proxy's recorder thread, while the calls run. Target: the median ratio ≤ 1.10. The floor is the same session through a bare stdio relay
(``bench.p13_floors``), reported beside as floor ÷ direct and proxy ÷ floor; and, where the host has
``socat``, through it (the same relay in C: the least any relay costs here), reported ÷ direct.

The machine may be shared (the load average is in the details): a ratio taken in one run, each
repeat's pair back to back, is what holds up under it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
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
    # 12: a median of 5 moved by ±0.1× between runs of one tree (decision 0580).
    repeats = ctx.repeats(full=12, quick=2)
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
    # The floor: the same session through a bare stdio relay (``bench.p13_floors``: bytes copied
    # both ways, nothing recorded), so the part of the overhead that is the product's own shows.
    floor = [sys.executable, "-m", "bench.p13_floors", "stdio", "--", *SERVER]
    commands = {"direct": SERVER, "proxy": proxied, "floor": floor}
    # The same relay in C, where the host has it: the least any relay costs here.
    socat = shutil.which("socat")
    if socat is not None:
        commands["socat"] = [socat, "-b", str(65_536), "STDIO", "EXEC:" + " ".join(SERVER) + ",pipes"]
    ratios: list[float] = []
    floor_ratios: list[float] = []
    over_floor: list[float] = []
    socat_ratios: list[float] = []
    calls_ms: dict[str, list[float]] = {kind: [] for kind in commands}
    start_ms: dict[str, list[float]] = {kind: [] for kind in commands}
    # Warm every path once (imports, the server's own first-call costs), untimed.
    for command in commands.values():
        asyncio.run(_session(command, 5))
    for repeat in range(repeats):
        # ABCCBA (then reversed): a drift of the machine's load within a repeat weighs on all alike.
        half: list[str] = [kind for kind in ("direct", "proxy", "floor", "socat") if kind in commands]
        order = half + half[::-1]
        if repeat % 2:
            order.reverse()
        timed = dict.fromkeys(commands, 0.0)
        for kind in order:
            start, seconds = asyncio.run(_session(commands[kind], calls))
            timed[kind] += seconds
            start_ms[kind].append(start * 1000)
        ratios.append(timed["proxy"] / timed["direct"])
        floor_ratios.append(timed["floor"] / timed["direct"])
        over_floor.append(timed["proxy"] / timed["floor"])
        if "socat" in timed:
            socat_ratios.append(timed["socat"] / timed["direct"])
        for kind, seconds in timed.items():
            calls_ms[kind].append(seconds * 500)
        ctx.log(
            f"P13 MCP {repeat + 1}/{repeats}: {ratios[-1]:.2f}× ({calls_ms['proxy'][-1]:.0f} vs "
            f"{calls_ms['direct'][-1]:.0f} ms; floor {floor_ratios[-1]:.2f}×, {calls_ms['floor'][-1]:.0f} ms)"
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
                **{f"{kind}_calls_ms": summary(values) for kind, values in calls_ms.items()},
                **{f"{kind}_start_ms": summary(values) for kind, values in start_ms.items()},
                "floor_x_direct": summary(floor_ratios),
                "proxy_x_floor": summary(over_floor),
                **({"socat_x_direct": summary(socat_ratios)} if socat_ratios else {}),
                "tools_call_exchanges_recorded": recorded,
                "summary": (
                    f"{repeats * 2} sessions each way of {calls} calls: direct "
                    f"{statistics.median(calls_ms['direct']):.0f} ms, proxy "
                    f"{statistics.median(calls_ms['proxy']):.0f} ms, floor (bare stdio relay) "
                    f"{statistics.median(calls_ms['floor']):.0f} ms; ÷ direct: proxy "
                    f"{statistics.median(ratios):.2f}×, floor {statistics.median(floor_ratios):.2f}×; proxy ÷ floor "
                    f"{statistics.median(over_floor):.2f}×; "
                    + (
                        f"socat relay (C) {statistics.median(calls_ms['socat']):.0f} ms, "
                        f"{statistics.median(socat_ratios):.2f}× direct; "
                        if socat_ratios
                        else "socat relay not run (no socat on this host); "
                    )
                    + f"{recorded} tools/call recorded"
                ),
            },
        )
    ]
