"""P2 time to first step: turn submitted → first step event received by a websocket client.

The product runs as deployed: daphne serving ``inspector.asgi`` and, with Postgres and Redis up,
a Celery worker (``-P threads``) and channels-redis; otherwise the embedded default (SQLite, the
in-process runner, the in-memory layer). A logged-in client opens the conversation's websocket,
then submits a follow-up question with the page's own form POST; the clock runs from just before
the POST to the first ``row`` message of the new turn. That first row is the ``connect`` step,
recorded before any model call, so model latency is excluded by construction (the demo model
also runs with no think time).

P2f, the first turn of a fresh process: fresh processes (daphne, and the worker when scaled) are
started with warm start (``WARM_START``) and without, in alternating order, each left until idle;
the clock runs from the POST to the turn's end at the websocket, for the first turn and for a
later one of the same processes. Judged: the first turn with warm start ÷ the later turn, each
without its connect step (the first spawns the stdio server: per server, not per process start,
reported beside); the same without warm start is reported beside it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import httpx2
from websockets.sync.client import ClientConnection, connect

from bench import fixtures
from bench.context import Context
from bench.processes import CeleryWorker, WebServer, cpu_seconds
from bench.stats import Result, also_within, judged, summary
from conversations.models import Conversation, Step, Turn

ID, NAME, UNIT, TARGET, LIMIT = "P2", "time to first step", "ms", "≤ 30 ms median, ≤ 50 ms p95", 30.0
FRESH_ID, FRESH_NAME, FRESH_TARGET, FRESH_LIMIT = (
    "P2f",
    "first turn of a fresh process",
    "≤ 1.5× of a later turn of the same processes",
    1.5,
)
P95_LIMIT = 50.0
WARMUP = 2
QUESTION = "What is 12 * (3 + 4)?"
TURN_TIMEOUT = 60.0
FINISHED = {"done", "failed", "interrupted", "cancelled"}


def _login(base: str, username: str) -> httpx2.Client:
    client = httpx2.Client(base_url=base, follow_redirects=False, timeout=30)
    client.get("/accounts/login/")
    response = client.post(
        "/accounts/login/",
        data={
            "username": username,
            "password": fixtures.PASSWORD,
            "csrfmiddlewaretoken": client.cookies["csrftoken"],
        },
        headers={"Referer": f"{base}/accounts/login/"},
    )
    if response.status_code != 302 or "sessionid" not in client.cookies:
        raise RuntimeError(f"could not log in to the bench server (HTTP {response.status_code})")
    return client


def _conversation(owner: Any, profile: Any, server: Any) -> Conversation:
    """A conversation whose first turn is finished, so a follow-up may be asked at once."""
    conversation, turn = fixtures.queued_turn(owner=owner, profile=profile, server=server, question="warm-up")
    turn.mark_done("set up by the benchmark")
    turn.save()
    return conversation


def _receive(ws: ClientConnection, deadline: float) -> dict[str, Any]:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError("no websocket message in time")
    return dict(json.loads(ws.recv(timeout=remaining)))


def _ask(base: str, http: httpx2.Client, conversation: Conversation) -> None:
    """The page's form POST of ``QUESTION`` in ``conversation``, as a follow-up."""
    response = http.post(
        f"/c/{conversation.public_id}/ask",
        data={"question": QUESTION, "csrfmiddlewaretoken": http.cookies["csrftoken"]},
        headers={"Referer": f"{base}/c/{conversation.public_id}/"},
    )
    if response.status_code != 302:
        raise RuntimeError(f"the follow-up was refused (HTTP {response.status_code})")


def _until_finished(ws: ClientConnection, deadline: float) -> None:
    """Read until the follow-up turn has finished, so the next sample starts from an idle server."""
    while True:
        message = _receive(ws, deadline)
        if message.get("type") == "turn" and message.get("seq") == 2 and message.get("status") in FINISHED:
            return


