"""P13 (LLM half): model calls through the LLM recording proxy ÷ the same calls straight to the upstream.

The upstream is a local server (stdlib, 127.0.0.1, in a process of its own as a real upstream is:
``bench.p13_floors upstream``) that answers an OpenAI Chat Completions request with an event
stream; the proxy is the product as deployed (``daphne
inspector.asgi:application``) at ``/proxy/<key>/openai/v1/chat/completions``, the key's upstream
that server. The host is a plain HTTP client reading the body bytes as they arrive. Each repeat
makes the call both ways, back to back, alternating which goes first.

Two results, each a ratio taken in one run:

* ``P13.llm`` — one 1 MB streamed reply: total time through the proxy ÷ direct (target ≤ 1.05×,
  the median of the repeats' ratios), and the time to the first body byte, through the proxy
  less direct (target ≤ 2 ms more, the difference of the medians). Every byte is checked equal.
  Each proxied call's record is stored before the next call (how long after its stream that
  took is reported): the record is written in the web process after the stream, and reading a
  1 MB reply takes CPU a stream beside it would share (the concurrent measure includes that).
  Measured beside it in the same run, the floors (``bench.p13_floors``): the same call through a
  bare ASGI relay under the same daphne (no key, no capture, no record), through a bare TCP
  relay in Python, and through ``socat`` (the same TCP relay in C, where the host has it: the
  least any relay costs here). They are reported as floor ÷ direct and proxy ÷ floor, so what
  part of the overhead is the product's own can be read (the judged figure stays proxy ÷ direct).
* ``P13.streams`` — 200 concurrent streamed replies (100 kB each) through the proxy ÷ the same 200
  direct, in the scaled deployment (PostgreSQL; "not run" without it), and every exchange stored:
  the measure waits until the 200 records are in the database and reports how long after the
  last stream that took (the record is written after the stream, never before it ends).

The machine may be shared (the load average is in the details).
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import httpx2

from bench import fixtures
from bench.context import Context
from bench.environment import REPO_ROOT
from bench.fake_model import stream_body
from bench.processes import WebServer, cpu_seconds, free_port
from bench.stats import Result, also_within, guarded, judged, not_run, summary
from conversations.models import Exchange
from conversations.proxy.keys import create_key

ID, NAME, UNIT = "P13.llm", "proxy overhead (1 MB streamed reply)", "× direct"
TARGET, LIMIT, TTFB_LIMIT_MS = "≤ 1.05× total, first byte ≤ +2 ms", 1.05, 2.0
STREAMS_ID, STREAMS_NAME = "P13.streams", "200 concurrent proxied streams, every exchange stored"
STREAMS_TARGET = "all 200 stored; ratio reported"
CONCURRENT = 200
BIG, SMALL = 1_000_000, 100_000
SOCAT = shutil.which("socat")
REQUEST = b'{"model": "bench", "stream": true, "messages": [{"role": "user", "content": "stream it"}]}'


@contextmanager
def _upstream() -> Iterator[str]:
    """The upstream's root, in a process of its own (``bench.p13_floors upstream``):
    ``{root}/{size}/v1/chat/completions`` streams a reply of that size (``BIG`` or ``SMALL``)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.p13_floors", "upstream", str(BIG), str(SMALL)],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        ready = process.stdout.readline().split()
        if ready[:1] != [b"READY"]:
            raise RuntimeError("the P13 upstream did not start")
        yield f"http://127.0.0.1:{int(ready[1])}"
    finally:
        process.terminate()
        process.wait(timeout=10)


def _timed(client: httpx2.Client, url: str, hint: str) -> tuple[float, float, bytes]:
    """(seconds to the first body byte, seconds to the last, the body) of one streamed call."""
    headers = {
        "content-type": "application/json",
        "authorization": "Bearer sk-bench-host",
        "x-inspector-session": hint,
    }
    t0 = time.perf_counter()
    first = 0.0
    body = bytearray()
    with client.stream("POST", url, content=REQUEST, headers=headers) as response:
        for chunk in response.iter_raw():
            if not body:
                first = time.perf_counter() - t0
            body += chunk
    return first, time.perf_counter() - t0, bytes(body)


