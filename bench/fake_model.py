"""A deterministic fake model behind the OpenAI Chat Completions wire format, for the benchmarks.

It calls a tool ``steps - 1`` times, then answers: with ``k`` tool results after the last user
message it asks for ``calculate`` with a new expression while ``k < steps - 1``, else it writes a
final answer. ``latency`` seconds of think time are slept per call (each request on its own
thread, so 200 callers wait 1 s together, not 200 s). Both the bare loop and the product talk to
the same instance over real HTTP on 127.0.0.1, so the comparison is like for like.

Run as a subprocess (:class:`FakeModel`), so its work does not share the measured process::

    python -m bench.fake_model --steps 20 --latency 0     # prints "READY http://127.0.0.1:PORT/v1"
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
API_KEY_ENV = "BENCH_MODEL_API_KEY"
API_KEY = "bench-fake-model-key"
MODEL_NAME = "bench-fake"
TOOL_SUFFIX = "calculate"

_ids = itertools.count(1)


def reply_for(payload: dict[str, Any], steps: int) -> dict[str, Any]:
    """The ``chat.completion`` body for one request (pure: the same request, the same reply)."""
    messages = payload.get("messages") or []
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    done = sum(1 for m in messages[last_user + 1 :] if m.get("role") == "tool")
    tools = [t["function"]["name"] for t in payload.get("tools") or [] if t.get("type") == "function"]
    tool = next((name for name in tools if name.endswith(TOOL_SUFFIX)), None)
    number = next(_ids)
    if tool is not None and done < steps - 1:
        arguments = json.dumps({"expression": f"({done} + 1) * 7 + {done % 5}"})
        message: dict[str, Any] = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_bench_{number}",
                    "type": "function",
                    "function": {"name": tool, "arguments": arguments},
                }
            ],
        }
        finish = "tool_calls"
    else:
        message = {"role": "assistant", "content": f"[bench model] done after {done} tool call(s)."}
        finish = "stop"
    prompt_tokens = sum(len(str(m.get("content") or "")) for m in messages) // 4 + 50
    return {
        "id": f"chatcmpl-bench-{number}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": str(payload.get("model") or MODEL_NAME),
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": 20,
            "total_tokens": prompt_tokens + 20,
        },
    }


# A streamed reply's pieces, in characters (each piece one event).
STREAM_PIECE = 16


def _stream_event(delta: dict[str, object], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return b"data: " + json.dumps({"object": "chat.completion.chunk", "choices": [choice]}).encode() + b"\n\n"


def stream_body(kind: str, size: int) -> bytes:
    """An event stream whose reply (text, or one call's arguments) is ``size`` characters."""
    words = ("lorem ipsum dolor sit amet, consectetur adipiscing elit " * (size // 50 + 1))[:size]
    pieces = [words[i : i + STREAM_PIECE] for i in range(0, size, STREAM_PIECE)]
    out = bytearray()
    if kind == "text":
        for piece in pieces:
            out += _stream_event({"content": piece})
        out += _stream_event({}, "stop")
    else:
        arguments = json.dumps({"text": words})
        head = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "echo", "arguments": ""}}
        out += _stream_event({"tool_calls": [head]})
        for i in range(0, len(arguments), STREAM_PIECE):
            out += _stream_event(
                {"tool_calls": [{"index": 0, "function": {"arguments": arguments[i : i + STREAM_PIECE]}}]}
            )
        out += _stream_event({}, "tool_calls")
    out += b"data: [DONE]\n\n"
    return bytes(out)


class _Stats:
    """Requests served and the most that were in flight at once (``GET /stats``)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests = 0
        self.in_flight = 0
        self.max_in_flight = 0

    def enter(self) -> None:
        with self.lock:
            self.requests += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def leave(self) -> None:
        with self.lock:
            self.in_flight -= 1

    def take(self) -> dict[str, int]:
        with self.lock:
            taken = {"requests": self.requests, "max_in_flight": self.max_in_flight}
            self.requests = self.max_in_flight = 0
            return taken


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes: with Nagle on, the second waits for a delayed ACK.
    disable_nagle_algorithm = True
    server: _Server

    def do_GET(self) -> None:  # noqa: N802 — the stdlib's hook name
        if self.path.endswith("/stats"):
            self._send(200, self.server.stats.take())
        else:
            self._send(
                404, {"error": {"message": f"no such route {self.path}", "type": "invalid_request_error"}}
            )

    def do_POST(self) -> None:  # noqa: N802 — the stdlib's hook name
        self.server.stats.enter()
        try:
            self._complete()
        finally:
            self.server.stats.leave()

    def _complete(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        if not self.path.endswith("/chat/completions"):
            self._send(
                404, {"error": {"message": f"no such route {self.path}", "type": "invalid_request_error"}}
            )
            return
        try:
            payload = json.loads(body)
        except ValueError:
            self._send(400, {"error": {"message": "the body is not JSON", "type": "invalid_request_error"}})
            return
        if self.server.latency > 0:
            time.sleep(self.server.latency)
        self._send(200, reply_for(payload, self.server.steps))

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 — the stdlib's signature
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # 200 turns connect at once: a small listen backlog would add SYN retransmits (seconds).
    request_queue_size = 2048

    def __init__(self, port: int, steps: int, latency: float) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.steps = steps
        self.latency = latency
        self.stats = _Stats()


class FakeModel:
    """The fake model as a subprocess; ``base_url`` is its OpenAI-compatible ``/v1`` root."""

    def __init__(self, *, steps: int, latency: float = 0.0) -> None:
        self.steps = steps
        self.latency = latency
        self.base_url = ""
        self.process: subprocess.Popen[str] | None = None

    def __enter__(self) -> FakeModel:
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.fake_model",
                "--steps",
                str(self.steps),
                "--latency",
                str(self.latency),
            ],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline().strip()
        if not line.startswith("READY "):
            self.process.kill()
            raise RuntimeError(f"the fake model did not start: {line!r}")
        self.base_url = line.removeprefix("READY ")
        return self

    def stats(self) -> dict[str, int]:
        """Requests since the last call, and the most in flight at once; resets both."""
        with urllib.request.urlopen(f"{self.base_url}/stats", timeout=5) as response:
            return dict(json.loads(response.read()))

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
            self.process = None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--steps", type=int, default=20, help="model calls per turn (the last one answers)")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds of think time per call")
    args = parser.parse_args()
    server = _Server(args.port, args.steps, args.latency)
    print(f"READY http://127.0.0.1:{server.server_address[1]}/v1", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
