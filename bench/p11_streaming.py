"""P11 streamed reply: a streamed reply processed by the product ÷ the same bytes read by a bare client.

A local server (stdlib, 127.0.0.1) sends an OpenAI Chat Completions event stream: a text reply
or one tool call whose arguments arrive in 16-character pieces (one event each, as models
stream them), of 10 kB, 100 kB and 1 MB. The product reads it as a turn does: the provider in
streaming mode with a running turn's live display (``TurnRecorder.partial_sink``: the display
pass, the throttled snapshots, the redactor on the tail), then records the step with its raw
exchange and waits until it is written. The bare client is what any program reading the same
stream must do: read the bytes, split the events, parse each event's JSON and join the pieces.

Two results: the product ÷ bare ratio at 1 MB (text and tool call; target ≤ 2×), and the
product's wall time per MB at each size (linear growth: the 1 MB time within 1.5× of ten times
the 100 kB time, the same per-byte cost).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx2

from bench import fixtures
from bench.context import Context
from bench.fake_model import stream_body
from bench.stats import Result, judged, summary
from conversations.loop.llm import Message
from conversations.loop.providers import Endpoint, ModelRequest
from conversations.loop.providers.openai_chat import OpenAIChatProvider
from conversations.models import ModelProfile
from conversations.record.recording import TurnRecorder

ID, NAME, UNIT, TARGET, LIMIT = "P11", "streamed reply", "×", "≤ 2× of a bare client at 1 MB", 2.0
SIZES = (10_000, 100_000, 1_000_000)
KINDS = ("text", "call")
# The 1 MB time may exceed ten times the 100 kB time by this much and still count as linear.
LINEAR_SLACK = 1.5


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 — the base class's name
        return

    def do_POST(self) -> None:  # noqa: N802 — the stdlib's handler name
        request = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
        body = self.server.bodies[str(request["model"])]
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        for start in range(0, len(body), 65536):
            self.wfile.write(body[start : start + 65536])


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    bodies: dict[str, bytes]


@contextmanager
def _serving() -> Iterator[str]:
    server = _Server(("127.0.0.1", 0), _Handler)
    server.bodies = {f"{kind}-{size}": stream_body(kind, size) for kind in KINDS for size in SIZES}
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def _bare(client: httpx2.Client, base: str, model: str) -> float:
    """Read the stream as a minimal client does; returns the wall time (s)."""
    t0 = time.perf_counter()
    pieces: list[str] = []
    pending = b""
    with client.stream("POST", f"{base}/chat/completions", json={"model": model, "stream": True}) as response:
        for chunk in response.iter_bytes():
            pending += chunk
            *events, pending = pending.split(b"\n\n")
            for event in events:
                data = event.removeprefix(b"data: ")
                if data == b"[DONE]":
                    continue
                delta = json.loads(data)["choices"][0]["delta"]
                if "content" in delta:
                    pieces.append(delta["content"])
                for call in delta.get("tool_calls", []):
                    pieces.append(call["function"]["arguments"])
    "".join(pieces)
    return time.perf_counter() - t0


def _product(recorder: TurnRecorder, provider: OpenAIChatProvider) -> float:
    """Ask, show the reply live, record it with its raw exchange; returns the wall time (s)."""
    request = ModelRequest(messages=[Message(role="user", content="stream it")])
    t0 = time.perf_counter()
    step = recorder.step_open(kind="decide", title="streamed reply")
    reply = provider.complete(request, on_delta=recorder.partial_sink(step))
    recorder.step_close(step, status="ok", text=reply.text or "", exchanges=[reply.exchange])
    recorder.drain()
    elapsed = time.perf_counter() - t0
    if not (reply.text or reply.tool_calls):
        raise RuntimeError("the streamed reply came back empty")
    return elapsed


def run(ctx: Context) -> list[Result]:
    repeats = ctx.repeats(full=7, quick=3)
    owner = fixtures.user("bench-streaming")
    fixtures.purge(owner)
    with _serving() as base, httpx2.Client(timeout=60) as client:
        profile = ModelProfile.objects.update_or_create(
            name="bench-streaming",
            defaults={"provider": "openai_chat", "base_url": base, "model": "x", "stream": True},
        )[0]
        _, turn = fixtures.queued_turn(
            owner=owner, profile=profile, server=fixtures.demo_server(), question="stream it"
        )
        recorder = TurnRecorder(turn)
        ratios: dict[str, list[float]] = {kind: [] for kind in KINDS}
        walls: dict[str, dict[int, list[float]]] = {kind: {size: [] for size in SIZES} for kind in KINDS}
        bare_walls: dict[str, list[float]] = {kind: [] for kind in KINDS}
        for repeat in range(repeats + 1):
            for kind in KINDS:
                for size in SIZES:
                    model = f"{kind}-{size}"
                    provider = OpenAIChatProvider(
                        Endpoint(model=model, base_url=base, api_key="", stream=True)
                    )
                    product = _product(recorder, provider)
                    bare = _bare(client, base, model)
                    if repeat == 0:
                        continue  # warm-up
                    walls[kind][size].append(product)
                    if size == SIZES[-1]:
                        bare_walls[kind].append(bare)
                        ratios[kind].append(product / bare)
            ctx.log(f"repeat {repeat}: " + ", ".join(f"{k} {v[-1]:.2f}×" for k, v in ratios.items() if v))
    per_kind = {kind: summary(values)["median"] for kind, values in ratios.items()}
    worst = max(KINDS, key=lambda kind: per_kind[kind])
    growth = {
        kind: {
            f"{size // 1000} kB": round(float(summary(walls[kind][size])["median"]) * 1000, 1)
            for size in SIZES
        }
        for kind in KINDS
    }
    linear = {
        kind: float(summary(walls[kind][SIZES[-1]])["median"])
        / (10 * float(summary(walls[kind][SIZES[-2]])["median"]))
        for kind in KINDS
    }
    notes = "; ".join(
        f"{kind}: {per_kind[kind]:.2f}× (bare {summary(bare_walls[kind])['median'] * 1000:.0f} ms), "
        f"product ms at 10 kB/100 kB/1 MB {' / '.join(str(v) for v in growth[kind].values())}, "
        f"1 MB ÷ (10 × 100 kB) = {linear[kind]:.2f}"
        for kind in KINDS
    )
    result = judged(
        id=ID,
        name=NAME,
        unit=UNIT,
        target=TARGET,
        limit=LIMIT,
        samples=ratios[worst],
        details={
            "summary": notes,
            "worst": worst,
            "ratio_median": per_kind,
            "product_ms": growth,
            "linear_growth": linear,
            "linear_ok": all(value <= LINEAR_SLACK for value in linear.values()),
        },
    )
    if result.status == "pass" and not result.details["linear_ok"]:
        result.status = "fail"
        result.reason = f"wall time grew faster than linearly from 100 kB to 1 MB: {linear}"
    return [result]