def _sample(base: str, http: httpx2.Client, conversation: Conversation) -> dict[str, float]:
    """One submission; returns the milliseconds to the POST's answer, the first turn and row events."""
    url = base.replace("http://", "ws://") + f"/ws/conversations/{conversation.public_id}/"
    cookies = "; ".join(f"{name}={value}" for name, value in http.cookies.items())
    with connect(url, additional_headers={"Cookie": cookies}, origin=base, open_timeout=10) as ws:  # type: ignore[arg-type]
        started = time.perf_counter()
        wall = time.time()
        _ask(base, http, conversation)
        posted = time.perf_counter()
        deadline = time.monotonic() + TURN_TIMEOUT
        times: dict[str, float] = {"post_ms": (posted - started) * 1000}
        while "first_row_ms" not in times:
            message = _receive(ws, deadline)
            elapsed = (time.perf_counter() - started) * 1000
            if message.get("type") == "turn" and message.get("seq") == 2:
                times.setdefault("turn_event_ms", elapsed)
            if message.get("type") == "row":
                times["first_row_ms"] = elapsed
                times.update(_stages(conversation, wall, elapsed))
        _until_finished(ws, deadline)
        times["ended_ms"] = (time.perf_counter() - started) * 1000
    return times


def _stages(conversation: Conversation, wall: float, first_row_ms: float) -> dict[str, float]:
    """Where the time went, from the rows' own timestamps (one clock: the same machine)."""
    turn = Turn.objects.get(conversation=conversation, seq=2)
    connect = Step.objects.filter(turn=turn).order_by("seq").first()
    if turn.started_at is None or connect is None:
        return {}
    created = (turn.created_at.timestamp() - wall) * 1000
    started = (turn.started_at.timestamp() - wall) * 1000
    opened = (connect.started_at.timestamp() - wall) * 1000
    return {
        "stage_submit_to_turn_row_ms": created,
        "stage_turn_row_to_worker_start_ms": started - created,
        "stage_worker_start_to_connect_step_ms": opened - started,
        "stage_connect_step_to_client_ms": first_row_ms - opened,
    }


@contextmanager
def deployed(
    ctx: Context, name: str, owner: Any, env: dict[str, str] | None = None
) -> Iterator[tuple[str, httpx2.Client]]:
    """The product as deployed: daphne and, with the services, a Celery worker (``-P threads
    -c 8``), both with ``env`` added to their environment; yields the web server's base URL and
    a client logged in as ``owner``, once both processes are idle (started up)."""
    with ExitStack() as stack:
        web = stack.enter_context(WebServer(name=f"{name}-web", env=env))
        pids = [web.pid]
        if ctx.services.scaled:
            pids.append(stack.enter_context(CeleryWorker(concurrency=8, name=name, env=env)).pid)
        _idle(pids)
        yield web.base, _login(web.base, owner.get_username())


def _idle(pids: list[int], within: float = 60.0) -> None:
    """Wait until ``pids`` use (almost) no CPU for half a second: a process's start-up, its warm
    start included, is over (a condition, not a fixed pause)."""
    deadline = time.monotonic() + within
    used = sum(cpu_seconds(pid) for pid in pids)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = sum(cpu_seconds(pid) for pid in pids)
        if now - used < 0.02:
            return
        used = now


def _connect_ms(conversation: Conversation) -> float:
    """How long the follow-up's connect step took (spawning and initialising the stdio server
    when the process had no session with it yet)."""
    step = Step.objects.filter(turn__conversation=conversation, turn__seq=2, kind="connect").first()
    return float(step.duration_ms or 0.0) if step is not None else 0.0


def _fresh(ctx: Context, owner: Any, profile: Any, server: Any, warm: bool) -> dict[str, float]:
    """The first and the second turn of fresh processes started with or without warm start:
    ms to the first row and to the turn's end at the websocket, and the connect steps' ms."""
    env = {"WARM_START": "1" if warm else "0"}
    with deployed(ctx, f"bench-p2-fresh-{'warm' if warm else 'cold'}", owner, env) as (base, http):
        conversations = [_conversation(owner, profile, server) for _ in range(2)]
        first = _sample(base, http, conversations[0])
        later = _sample(base, http, conversations[1])
    return {
        "first_row_ms": first["first_row_ms"],
        "first_turn_ms": first["ended_ms"],
        "first_connect_ms": _connect_ms(conversations[0]),
        "later_turn_ms": later["ended_ms"],
        "later_connect_ms": _connect_ms(conversations[1]),
    }


def _ratio(run: dict[str, float]) -> float:
    """The first turn ÷ the later one, each without its connect step."""
    return (run["first_turn_ms"] - run["first_connect_ms"]) / (run["later_turn_ms"] - run["later_connect_ms"])


