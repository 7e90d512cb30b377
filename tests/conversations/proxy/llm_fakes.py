"""The parts the LLM proxy tests run: the app itself under a real ASGI server, and a model upstream
of our own that keeps every byte it received and sends exactly the bytes it is told to, holding
the rest of a stream back until the test lets it go (so a test can see a chunk arrive before the
stream has ended, with no timing involved)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from django.core.handlers.asgi import ASGIHandler
from django.core.signals import request_started
from django.db import connection

from conversations.execution import serving_start
from inspector.asgi import application
from tests.support import free_port

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
Asgi = Callable[[Scope, Receive, Send], Awaitable[None]]


class Served:
    """An ASGI ``app`` served by uvicorn on a free localhost port, in a thread of this process.
    ``own_headers`` False: uvicorn adds no ``Date`` and ``Server`` of its own (as daphne, which
    serves the app, adds neither where the app sent its own)."""

    def __init__(self, app: Asgi, *, own_headers: bool = True) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=self.port,
            log_level="error",
            lifespan="off",
            server_header=own_headers,
            date_header=own_headers,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Served:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the ASGI server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)


class ServedApp(Served):
    """The app itself (``inspector.asgi``), served as ``make run`` serves it but in this process.

    A web process's first request makes it a checker of stale turns for good (``serving_start``):
    the test process is not made one, so nothing of it outlives the test.
    """

    def __init__(self, *, own_headers: bool = True) -> None:
        super().__init__(application, own_headers=own_headers)

    def __enter__(self) -> ServedApp:
        request_started.disconnect(sender=ASGIHandler, dispatch_uid="inspector-serving-start")
        super().__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        request_started.connect(serving_start, sender=ASGIHandler, dispatch_uid="inspector-serving-start")


@dataclass
class Received:
    method: str
    path: str
    query: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes

    def header(self, name: str) -> str:
        wanted = name.lower().encode()
        return next((value.decode("latin1") for key, value in self.headers if key.lower() == wanted), "")


@dataclass
class Reply:
    """What the fake sends: ``chunks`` one by one; with ``hold_after`` set, the chunks from that
    index on only once the test calls ``FakeUpstream.release``."""

    chunks: list[bytes]
    status: int = 200
    headers: list[tuple[str, str]] = field(default_factory=lambda: [("content-type", "application/json")])
    hold_after: int | None = None
    # The index of the chunk before which the fake breaks off (its connection dropped mid-body).
    break_before: int | None = None

    @property
    def body(self) -> bytes:
        return b"".join(self.chunks)


class UpstreamBroke(Exception):
    """Raised by the fake mid-body: its server drops the connection, as a crashed upstream's would."""


class FakeUpstream:
    """A model endpoint of every format: the canned reply of the path and ``stream`` flag, or ``next_reply``."""

    def __init__(self) -> None:
        self.received: list[Received] = []
        self.next_reply: Reply | None = None
        self.sent: list[Reply] = []
        self.gate = threading.Event()
        # Set once the held part of a stream could not be sent (the proxy had closed the connection).
        self.send_failed = threading.Event()

    def release(self) -> None:
        self.gate.set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.received.append(
            Received(
                scope["method"], scope["path"], scope.get("query_string", b""), list(scope["headers"]), body
            )
        )
        reply = self.next_reply or canned(scope["path"], body, scope.get("query_string", b""))
        self.next_reply = None
        self.sent.append(reply)
        await send(
            {
                "type": "http.response.start",
                "status": reply.status,
                "headers": [(k.encode(), v.encode()) for k, v in reply.headers],
            }
        )
        try:
            for index, chunk in enumerate(reply.chunks):
                if index == reply.hold_after:
                    await asyncio.to_thread(self.gate.wait, 60)
                if index == reply.break_before:
                    raise UpstreamBroke
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            self.send_failed.set()


def _sse(events: list[tuple[str | None, dict[str, Any] | str]], line_end: str = "\n") -> list[bytes]:
    chunks = []
    for name, data in events:
        text = data if isinstance(data, str) else json.dumps(data)
        head = f"event: {name}{line_end}" if name else ""
        chunks.append(f"{head}data: {text}{line_end}{line_end}".encode())
    return chunks


SSE = [("content-type", "text/event-stream")]
TEXT = ["Hello", " from the fake"]


