"""A model endpoint that misbehaves on purpose, in every wire format the product speaks.

A stdlib ``ThreadingHTTPServer`` on 127.0.0.1 (a free port). The *model name* of a request picks
the misbehaviour (``HostileModel.CASES``); the path picks the wire format (OpenAI Chat
Completions, OpenAI Responses, Anthropic Messages, Gemini), and the request's own ``stream``
flag (or Gemini's ``:streamGenerateContent``) whether the answer is an event stream. A request
that already carries the model's earlier turn (a tool result, a repair request) is answered with
a plain, well-formed final answer, so a turn can end.

A model name ``CASE@PARADIGM`` (``paradigm_model``) has the calls and final answers of the
abuse cases written as that paradigm reads them (``in_paradigm``): as text for the prompt
paradigms and structured output, as a label or the bare arguments for intent, whichever its
request asks for. Without it they are native calls.

Payloads are written as raw JSON text, so what no well-behaved encoder would emit goes out as
is: ``NaN``, ``1e999999``, lone surrogate escapes (``"\\ud800"``), nesting 10,000 deep.
"""

from __future__ import annotations

import json
import re
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOOL = "demo__get_weather_forecast"
DEEP = 10_000


class Raw(str):
    """JSON text written verbatim (not quoted) by ``dumps``."""