async def _concurrent(url: str, hint: str, expected: bytes) -> float:
    """Seconds for ``CONCURRENT`` streamed calls at once, each read to its end and checked."""
    limits = httpx2.Limits(max_connections=CONCURRENT * 2, max_keepalive_connections=CONCURRENT)
    headers = {
        "content-type": "application/json",
        "authorization": "Bearer sk-bench-host",
        "x-inspector-session": hint,
    }
    async with httpx2.AsyncClient(timeout=300, limits=limits) as client:

        async def one() -> None:
            body = bytearray()
            async with client.stream("POST", url, content=REQUEST, headers=headers) as response:
                async for chunk in response.aiter_raw():
                    body += chunk
            if bytes(body) != expected:
                raise RuntimeError(f"a stream came back changed ({len(body)} bytes of {len(expected)})")

        t0 = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(CONCURRENT)))
        return time.perf_counter() - t0


def _wait_stored(key_id: int, hint: str, count: int) -> float:
    """Seconds until ``count`` records of the session ``hint`` are stored (at most 300)."""
    t0 = time.perf_counter()
    while _stored(key_id, hint) < count:
        if time.perf_counter() - t0 > 300:
            raise RuntimeError(f"the proxied exchange {count} was not stored within 300 s")
        time.sleep(0.02)
    return time.perf_counter() - t0


def _stored(key_id: int, hint: str) -> int:
    return Exchange.objects.filter(
        conversation__proxy_session__key_id=key_id, conversation__proxy_session__hint=hint, channel="llm"
    ).count()


