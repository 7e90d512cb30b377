"""P10 in the processes as deployed: the embedded web process, and a Celery worker.

``bench.p10_big_payload`` measures a turn run in the bench's own process; what a user sees is
the memory of the processes that serve: daphne running turns on its own threads (the embedded
mode ``make run`` starts) and, in the scaled mode, the Celery worker. Each is started fresh
and left until idle; a signed-in client opens the conversation's websocket (the live rows reach
it as they would a browser) and asks through the page's form: first a 0 MB turn in every
paradigm (code, caches, pools and the stdio server all warm), the process's RSS once idle
(before); then a 10 MB turn in every paradigm, each turn's conversation page read once it ended,
the RSS sampled all along (peak) and once idle (after).
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from typing import Any

import httpx2
from websockets.sync.client import connect

from bench.context import Context
from bench.p2_first_step import _idle, _login, _receive
from bench.processes import CeleryWorker, RssSampler, WebServer, rss_bytes
from conversations.models import Conversation
from conversations.services import conversation_start

MB = 1024 * 1024
MEGABYTES = 10
TURN_TIMEOUT = 300.0
FINISHED = {"done", "failed", "interrupted", "cancelled"}
# The embedded mode: no Redis, so turns run on the web process's own threads and the live layer
# is in memory (the settings read "" as unset).
EMBEDDED = {"REDIS_URL": "", "TURN_RUNNER": "embedded"}


def _conversation(owner: Any, profile: Any, server: Any, paradigm: str) -> Conversation:
    """A conversation in ``paradigm`` with the big-payload server, its first turn finished."""
    conversation, turn = conversation_start(
        owner=owner,
        model_profile=profile,
        question="set up by the benchmark",
        servers=[server],
        paradigm=paradigm,
        dispatch=False,
    )
    turn.mark_done("set up by the benchmark")
    turn.save()
    return conversation


def _turn(base: str, http: httpx2.Client, conversation: Conversation, seq: int, megabytes: int) -> str:
    """Ask for a blob of ``megabytes`` with the conversation's websocket open, wait for turn
    ``seq`` to end there, then read the conversation's page; returns the turn's status."""
    url = base.replace("http://", "ws://") + f"/ws/conversations/{conversation.public_id}/"
    cookies = "; ".join(f"{name}={value}" for name, value in http.cookies.items())
    page = f"/c/{conversation.public_id}/"
    with connect(
        url, additional_headers={"Cookie": cookies}, origin=base, open_timeout=30, max_size=None
    ) as ws:
        response = http.post(
            f"/c/{conversation.public_id}/ask",
            data={
                "question": f"Give me a blob of {megabytes} megabytes",
                "csrfmiddlewaretoken": http.cookies["csrftoken"],
            },
            headers={"Referer": f"{base}{page}"},
        )
        if response.status_code != 302:
            raise RuntimeError(f"the question was refused (HTTP {response.status_code})")
        deadline = time.monotonic() + TURN_TIMEOUT
        while True:
            message = _receive(ws, deadline)
            if (
                message.get("type") == "turn"
                and message.get("seq") == seq
                and message.get("status") in FINISHED
            ):
                status = str(message["status"])
                break
    if http.get(page, timeout=120).status_code != 200:
        raise RuntimeError("the conversation page did not answer 200")
    return status


def _served(
    ctx: Context, owner: Any, profile: Any, server: Any, paradigms: list[str], *, worker: bool
) -> dict[str, Any]:
    name = "bench-p10-worker" if worker else "bench-p10-web"
    with ExitStack() as stack:
        web = stack.enter_context(WebServer(name=f"{name}-web", env=None if worker else EMBEDDED))
        pid = stack.enter_context(CeleryWorker(concurrency=8, name=name)).pid if worker else web.pid
        _idle([web.pid, pid])
        http = _login(web.base, owner.get_username())
        http.timeout = httpx2.Timeout(120)
        conversations = {p: _conversation(owner, profile, server, p) for p in paradigms}
        statuses = [_turn(web.base, http, conversations[p], 2, 0) for p in paradigms]
        _idle([web.pid, pid])
        before = rss_bytes(pid)
        started = time.perf_counter()
        after_each: dict[str, float] = {}
        with RssSampler(pid, interval=0.05, pss_every=1_000_000) as sampler:
            for paradigm in paradigms:
                statuses.append(_turn(web.base, http, conversations[paradigm], 3, MEGABYTES))
                after_each[paradigm] = round(rss_bytes(pid) / MB, 1)
        seconds = time.perf_counter() - started
        _idle([web.pid, pid])
        after = rss_bytes(pid)
        return {
            "process": "Celery worker (-P threads -c 8)" if worker else "embedded web process (daphne)",
            "before_mb": round(before / MB, 1),
            "peak_mb": round(max(sampler.own, default=0) / MB, 1),
            "after_mb": round(after / MB, 1),
            "left_mb": round((after - before) / MB, 1),
            "rss_mb_after_each_turn": after_each,
            "turns_s": round(seconds, 1),
            "statuses": sorted(set(statuses)),
        }


def measure(
    ctx: Context, owner: Any, profile: Any, server: Any, paradigms: list[str]
) -> dict[str, dict[str, Any]]:
    """The web process's row, and the worker's when Redis is up (else its reason)."""
    rows = {"web": _served(ctx, owner, profile, server, paradigms, worker=False)}
    if ctx.services.scaled:
        rows["worker"] = _served(ctx, owner, profile, server, paradigms, worker=True)
    else:
        rows["worker"] = {"not_run": ctx.services.missing("postgres", "redis")}
    return rows


def summary(name: str, row: dict[str, Any]) -> str:
    if "not_run" in row:
        return f"{name}: not run ({row['not_run']})"
    return (
        f"{name} {row['before_mb']:.0f} → peak {row['peak_mb']:.0f} → {row['after_mb']:.0f} MB "
        f"({row['left_mb']:+.0f} MB)"
    )