def dumps(value: object) -> str:
    """JSON text of ``value`` with ``Raw`` parts verbatim; strings ASCII-escaped, so a lone
    surrogate goes out as ``\\udXXX`` and NUL as ``\\u0000``."""
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(str(k))}:{dumps(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(dumps(v) for v in value) + "]"
    return json.dumps(value)


USAGE = Raw('{"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}')


@dataclass
class Reply:
    """A model turn, before it is written in a wire format. ``arguments`` is raw JSON text."""

    text: object = None
    calls: list[tuple[str, str]] = field(default_factory=list)
    usage: Raw = USAGE


@dataclass
class Answer:
    """What goes back: a status, a content type and the body, in chunks (with pauses)."""

    status: int
    content_type: str
    chunks: Iterator[bytes]
    length: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    # Sent as it is made (chunked), never whole: a body too big to hold.
    chunked: bool = False


def _deep() -> Raw:
    return Raw("[" * DEEP + "]" * DEEP)


CONTENT_CASES: dict[str, Reply] = {
    "ok": Reply(text="All good."),
    "surrogate-text": Reply(text="bad \ud800 text \udfff end"),
    "nul-text": Reply(text="a NUL \x00 inside"),
    "surrogate-name": Reply(calls=[("demo__get_\ud800weather", '{"city": "Paris"}')]),
    "surrogate-args": Reply(calls=[(TOOL, dumps({"city": "\udfff Paris"}))]),
    "nul-args": Reply(calls=[(TOOL, dumps({"city": "Pa\x00ris"}))]),
    "nan-usage": Reply(
        text="Usage is odd.",
        usage=Raw('{"prompt_tokens": NaN, "completion_tokens": Infinity, "total_tokens": -Infinity}'),
    ),
    "huge-number-args": Reply(calls=[(TOOL, '{"city": 1e999999}')]),
    "deep-args": Reply(calls=[(TOOL, '{"city": ' + _deep() + "}")]),
    "deep-text": Reply(text=str(_deep())),
    "nan-json-text": Reply(text='{"tool": "' + TOOL + '", "arguments": {"city": NaN, "day": 1e999999}}'),
    "huge-text": Reply(text="word " * 60_000),
    "wrong-types": Reply(text=Raw("42"), calls=[(TOOL, "[1, 2]")], usage=Raw('"lots"')),
}
RAW_CASES: dict[str, tuple[int, bytes]] = {
    "malformed": (200, b'{"choices": [{"message": {"content": "cut'),
    "non-utf8": (200, b'{"choices": \xff\xfe\x80 [}'),
    "html-500": (500, b"<html><body>Internal \xff Server Error</body></html>"),
    "empty-200": (200, b""),
    "json-array": (200, b"[1, 2, 3]"),
    "missing-fields": (200, b"{}"),
    "deep-body": (200, ("[" * DEEP + "]" * DEEP).encode()),
    "nan-body": (200, b'{"choices": NaN, "candidates": NaN, "content": NaN, "output": NaN}'),
}
# Well-formed replies whose text carries bytes that are not UTF-8, in every wire format: the
# placeholder (one character, so a stream never splits it; written as its JSON escape) is
# replaced by the bytes once the reply is written.
NOT_UTF8 = b"\xff\xfe\x80"
_NOT_UTF8_MARK = "\u00a7"
BYTE_CASES: dict[str, Reply] = {
    "non-utf8-text": Reply(text=f"bad {_NOT_UTF8_MARK} text"),
}
# Streams that go wrong on the way (a whole reply is sent the same way, unframed).
STREAM_CASES = ("truncated-stream", "endless-stream")
CASES = (*CONTENT_CASES, *RAW_CASES, *BYTE_CASES, *STREAM_CASES)
# Reads the request and never answers (not even a status line) until the server closes.
SILENT = "silent"
# Valid replies without bounds (tests/conversations/test_hostile_limits.py): MANY tool calls in
# one reply; an answer of HUGE bytes of text, sent as it is (huge-answer) or compressed, made
# while it is read, so a few hundred kilobytes over the wire decode to it (the bombs).
MANY = 10_000
HUGE = 200_000_000
BOMBS = {"gzip-bomb": "gzip", "deflate-bomb": "deflate", "huge-answer": ""}
# A body labelled brotli: the client offers no brotli (its package is not installed), so it must
# not be decoded; the bytes are not brotli at all, which no decoder could hide.
BROTLI = "brotli-body"
BROTLI_BYTES = bytes(range(256)) * 64
# One call of the broken MCP server's tool that writes one endless stdout line.
ENDLESS_TOOL = "broken__endless_line"
ENDLESS_LINE = "endless-line"
ABUSE_CASES = ("many-calls", *BOMBS, BROTLI, ENDLESS_LINE)
_FILL = b"FILL-HERE"
_MEGABYTE = b"a" * 1_000_000


def _is_text(value: object) -> bool:
    """A plain text to send in pieces (not a ``Raw`` value of another type)."""
    return isinstance(value, str) and not isinstance(value, Raw)


def _pieces(text: str, size: int = 7) -> list[str]:
    # A long text in at most a few thousand pieces: a stream of one event per seven characters
    # of a reply of 10,000 calls would take minutes to read.
    size = max(size, len(text) // 2000)
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _sse(events: list[tuple[str | None, str]]) -> bytes:
    out = []
    for name, data in events:
        out.append((f"event: {name}\n" if name else "") + f"data: {data}\n\n")
    return "".join(out).encode()


def _text_json(text: object) -> str:
    return dumps(text)


# --- the four wire formats: a whole body, and an event stream ------------------------------------


def _openai_chat(reply: Reply, stream: bool) -> bytes:
    calls = [
        {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": arguments}}
        for i, (name, arguments) in enumerate(reply.calls)
    ]
    finish = "tool_calls" if calls else "stop"
    if not stream:
        message: dict[str, object] = {"role": "assistant", "content": reply.text}
        if calls:
            message["tool_calls"] = calls
        return dumps(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": reply.usage,
            }
        ).encode()
    events: list[tuple[str | None, str]] = []
    if _is_text(reply.text):
        events += [
            (None, dumps({"choices": [{"index": 0, "delta": {"content": p}}]})) for p in _pieces(reply.text)
        ]
    elif reply.text is not None:
        events.append((None, dumps({"choices": [{"index": 0, "delta": {"content": reply.text}}]})))
    for i, (name, arguments) in enumerate(reply.calls):
        head = {
            "index": i,
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        events.append((None, dumps({"choices": [{"index": 0, "delta": {"tool_calls": [head]}}]})))
        for piece in _pieces(arguments, 101):
            fragment = {"index": i, "function": {"arguments": piece}}
            events.append((None, dumps({"choices": [{"index": 0, "delta": {"tool_calls": [fragment]}}]})))
    events.append((None, dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})))
    events.append((None, dumps({"choices": [], "usage": reply.usage})))
    events.append((None, "[DONE]"))
    return _sse(events)


def _openai_responses(reply: Reply, stream: bool) -> bytes:
    output: list[object] = []
    if reply.text is not None:
        output.append(
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": reply.text}]}
        )
    for i, (name, arguments) in enumerate(reply.calls):
        output.append({"type": "function_call", "call_id": f"call_{i}", "name": name, "arguments": arguments})
    response = {
        "id": "resp_1",
        "object": "response",
        "status": "completed",
        "output": output,
        "usage": reply.usage,
    }
    if not stream:
        return dumps(response).encode()
    events: list[tuple[str | None, str]] = []
    position = 0
    if reply.text is not None:
        events.append(
            (
                "response.output_item.added",
                dumps({"type": "response.output_item.added", "output_index": 0, "item": {"type": "message"}}),
            )
        )
        for piece in _pieces(reply.text) if _is_text(reply.text) else [reply.text]:
            events.append(
                (
                    "response.output_text.delta",
                    dumps({"type": "response.output_text.delta", "output_index": 0, "delta": piece}),
                )
            )
        position = 1
    for i, (name, arguments) in enumerate(reply.calls):
        item = {"type": "function_call", "call_id": f"call_{i}", "name": name, "arguments": ""}
        index = position + i
        events.append(
            (
                "response.output_item.added",
                dumps({"type": "response.output_item.added", "output_index": index, "item": item}),
            )
        )
        for piece in _pieces(arguments, 101):
            events.append(
                (
                    "response.function_call_arguments.delta",
                    dumps(
                        {
                            "type": "response.function_call_arguments.delta",
                            "output_index": index,
                            "delta": piece,
                        }
                    ),
                )
            )
    events.append(("response.completed", dumps({"type": "response.completed", "response": response})))
    return _sse(events)


def _anthropic(reply: Reply, stream: bool) -> bytes:
    content: list[object] = []
    if reply.text is not None:
        content.append({"type": "text", "text": reply.text})
    for i, (name, arguments) in enumerate(reply.calls):
        content.append({"type": "tool_use", "id": f"toolu_{i}", "name": name, "input": Raw(arguments)})
    usage = Raw('{"input_tokens": 3, "output_tokens": 4}') if reply.usage is USAGE else reply.usage
    stop = "tool_use" if reply.calls else "end_turn"
    message = {"id": "msg_1", "type": "message", "role": "assistant", "content": content, "stop_reason": stop}
    if not stream:
        return dumps({**message, "usage": usage}).encode()
    events: list[tuple[str | None, str]] = [
        (
            "message_start",
            dumps({"type": "message_start", "message": {**message, "content": [], "usage": usage}}),
        )
    ]
    for index, block in enumerate(content):
        assert isinstance(block, dict)
        start = {
            "type": block["type"],
            **({"id": block["id"], "name": block["name"], "input": {}} if "id" in block else {"text": ""}),
        }
        events.append(
            (
                "content_block_start",
                dumps({"type": "content_block_start", "index": index, "content_block": start}),
            )
        )
        if block["type"] == "text":
            text = block["text"]
            for piece in _pieces(text) if _is_text(text) else [text]:
                delta = {"type": "text_delta", "text": piece}
                events.append(
                    (
                        "content_block_delta",
                        dumps({"type": "content_block_delta", "index": index, "delta": delta}),
                    )
                )
        else:
            for piece in _pieces(str(block["input"]), 101):
                delta = {"type": "input_json_delta", "partial_json": piece}
                events.append(
                    (
                        "content_block_delta",
                        dumps({"type": "content_block_delta", "index": index, "delta": delta}),
                    )
                )
        events.append(("content_block_stop", dumps({"type": "content_block_stop", "index": index})))
    events.append(
        ("message_delta", dumps({"type": "message_delta", "delta": {"stop_reason": stop}, "usage": usage}))
    )
    events.append(("message_stop", dumps({"type": "message_stop"})))
    return _sse(events)


def _gemini(reply: Reply, stream: bool) -> bytes:
    parts: list[object] = []
    if reply.text is not None:
        parts.append({"text": reply.text})
    for name, arguments in reply.calls:
        parts.append({"functionCall": {"name": name, "args": Raw(arguments)}})
    usage = Raw('{"promptTokenCount": 3, "candidatesTokenCount": 4}') if reply.usage is USAGE else reply.usage

    def chunk(chunk_parts: list[object], finish: bool) -> str:
        candidate: dict[str, object] = {"content": {"role": "model", "parts": chunk_parts}, "index": 0}
        if finish:
            candidate["finishReason"] = "STOP"
        return dumps({"candidates": [candidate], "usageMetadata": usage})

    if not stream:
        return chunk(parts, True).encode()
    events: list[tuple[str | None, str]] = []
    for part in parts:
        assert isinstance(part, dict)
        if "text" in part and _is_text(part["text"]):
            events += [(None, chunk([{"text": p}], False)) for p in _pieces(part["text"], 501)]
        else:
            events.append((None, chunk([part], False)))
    events.append((None, chunk([], True)))
    return _sse(events)


FORMATS: dict[str, Callable[[Reply, bool], bytes]] = {
    "openai_chat": _openai_chat,
    "openai_responses": _openai_responses,
    "anthropic": _anthropic,
    "gemini": _gemini,
}
_ROUTES = (
    (re.compile(r"/v1/chat/completions$"), "openai_chat"),
    (re.compile(r"/v1/responses$"), "openai_responses"),
    (re.compile(r"/v1/messages$"), "anthropic"),
    (re.compile(r"/v1beta/models/([^/:]+):(generateContent|streamGenerateContent)$"), "gemini"),
)


def _route(path: str) -> tuple[str, re.Match[str]] | None:
    """The wire format a path belongs to, and its match (Gemini's names the model)."""
    for pattern, wire in _ROUTES:
        match = pattern.search(path)
        if match:
            return wire, match
    return None


def _continued(wire: str, body: dict[str, object]) -> bool:
    """Whether the request carries an earlier answer of the model (so this turn may now end)."""
    if wire == "openai_responses":
        items = body.get("input")
        return isinstance(items, list) and any(
            isinstance(i, dict) and (i.get("role") == "assistant" or i.get("type") == "function_call")
            for i in items
        )
    key, role = ("contents", "model") if wire == "gemini" else ("messages", "assistant")
    messages = body.get(key)
    return isinstance(messages, list) and any(isinstance(m, dict) and m.get("role") == role for m in messages)


def _filled(wire: str, stream: bool) -> Iterator[bytes]:
    """A reply in ``wire`` format whose one text is ``HUGE`` bytes of ``a``, a megabyte at a time."""
    # A stream may repeat the text (Responses' closing event holds the whole response).
    head, *tails = FORMATS[wire](Reply(text=Raw(json.dumps(_FILL.decode()))), stream).split(_FILL)
    yield head
    for tail in tails:
        for _ in range(HUGE // len(_MEGABYTE)):
            yield _MEGABYTE
        yield tail


def _compressed(chunks: Iterator[bytes], encoding: str) -> Iterator[bytes]:
    """``chunks`` as one gzip or deflate (zlib, RFC 9110 §8.4.1.2) body, compressed as it is read."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31 if encoding == "gzip" else 15)
    for chunk in chunks:
        out = compressor.compress(chunk)
        if out:
            yield out
    yield compressor.flush()


PARADIGM_MARK = "@"
# What intent's two requests and its answer call say (conversations/loop/paradigms/intent.py).
_INTENT_CLASSIFY = "You route a user's request to one tool"
_INTENT_FILL = "You fill in the arguments for the tool"


def paradigm_model(case: str, paradigm: str) -> str:
    """The model name that has ``case`` answered as ``paradigm`` reads calls."""
    return f"{case}{PARADIGM_MARK}{paradigm}"


def _xml_invoke(name: str, arguments: str) -> str:
    parameters = "".join(
        f'<parameter name="{key}">{value if isinstance(value, str) else json.dumps(value)}</parameter>\n'
        for key, value in json.loads(arguments).items()
    )
    return f'<invoke name="{name}">\n{parameters}</invoke>\n'


def in_paradigm(paradigm: str, reply: Reply, request: str) -> Reply:
    """``reply`` written as ``paradigm`` reads a model's reply (``request``: the raw request it
    answers, which tells intent's classification from its argument filling). A paradigm of one
    call per decision (structured output, intent) gets all of a reply's calls all the same: as
    a JSON array of decisions, or a label per line."""
    calls, final = reply.calls, reply.text if reply.text is not None else ""
    if paradigm in ("", "native", "auto"):
        return reply
    if paradigm == "prompt_xml":
        text = "<function_calls>\n" + "".join(_xml_invoke(n, a) for n, a in calls) + "</function_calls>"
    elif paradigm == "prompt_json":
        objects = [Raw(f'{{"tool": {json.dumps(n)}, "arguments": {a}}}') for n, a in calls]
        text = dumps(objects[0] if len(objects) == 1 else objects)
    elif paradigm == "structured":
        if not calls:
            return Reply(text=dumps({"decision": {"action": "final_answer", "answer": final}}))
        decisions = [{"decision": {"action": "call_tool", "tool": n, "arguments": Raw(a)}} for n, a in calls]
        text = dumps(decisions[0] if len(decisions) == 1 else decisions)
    elif _INTENT_CLASSIFY in request:
        return Reply(text="\n".join(n for n, _ in calls) or "none")
    elif _INTENT_FILL in request and calls:
        text = calls[0][1]
    else:
        return Reply(text=final)
    return Reply(text=text if calls else final)


def _abuse(wire: str, case: str, stream: bool, kind: str, paradigm: str, request: str) -> Answer:
    if case == "many-calls":
        calls = [(TOOL, '{"city": "Paris"}')] * MANY
        reply = in_paradigm(paradigm, Reply(calls=calls), request)
        return Answer(200, kind, iter([FORMATS[wire](reply, stream)]))
    if case == ENDLESS_LINE:
        reply = in_paradigm(paradigm, Reply(calls=[(ENDLESS_TOOL, "{}")]), request)
        return Answer(200, kind, iter([FORMATS[wire](reply, stream)]))
    if case == BROTLI:
        return Answer(200, kind, iter([BROTLI_BYTES]), headers={"content-encoding": "br"})
    encoding = BOMBS[case]
    if not encoding:
        return Answer(200, kind, _filled(wire, stream), chunked=True)
    body = _compressed(_filled(wire, stream), encoding)
    return Answer(200, kind, body, headers={"content-encoding": encoding}, chunked=True)


def answer(
    wire: str, case: str, stream: bool, continued: bool, paradigm: str = "", request: str = ""
) -> Answer:
    """The answer to one request in ``wire`` format for ``case`` (the abuse cases' calls and
    final answers written as ``paradigm`` reads them, ``request`` the raw request)."""
    kind = "text/event-stream" if stream else "application/json"
    if continued and case not in STREAM_CASES:
        final = in_paradigm(paradigm, Reply(text="Final answer."), request)
        return Answer(200, kind, iter([FORMATS[wire](final, stream)]))
    if case in ABUSE_CASES:
        return _abuse(wire, case, stream, kind, paradigm, request)
    if case in CONTENT_CASES:
        return Answer(200, kind, iter([FORMATS[wire](CONTENT_CASES[case], stream)]))
    if case in RAW_CASES:
        status, data = RAW_CASES[case]
        return Answer(status, "text/html" if status >= 500 else kind, iter([data]))
    if case in BYTE_CASES:
        data = FORMATS[wire](BYTE_CASES[case], stream).replace(
            json.dumps(_NOT_UTF8_MARK).strip('"').encode(), NOT_UTF8
        )
        return Answer(200, kind, iter([data]))
    whole = FORMATS[wire](Reply(text="This reply never arrives whole. " * 20), stream)
    if case == "truncated-stream":
        # Announces more than it sends, then the connection closes.
        return Answer(200, kind, iter([whole[: len(whole) // 2]]), length=len(whole))
    return Answer(200, kind, _endless(whole, stream))


def _endless(whole: bytes, stream: bool) -> Iterator[bytes]:
    """A first part of a real answer, then a comment line (an event stream) or a space (JSON)
    every 20 ms, forever: no read ever times out."""
    yield whole[: len(whole) // 3]
    while True:
        time.sleep(0.02)
        yield b": still thinking\n\n" if stream else b" "


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 — the base class's name
        return

    def do_POST(self) -> None:  # noqa: N802 — the stdlib's handler name
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        path = self.path.split("?", 1)[0]
        routed = _route(path)
        if routed is None:
            self.send_error(404)
            return
        wire, match = routed
        body = json.loads(raw)
        if wire == "gemini":
            case, stream = match.group(1), match.group(2) == "streamGenerateContent"
        else:
            case, stream = str(body.get("model")), bool(body.get("stream"))
        case, _, paradigm = case.partition(PARADIGM_MARK)
        self.server.requests.append((wire, case, stream))
        self.server.accepted.append(self.headers.get("accept-encoding") or "")
        if case == SILENT:
            self.server.closing.wait()
            self.close_connection = True
            return
        text = raw.decode("utf-8", "replace")
        reply = answer(wire, case, stream, _continued(wire, body), paradigm, text)
        self.send_response(reply.status)
        self.send_header("content-type", reply.content_type)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        chunked = reply.chunked or (reply.length is None and (stream or case in STREAM_CASES))
        if chunked:
            self.send_header("transfer-encoding", "chunked")
        else:
            chunks = list(reply.chunks)
            data = b"".join(chunks)
            reply.chunks = iter([data])
            self.send_header("content-length", str(reply.length if reply.length is not None else len(data)))
        self.end_headers()
        try:
            for chunk in reply.chunks:
                if not chunk:
                    continue
                if chunked:
                    self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                else:
                    self.wfile.write(chunk)
                self.wfile.flush()
            if chunked:
                self.wfile.write(b"0\r\n\r\n")
            if reply.length is not None:
                self.close_connection = True
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # 50 calls connect at once: the default backlog (5) would have the kernel reset some.
    request_queue_size = 128
    requests: list[tuple[str, str, bool]]
    accepted: list[str]
    closing: threading.Event


class HostileModel:
    """The hostile endpoint, serving until ``close``. ``base_url`` suits every provider's
    profile: each adds its own path (``/v1/...`` or ``/v1beta/...``)."""

    CASES = CASES

    def __init__(self) -> None:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.requests = []
        self._server.accepted = []
        self._server.closing = threading.Event()
        self._thread = threading.Thread(target=self._server.serve_forever, name="hostile-model", daemon=True)
        self._thread.start()

    @property
    def requests(self) -> list[tuple[str, str, bool]]:
        return self._server.requests

    @property
    def accepted(self) -> list[str]:
        """The ``Accept-Encoding`` of each request, in order (as ``requests``)."""
        return self._server.accepted

    def base_url(self, wire: str) -> str:
        host, port = self._server.server_address[:2]
        root = f"http://{host!s}:{port}"
        return root if wire in ("anthropic", "gemini") else f"{root}/v1"

    def close(self) -> None:
        self._server.closing.set()
        self._server.shutdown()
        self._server.server_close()
