"""P12 a class watching: a turn's first row reaching the last of 30 sockets watching its
conversation ÷ reaching a lone socket, in the same run.

A lecturer asks; the class follows the same conversation, each student's page with a socket of
its own (here one user's 30 sockets: what the server does for each is the same). The product
runs as in P2 (daphne, and with Postgres and Redis a Celery worker and channels-redis). Each
repeat submits twice, in alternating order: once watched by one socket, once by ``WATCHERS``.
The clock runs from just before the POST to the new turn's first ``row`` message at the socket
that gets it last; beside it, the time until every socket has heard the turn finish, and (a few
more questions, reported) the last first row with 10 and 100 sockets: how it grows.

Every doorbell reaches every socket; what the server must not do is the same work once per
socket in its one thread for synchronous work (``consumers.SharedRenders``).
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from typing import Any

import httpx2
from websockets.sync.client import connect

from bench import fixtures
from bench.context import Context
from bench.p2_first_step import TURN_TIMEOUT, _ask, _conversation, _receive, _until_finished, deployed
from bench.stats import Result, judged, summary

ID, NAME, UNIT, TARGET, LIMIT = (
    "P12",
    "a class watching",
    "×",
    "≤ 1.5× of a lone socket's time to the first row, 30 sockets",
    1.5,
)
WATCHERS = 30
# How the cost grows with the class: a few more questions watched by this many (reported).
CURVE = (10, 100)
CURVE_REPEATS = 3
WARMUP = 1


def _watched(
    base: str, http: httpx2.Client, owner: Any, profile: Any, server: Any, sockets: int
) -> dict[str, float]:
    """One question watched by ``sockets`` sockets: ms to the first row at the first and the
    last socket, and to the turn's end heard at every socket."""
    conversation = _conversation(owner, profile, server)
    url = base.replace("http://", "ws://") + f"/ws/conversations/{conversation.public_id}/"
    cookies = "; ".join(f"{name}={value}" for name, value in http.cookies.items())
    with ExitStack() as stack:
        watchers = [
            stack.enter_context(
                connect(url, additional_headers={"Cookie": cookies}, origin=base, open_timeout=10)  # type: ignore[arg-type]
            )
            for _ in range(sockets)
        ]
        started = time.perf_counter()
        _ask(base, http, conversation)
        deadline = time.monotonic() + TURN_TIMEOUT
        first_rows = []
        for ws in watchers:  # a message already here is read at once: the last read is the last arrival
            while _receive(ws, deadline).get("type") != "row":
                pass
            first_rows.append((time.perf_counter() - started) * 1000)
        for ws in watchers:
            _until_finished(ws, deadline)
        ended = (time.perf_counter() - started) * 1000
    return {"first_row_ms": first_rows[0], "last_first_row_ms": max(first_rows), "ended_ms": ended}


def run(ctx: Context) -> list[Result]:
    repeats = ctx.repeats(full=10, quick=3)
    owner = fixtures.user("bench-p12")
    fixtures.purge(owner)
    profile = fixtures.demo_profile()
    server = fixtures.demo_server()
    lone: list[dict[str, float]] = []
    class_: list[dict[str, float]] = []
    with deployed(ctx, "bench-p12", owner) as (base, http):
        for index in range(WARMUP + repeats):
            order = (1, WATCHERS) if index % 2 else (WATCHERS, 1)
            times = {count: _watched(base, http, owner, profile, server, count) for count in order}
            if index >= WARMUP:
                lone.append(times[1])
                class_.append(times[WATCHERS])
                ctx.log(
                    f"P12 {index - WARMUP + 1}/{repeats}: first row alone {times[1]['first_row_ms']:.0f} ms, "
                    f"at the last of {WATCHERS} {times[WATCHERS]['last_first_row_ms']:.0f} ms"
                )
        curve = {
            count: [
                _watched(base, http, owner, profile, server, count)["last_first_row_ms"]
                for _ in range(CURVE_REPEATS)
            ]
            for count in CURVE
        }
    ratios = [c["last_first_row_ms"] / a["first_row_ms"] for c, a in zip(class_, lone, strict=True)]
    lone_median = summary([a["first_row_ms"] for a in lone])["median"]
    by_count = {
        1: lone_median,
        WATCHERS: summary([c["last_first_row_ms"] for c in class_])["median"],
        **{count: summary(samples)["median"] for count, samples in curve.items()},
    }
    medians = {
        "lone_first_row_ms": lone_median,
        "class_first_row_ms": summary([c["first_row_ms"] for c in class_])["median"],
        "class_last_first_row_ms": summary([c["last_first_row_ms"] for c in class_])["median"],
        "lone_ended_ms": summary([a["ended_ms"] for a in lone])["median"],
        "class_ended_ms": summary([c["ended_ms"] for c in class_])["median"],
    }
    result = judged(
        id=ID,
        name=NAME,
        unit=UNIT,
        target=TARGET,
        limit=LIMIT,
        samples=ratios,
        details={
            "watchers": WATCHERS,
            **{key: round(value, 1) for key, value in medians.items()},
            "last_first_row_ms_by_sockets": {
                str(count): round(by_count[count], 1) for count in sorted(by_count)
            },
            "summary": f"first row: a lone socket {medians['lone_first_row_ms']:.0f} ms, the last of "
            f"{WATCHERS} {medians['class_last_first_row_ms']:.0f} ms (the first of them "
            f"{medians['class_first_row_ms']:.0f}); the turn's end heard by every socket "
            f"{medians['class_ended_ms']:.0f} ms (alone {medians['lone_ended_ms']:.0f}); the last first row by "
            "sockets: " + ", ".join(f"{count}: {by_count[count]:.0f} ms" for count in sorted(by_count)),
        },
    )
    fixtures.purge(owner)
    return [result]