def fresh_process(ctx: Context, owner: Any, profile: Any, server: Any) -> Result:
    """P2f: the first turn of a fresh process (POST → the turn's end at the websocket) ÷ a later
    turn of the same processes, with warm start; without it beside, in the same run (fresh
    processes each repeat, the two orders alternating). Both turns are counted without their
    connect step: a process's first turn with a stdio server spawns it (a server is started when
    a turn first needs it, never ahead), reported beside."""
    repeats = ctx.repeats(full=5, quick=2)
    runs: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    for index in range(repeats):
        for warm in (True, False) if index % 2 == 0 else (False, True):
            runs[warm].append(_fresh(ctx, owner, profile, server, warm))
        ctx.log(
            f"P2f {index + 1}/{repeats}: first turn warm {runs[True][-1]['first_turn_ms']:.0f} ms, "
            f"cold {runs[False][-1]['first_turn_ms']:.0f} ms"
        )
    ratios = [_ratio(run) for run in runs[True]]
    medians = {
        f"{'warm' if warm else 'cold'}_{key}": round(summary([run[key] for run in runs[warm]])["median"], 1)
        for warm in (True, False)
        for key in ("first_row_ms", "first_turn_ms", "first_connect_ms", "later_turn_ms")
    }
    cold_ratio = summary([_ratio(run) for run in runs[False]])["median"]
    return judged(
        id=FRESH_ID,
        name=FRESH_NAME,
        unit="×",
        target=FRESH_TARGET,
        limit=FRESH_LIMIT,
        samples=ratios,
        details={
            **medians,
            "cold_first_turn_over_later": round(cold_ratio, 2),
            "summary": f"first turn ÷ a later turn of the same processes, each without its connect "
            f"step: with warm start {summary(ratios)['median']:.2f}×, without {cold_ratio:.2f}×; whole "
            f"first turn {medians['warm_first_turn_ms']:.0f} ms warm, {medians['cold_first_turn_ms']:.0f} "
            f"ms cold (a later one {medians['warm_later_turn_ms']:.0f}), of which spawning the stdio "
            f"server {medians['warm_first_connect_ms']:.0f} / {medians['cold_first_connect_ms']:.0f} ms",
        },
    )


def run(ctx: Context) -> list[Result]:
    repeats = ctx.repeats(full=20, quick=5)
    owner = fixtures.user("bench-p2")
    fixtures.purge(owner)
    profile = fixtures.demo_profile()
    server = fixtures.demo_server()
    mode = "scaled: daphne + Celery worker (-P threads -c 8) + channels-redis + PostgreSQL"
    if not ctx.services.scaled:
        mode = "embedded: daphne with the in-process runner, in-memory layer, SQLite"
    samples: list[dict[str, float]] = []
    with deployed(ctx, "bench-p2", owner) as (base, http):
        for index in range(WARMUP + repeats):
            times = _sample(base, http, _conversation(owner, profile, server))
            if index >= WARMUP:
                samples.append(times)
                ctx.log(f"P2 {index - WARMUP + 1}/{repeats}: first row after {times['first_row_ms']:.1f} ms")
    turns = Turn.objects.filter(conversation__owner_id=owner.pk, seq=2)
    statuses = sorted({t.status for t in turns})
    result = judged(
        id=ID,
        name=NAME,
        unit=UNIT,
        target=TARGET,
        limit=LIMIT,
        samples=[s["first_row_ms"] for s in samples],
        details={
            "deployment": mode,
            "post_ms": summary([s["post_ms"] for s in samples]),
            "turn_event_ms": summary([s["turn_event_ms"] for s in samples if "turn_event_ms" in s]),
            "turn_statuses": statuses,
            "stages_ms": {
                key.removeprefix("stage_").removesuffix("_ms"): summary([s[key] for s in samples if key in s])
                for key in (
                    "stage_submit_to_turn_row_ms",
                    "stage_turn_row_to_worker_start_ms",
                    "stage_worker_start_to_connect_step_ms",
                    "stage_connect_step_to_client_ms",
                )
            },
            "summary": "POST → first row (the connect step) on the websocket; stages: "
            + ", ".join(
                f"{key.removeprefix('stage_').removesuffix('_ms').replace('_', ' ')} "
                f"{summary([s[key] for s in samples if key in s])['median']:.0f}"
                for key in (
                    "stage_submit_to_turn_row_ms",
                    "stage_turn_row_to_worker_start_ms",
                    "stage_worker_start_to_connect_step_ms",
                    "stage_connect_step_to_client_ms",
                )
            )
            + " ms",
        },
    )
    also_within(result, what="p95 ms", value=float(result.spread["p95"]), limit=P95_LIMIT)
    fresh = fresh_process(ctx, owner, profile, server)
    fixtures.purge(owner)
    return [result, fresh]