def canned(path: str, body: bytes, query: bytes) -> Reply:
    """A well-formed answer of the format ``path`` names, streamed when the request asks for it."""
    try:
        request = json.loads(body)
    except ValueError:
        return Reply(
            [b'{"error": {"type": "invalid_request_error", "message": "could not parse the JSON body"}}'], 400
        )
    streamed = bool(request.get("stream")) or path.endswith(":streamGenerateContent")
    if path.endswith("/chat/completions"):
        return _openai_chat(streamed)
    if path.endswith("/responses"):
        return _openai_responses(streamed)
    if path.endswith("/messages"):
        return _anthropic(streamed)
    return _gemini(streamed)


def _openai_chat(streamed: bool) -> Reply:
    base = {"id": "chatcmpl-fake", "created": 1, "model": "fake"}
    if not streamed:
        message = {"role": "assistant", "content": "".join(TEXT)}
        return Reply(
            [
                json.dumps(
                    {
                        **base,
                        "object": "chat.completion",
                        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
                    }
                ).encode()
            ]
        )
    events: list[tuple[str | None, dict[str, Any] | str]] = [
        (
            None,
            {
                **base,
                "object": "chat.completion.chunk",
                "choices": [
                    {"index": 0, "delta": {"role": "assistant", "content": piece}, "finish_reason": None}
                ],
            },
        )
        for piece in TEXT
    ]
    events.append(
        (
            None,
            {
                **base,
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
            },
        )
    )
    events.append((None, "[DONE]"))
    return Reply(_sse(events), headers=SSE, hold_after=1)


def _openai_responses(streamed: bool) -> Reply:
    item = {
        "type": "message",
        "id": "msg_fake",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "".join(TEXT), "annotations": []}],
    }
    response = {
        "id": "resp_fake",
        "object": "response",
        "created_at": 1,
        "status": "completed",
        "model": "fake",
        "output": [item],
        "usage": {"input_tokens": 3, "output_tokens": 4, "total_tokens": 7},
    }
    if not streamed:
        return Reply([json.dumps(response).encode()])
    events: list[tuple[str | None, dict[str, Any] | str]] = [
        (
            "response.created",
            {"type": "response.created", "response": {**response, "status": "in_progress", "output": []}},
        ),
        (
            "response.output_item.added",
            {"type": "response.output_item.added", "output_index": 0, "item": {**item, "content": []}},
        ),
    ]
    events += [
        (
            "response.output_text.delta",
            {
                "type": "response.output_text.delta",
                "item_id": "msg_fake",
                "output_index": 0,
                "content_index": 0,
                "delta": piece,
            },
        )
        for piece in TEXT
    ]
    events += [
        ("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item}),
        ("response.completed", {"type": "response.completed", "response": response}),
    ]
    numbered = [
        (name, {**data, "sequence_number": number} if isinstance(data, dict) else data)
        for number, (name, data) in enumerate(events)
    ]
    return Reply(_sse(numbered), headers=SSE, hold_after=3)


def _anthropic(streamed: bool) -> Reply:
    message = {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": "fake",
        "content": [{"type": "text", "text": "".join(TEXT)}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 4},
    }
    if not streamed:
        return Reply([json.dumps(message).encode()])
    events: list[tuple[str | None, dict[str, Any] | str]] = [
        (
            "message_start",
            {"type": "message_start", "message": {**message, "content": [], "stop_reason": None}},
        ),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        ),
    ]
    events += [
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}},
        )
        for piece in TEXT
    ]
    events += [
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 4},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return Reply(_sse(events), headers=SSE, hold_after=3)


def _gemini(streamed: bool) -> Reply:
    def chunk(text: str) -> dict[str, Any]:
        return {
            "candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "index": 0}],
            "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 4, "totalTokenCount": 7},
            "modelVersion": "fake",
        }

    if not streamed:
        whole = chunk("".join(TEXT))
        whole["candidates"][0]["finishReason"] = "STOP"
        return Reply([json.dumps(whole).encode()])
    # Gemini's own event stream ends its lines with CRLF.
    chunks = [chunk(piece) for piece in TEXT]
    chunks[-1]["candidates"][0]["finishReason"] = "STOP"
    return Reply(_sse([(None, each) for each in chunks], line_end="\r\n"), headers=SSE, hold_after=1)


def database_text() -> str:
    """Every row of every table, every column, as text."""
    quote = connection.ops.quote_name
    parts = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f"SELECT * FROM {quote(table)}")  # noqa: S608 — names from introspection
            parts.extend(
                " ".join(
                    bytes(value).decode("utf-8", "replace")
                    if isinstance(value, bytes | memoryview)
                    else str(value)
                    for value in row
                )
                for row in cursor.fetchall()
            )
    return "\n".join(parts)