@contextmanager
def _relay(command: list[str], port: int, what: str) -> Iterator[str]:
    """A floor relay (``command``, listening on ``port``) in a process of its own, in front of the upstream."""
    process = subprocess.Popen(command, cwd=REPO_ROOT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the {what} floor relay did not start") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


def _tcp_relay(upstream_root: str) -> AbstractContextManager[str]:
    """The Python TCP floor (``bench.p13_floors tcp``)."""
    port = free_port()
    upstream = upstream_root.removeprefix("http://")
    return _relay([sys.executable, "-m", "bench.p13_floors", "tcp", str(port), upstream], port, "TCP")


def _socat_relay(upstream_root: str) -> AbstractContextManager[str | None]:
    """The same TCP floor in C (``socat``, a process forked for each connection), or None without it."""
    if SOCAT is None:
        return nullcontext(None)
    port = free_port()
    upstream = upstream_root.removeprefix("http://")
    # ``nodelay`` on both sides, as daphne, httpx and asyncio set it on theirs: without it the
    # request's second write waits for the first's acknowledgement, about 40 ms here.
    listen = f"TCP-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork,nodelay"
    return _relay([SOCAT, "-b", str(65_536), listen, f"TCP:{upstream},nodelay"], port, "socat")


def run(ctx: Context) -> list[Result]:
    owner = fixtures.user("bench-p13-llm")
    fixtures.purge(owner)
    with _upstream() as root, WebServer(name="bench-p13-llm-web") as web:
        # Each result stands on its own: one that breaks reports its own error, not the other's.
        return [
            guarded(ID, lambda: _one_stream(ctx, owner, root, web)),
            guarded(STREAMS_ID, lambda: _streams(ctx, owner, root, web)),
        ]


def _one_stream(ctx: Context, owner: Any, root: str, web: WebServer) -> Result:
    repeats = ctx.repeats(full=15, quick=5)
    with (
        WebServer(
            name="bench-p13-llm-floor",
            application="bench.p13_floors:application",
            env={"BENCH_P13_UPSTREAM": f"{root}/{BIG}"},
        ) as floor,
        _tcp_relay(root) as tcp,
        _socat_relay(root) as socat,
        httpx2.Client(timeout=120) as client,
    ):
        key, raw = create_key(owner, name="bench P13", openai_upstream=f"{root}/{BIG}/v1")
        urls = {
            "direct": f"{root}/{BIG}/v1/chat/completions",
            "proxy": f"{web.base}/proxy/{raw}/openai/v1/chat/completions",
            # The floors: a bare ASGI relay under the same daphne, and a bare TCP relay.
            "floor": f"{floor.base}/relay/v1/chat/completions",
            "tcp": f"{tcp}/{BIG}/v1/chat/completions",
        }
        if socat is not None:
            urls["socat"] = f"{socat}/{BIG}/v1/chat/completions"
        expected = stream_body("text", BIG)
        hint = f"bench-{uuid.uuid4().hex[:8]}"
        ratios: list[float] = []
        floor_ratios: list[float] = []
        tcp_ratios: list[float] = []
        socat_ratios: list[float] = []
        over_floor: list[float] = []
        firsts: dict[str, list[float]] = {way: [] for way in urls}
        totals: dict[str, list[float]] = {way: [] for way in urls}
        # Seconds from a proxied stream's end until its record is stored. Each call waits for
        # the last one's record: the record is written in the web process, beside the streams
        # (its CPU is the concurrent measure's business), and this one times the pass-through.
        stored_after: list[float] = []
        cpu_ms: dict[str, list[float]] = {"proxy": [], "floor": []}
        pids = {"proxy": web.pid, "floor": floor.pid}
        ways = list(urls)
        for repeat in range(repeats + 1):
            # Every way in turn, the order rotated and reversed from one repeat to the next.
            order = ways[repeat % len(ways) :] + ways[: repeat % len(ways)]
            if repeat % 2:
                order.reverse()
            measured: dict[str, tuple[float, float]] = {}
            for way in order:
                cpu = cpu_seconds(pids[way]) if way in pids else 0.0
                first, total, body = _timed(client, urls[way], hint)
                if way in pids and repeat:
                    # The web process's CPU for passing the stream on (the product's record starts after).
                    cpu_ms[way].append((cpu_seconds(pids[way]) - cpu) * 1000)
                if body != expected:
                    raise RuntimeError(
                        f"the {way} stream came back changed ({len(body)} bytes of {len(expected)})"
                    )
                measured[way] = (first, total)
                if way == "proxy":
                    stored_after.append(_wait_stored(key.pk, hint, repeat + 1))
            if repeat == 0:
                continue  # warm-up: connections, the key's first look-up, the session's first row
            for way, (first, total) in measured.items():
                firsts[way].append(first)
                totals[way].append(total)
            ratios.append(measured["proxy"][1] / measured["direct"][1])
            floor_ratios.append(measured["floor"][1] / measured["direct"][1])
            tcp_ratios.append(measured["tcp"][1] / measured["direct"][1])
            if "socat" in measured:
                socat_ratios.append(measured["socat"][1] / measured["direct"][1])
            over_floor.append(measured["proxy"][1] / measured["floor"][1])
            ctx.log(
                f"repeat {repeat}: {ratios[-1]:.3f}× (floor {floor_ratios[-1]:.3f}×, tcp {tcp_ratios[-1]:.3f}×), "
                f"first byte +{(measured['proxy'][0] - measured['direct'][0]) * 1000:.2f} ms "
                f"(floor +{(measured['floor'][0] - measured['direct'][0]) * 1000:.2f} ms)"
            )

    def ms(values: list[float]) -> float:
        return statistics.median(values) * 1000

    def added(way: str) -> float:
        return ms(firsts[way]) - ms(firsts["direct"])

    # The least a relay costs here at all: the TCP floor in C, no interpreter.
    socat_summary = (
        f"socat relay (C) {ms(totals['socat']):.1f} ms, {statistics.median(socat_ratios):.2f}× direct, first "
        f"byte +{added('socat'):.2f} ms"
        if socat_ratios
        else "socat relay not run (no socat on this host)"
    )
    result = judged(
        id=ID,
        name=NAME,
        unit=UNIT,
        target=TARGET,
        limit=LIMIT,
        samples=ratios,
        details={
            "summary": (
                f"1 MB: direct {ms(totals['direct']):.1f} ms, proxy {ms(totals['proxy']):.1f} ms, floor "
                f"(bare ASGI relay, same daphne) {ms(totals['floor']):.1f} ms, TCP relay "
                f"{ms(totals['tcp']):.1f} ms; ÷ direct: proxy {statistics.median(ratios):.2f}×, floor "
                f"{statistics.median(floor_ratios):.2f}×, TCP {statistics.median(tcp_ratios):.2f}×; proxy ÷ "
                f"floor {statistics.median(over_floor):.2f}×; first byte direct {ms(firsts['direct']):.2f} ms, "
                f"added: proxy +{added('proxy'):.2f}, floor +{added('floor'):.2f}, TCP +{added('tcp'):.2f} ms; "
                f"web process CPU per call: proxy {statistics.median(cpu_ms['proxy']):.0f} ms, floor "
                f"{statistics.median(cpu_ms['floor']):.0f} ms; {socat_summary}"
            ),
            "first_byte_added_ms": round(added("proxy"), 3),
            "floor_first_byte_added_ms": round(added("floor"), 3),
            "tcp_first_byte_added_ms": round(added("tcp"), 3),
            "floor_x_direct": summary(floor_ratios),
            "tcp_x_direct": summary(tcp_ratios),
            **(
                {
                    "socat_x_direct": summary(socat_ratios),
                    "socat_first_byte_added_ms": round(added("socat"), 3),
                }
                if socat_ratios
                else {}
            ),
            "proxy_x_floor": summary(over_floor),
            "stored_after_s": summary(stored_after),
            "web_cpu_ms_per_proxied_call": summary(cpu_ms["proxy"]),
            "floor_cpu_ms_per_call": summary(cpu_ms["floor"]),
            **{f"{way}_ms": summary([t * 1000 for t in totals[way]]) for way in urls},
        },
    )
    return also_within(result, what="first byte added (ms)", value=added("proxy"), limit=TTFB_LIMIT_MS)


def _streams(ctx: Context, owner: Any, root: str, web: WebServer) -> Result:
    if not ctx.services.postgres:
        return not_run(
            id=STREAMS_ID,
            name=STREAMS_NAME,
            unit=UNIT,
            target=STREAMS_TARGET,
            reason="needs the scaled deployment (PostgreSQL): " + "; ".join(ctx.services.problems.values()),
        )
    # A key of its own: a web process remembers a key's upstream for a few seconds (decision
    # 0220), so changing the first key's upstream here would still send these to the big reply.
    key, raw = create_key(owner, name="bench P13 streams", openai_upstream=f"{root}/{SMALL}/v1")
    key_id = key.pk
    expected = stream_body("text", SMALL)
    direct_url = f"{root}/{SMALL}/v1/chat/completions"
    proxy_url = f"{web.base}/proxy/{raw}/openai/v1/chat/completions"
    repeats = ctx.repeats(full=3, quick=1)
    ratios: list[float] = []
    waits: list[float] = []
    for repeat in range(repeats):
        hint = f"streams-{uuid.uuid4().hex[:8]}"
        direct = asyncio.run(_concurrent(direct_url, hint, expected))
        proxied = asyncio.run(_concurrent(proxy_url, hint, expected))
        ended = time.perf_counter()
        deadline = ended + 300
        while _stored(key_id, hint) < CONCURRENT and time.perf_counter() < deadline:
            time.sleep(0.1)
        stored = _stored(key_id, hint)
        if stored < CONCURRENT:
            raise RuntimeError(f"only {stored} of {CONCURRENT} proxied exchanges were stored within 300 s")
        waits.append(time.perf_counter() - ended)
        ratios.append(proxied / direct)
        ctx.log(
            f"streams {repeat + 1}: direct {direct:.2f} s, proxy {proxied:.2f} s ({ratios[-1]:.2f}×), "
            f"all {CONCURRENT} stored {waits[-1]:.2f} s after the last stream"
        )
    result = judged(
        id=STREAMS_ID,
        name=STREAMS_NAME,
        unit=UNIT,
        target=STREAMS_TARGET,
        limit=float("inf"),
        samples=ratios,
        details={
            "summary": (
                f"{CONCURRENT} × 100 kB at once: {statistics.median(ratios):.2f}× direct; every exchange "
                f"stored, the last {statistics.median(waits):.2f} s after the last stream ended"
            ),
            "stored_after_s": summary(waits),
        },
    )
    return result
