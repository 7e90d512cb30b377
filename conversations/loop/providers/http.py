"""The HTTP seam every provider shares: one client per endpoint, exact capture, errors with intent.

Requests are captured at the httpx2 client: the recorded request body is ``request.content``
(the bytes that were sent), the response body is the bytes that came back — for a streamed
reply the whole event stream, verbatim, read to its end before it is parsed. Credential headers
are masked by ``conversations.loop.wire.safe_headers``; nothing here ever stores a key.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, cast

import httpcore2
import httpx2

from conversations.escaping import storable_json, storable_text, undecodable_bytes
from conversations.loop.providers.base import Endpoint, ModelReply, ProviderError
from conversations.loop.providers.clients import EndpointCache
from conversations.loop.providers.streaming import EventListener, LivePass, SseReader
from conversations.loop.providers.streaming import SseEvent as SseEvent
from conversations.loop.providers.streaming import parse_sse as parse_sse
from conversations.loop.wire import WireExchange, decode_body, safe_headers
from conversations.typealias import JSONDict, JSONValue

# Set, in the context of the thread making a call, by a caller that may abandon it (a cancelled
# turn): once the event is set, a body still streaming in is not read further and its
# connection is closed, instead of being read to its end or its deadline for nobody.
call_abandoned: ContextVar[threading.Event | None] = ContextVar("call_abandoned", default=None)

# Ids a provider had to make up (the wire had none); providers that pair by position send them
# nowhere, the others send them back like any id.
SYNTHESIZED_ID_PREFIX = "synth_"


class _TransportRegistry:
    """In-process transports for endpoints served by this app (the demo model), by endpoint
    (bounded and keyed without the API key: ``clients.EndpointCache``)."""

    def __init__(self) -> None:
        self._transports: EndpointCache[httpx2.BaseTransport] = EndpointCache()

    def set(self, endpoint: Endpoint, transport: httpx2.BaseTransport) -> None:
        self._transports.setdefault(endpoint, transport)

    def get(self, endpoint: Endpoint) -> httpx2.BaseTransport | None:
        return self._transports.get(endpoint)


endpoint_transport = _TransportRegistry()

_clients: EndpointCache[httpx2.Client] = EndpointCache(close=httpx2.Client.close)


# A worker runs hundreds of turns at once against one model endpoint: every one of them may be
# waiting on a reply, so the pool must not make them queue for a connection (httpx's default is 100).
MODEL_CONNECTION_LIMITS = httpx2.Limits(max_connections=1000, max_keepalive_connections=200)


def new_http_client(endpoint: Endpoint) -> httpx2.Client:
    """An HTTP client for ``endpoint`` (its in-process transport, if any); never follows redirects.

    Its connections can be shut down from another thread while a call waits on them
    (``interruptible_call``).
    """
    client = httpx2.Client(
        transport=endpoint_transport.get(endpoint),
        timeout=min(endpoint.timeout, endpoint.deadline),
        follow_redirects=False,
        limits=MODEL_CONNECTION_LIMITS,
    )
    # httpx keeps its transports private: read defensively, so a change there costs only this.
    for transport in [getattr(client, "_transport", None), *getattr(client, "_mounts", {}).values()]:
        _make_interruptible(transport)
    return client


# --- interrupting a call from another thread ------------------------------------------------------


class _ThreadStreams:
    """The network stream each thread inside an ``interruptible_call`` last read from or wrote
    to: where its blocking call waits. Other threads' reads are not noted (nothing is kept for
    them)."""

    def __init__(self) -> None:
        self._by_thread: dict[int, _TrackedStream | None] = {}

    def using(self, stream: _TrackedStream) -> None:
        thread = threading.get_ident()
        if thread in self._by_thread:
            self._by_thread[thread] = stream

    def start(self, thread: int) -> None:
        self._by_thread[thread] = None

    def clear(self, thread: int) -> None:
        self._by_thread.pop(thread, None)

    def interrupt(self, thread: int) -> None:
        stream = self._by_thread.get(thread)
        if stream is not None:
            stream.shut_down()


_streams = _ThreadStreams()


class _TrackedStream(httpcore2.NetworkStream):
    """httpcore's blocking stream, noting before each read and write which thread uses it."""

    def __init__(self, inner: httpcore2.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        _streams.using(self)
        return self._inner.read(max_bytes, timeout)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        _streams.using(self)
        self._inner.write(buffer, timeout)

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore2.NetworkStream:
        return _TrackedStream(self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)

    def shut_down(self) -> None:
        """Shut the socket down (both ways) from any thread: a read or write blocked on it, TLS or
        not, returns at once with an error; the connection is not used again."""
        sock = self._inner.get_extra_info("socket")
        if sock is None:
            return
        try:
            # On a duplicate of the descriptor: shutting down acts on the connection, and the
            # stream's own socket object (an SSL one, perhaps) is left to the thread using it.
            with socket.socket(fileno=os.dup(sock.fileno())) as duplicate:
                duplicate.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already closed or never connected: nothing waits on it


class _TrackedBackend(httpcore2.NetworkBackend):
    """httpcore's blocking network backend whose streams are :class:`_TrackedStream`."""

    def __init__(self, inner: httpcore2.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.NetworkStream:
        return _TrackedStream(self._inner.connect_tcp(host, port, timeout, local_address, socket_options))

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore2.NetworkStream:
        return _TrackedStream(self._inner.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def _make_interruptible(transport: httpx2.BaseTransport | None) -> None:
    """Give a network transport's connection pool the tracked backend (an in-process transport,
    or one already given it, is left as it is)."""
    pool = getattr(transport, "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if isinstance(backend, httpcore2.NetworkBackend) and not isinstance(backend, _TrackedBackend):
        pool._network_backend = _TrackedBackend(backend)  # type: ignore[union-attr]


@contextmanager
def interruptible_call() -> Iterator[Callable[[], None]]:
    """For a blocking model call made on this thread: yields a function that any other thread
    may call to make it fail at once, by shutting down the connection it is waiting on (its
    provider then raises ``ProviderError`` with what arrived). Calling it before the call reached
    the network, or after it ended, does nothing harmful (a pooled connection it shuts down is
    seen to be closed and replaced)."""
    thread = threading.get_ident()
    _streams.start(thread)
    try:
        yield lambda: _streams.interrupt(thread)
    finally:
        _streams.clear(thread)


def http_client(endpoint: Endpoint) -> AbstractContextManager[httpx2.Client]:
    """One client (and connection pool) per endpoint, shared by all threads, never retrying;
    leased for the length of a call (a client dropped from the cache is closed after it)."""
    return _clients.lease(endpoint, new_http_client)


def new_exchange(request: httpx2.Request, started: datetime, t0: float) -> WireExchange:
    """The record of ``request`` as sent, timed from ``t0`` until now."""
    return WireExchange(
        channel="llm",
        label=f"{request.method} {request.url.path}",
        started_at=started,
        request_headers=safe_headers(request.headers.multi_items()),
        request_body=decode_body(request.content),
        duration_ms=(time.monotonic() - t0) * 1000,
    )


def with_response(
    exchange: WireExchange, response: httpx2.Response, content: bytes | None = None
) -> WireExchange:
    """``exchange`` completed with the response: status, masked headers, body (``content`` when
    the body was streamed rather than read)."""
    exchange.status = str(response.status_code)
    exchange.response_headers = safe_headers(response.headers.multi_items())
    exchange.response_body = decode_body(response.content if content is None else content)
    return exchange


class _DeadlinePassed(Exception):
    """The whole call took longer than its endpoint's deadline."""


class _Abandoned(Exception):
    """The caller gave the call up (``call_abandoned``) while the reply streamed in."""


class _TooLarge(Exception):
    """The body, decoded, passed the endpoint's ``body_limit``."""


def read_streamed(
    response: httpx2.Response,
    on_event: EventListener | None,
    started: datetime,
    t0: float,
    deadline: float,
    limit: int | None = None,
) -> bytes:
    """The whole body of a response sent with ``stream=True``, telling ``on_event`` each
    server-sent event as it arrives; the response is closed after.

    The call (from ``t0``) must end within ``deadline`` seconds, however the body trickles in:
    each read waits at most until then (the request's ``timeout`` extension, which the HTTP
    core reads before every read), and the deadline is checked after every chunk. At most
    ``limit`` bytes of the body are read once its content-encoding is undone (the HTTP client
    inflates a gzip or deflate body a megabyte at a time, so a bomb never expands whole).

    Raises:
        ProviderError: the connection broke or timed out mid-stream, or the call passed its
            deadline; its exchange holds the status, the headers and every byte that arrived
            (status ``timeout`` and the deadline named in its error, for a deadline). Also when
            the caller abandoned the call (``call_abandoned``), with what had arrived: a
            cancelled turn's record keeps it. Also when the decoded body passed ``limit``: the
            record keeps its first ``limit`` bytes, and its error the bytes that came over the
            wire until then.
    """
    end = t0 + deadline
    body = bytearray()
    reader = SseReader() if on_event is not None and response.status_code < 400 else None
    abandoned = call_abandoned.get()
    try:
        chunks = response.iter_bytes()
        while True:
            _bound_read(response, end)
            chunk = next(chunks, None)
            if chunk is None:
                break
            if limit is not None and len(body) + len(chunk) > limit:
                body += chunk[: max(limit - len(body), 0)]
                raise _TooLarge
            body += chunk
            if abandoned is not None and abandoned.is_set():
                raise _Abandoned
            if reader is not None and on_event is not None:
                for event in reader.feed(chunk):
                    on_event(event)
            if time.monotonic() > end:
                raise _DeadlinePassed
        if reader is not None and on_event is not None:
            for event in reader.close():
                on_event(event)
            if reader.replaced and isinstance(on_event, LivePass):
                # The display showed U+FFFD for bytes the record keeps: its reading cannot
                # stand for the record's, which is read again (and escapes them).
                on_event.whole = False
        return bytes(body)
    except (httpx2.HTTPError, _DeadlinePassed, _Abandoned, _TooLarge) as exc:
        exchange = with_response(new_exchange(response.request, started, t0), response, bytes(body))
        if isinstance(exc, _TooLarge):
            exchange.status = "error"
            exchange.error = too_large(limit or 0, response)
            raise ProviderError(
                f"the model endpoint's reply was cut: {exchange.error}", exchange=exchange
            ) from exc
        if isinstance(exc, _Abandoned):
            # Seen here before the shut connection made a read fail (a busy machine's order):
            # the record keeps what was sent and what had arrived all the same.
            exchange.status = "error"
            exchange.error = f"abandoned by its caller while the reply streamed in; the {len(body)} bytes received so far are kept"
            raise ProviderError(
                "the call was abandoned by its caller while the reply streamed in", exchange=exchange
            ) from exc
        if isinstance(exc, _DeadlinePassed) or time.monotonic() >= end:
            exchange.status = "timeout"
            exchange.error = f"cut at the call's deadline of {deadline:g} s; the {len(body)} bytes received so far are kept"
            raise ProviderError(
                f"the model call passed its deadline of {deadline:g} s and was cut: {exchange.error}",
                exchange=exchange,
            ) from exc
        exchange.status = "timeout" if isinstance(exc, httpx2.TimeoutException) else "error"
        exchange.error = f"{type(exc).__name__}: {exc}"
        raise ProviderError(
            f"the model endpoint stopped sending mid-stream: {exchange.error}", exchange=exchange
        ) from exc
    finally:
        response.close()


def too_large(limit: int, response: httpx2.Response) -> str:
    """What a body cut at ``limit`` decoded bytes says: how much came over the wire until then."""
    encoding = response.headers.get("content-encoding", "")
    wire = f" ({encoding}-encoded)" if encoding and encoding != "identity" else ""
    return (
        f"its body passed the limit of {limit:,} bytes (the profile response_body_limit, or RESPONSE_BODY_LIMIT) and was not read further; "
        f"the first {limit:,} bytes are kept, {response.num_bytes_downloaded:,} bytes{wire} had "
        "arrived over the wire"
    )


def _bound_read(response: httpx2.Response, end: float) -> None:
    """Let the next read of ``response`` wait no later than ``end``."""
    timeout = response.request.extensions.get("timeout")
    if isinstance(timeout, dict):
        remaining = max(end - time.monotonic(), 0.001)
        read = timeout.get("read")
        timeout["read"] = remaining if read is None else min(float(read), remaining)


def reply_read(exchange: WireExchange, parse: Callable[[], ModelReply]) -> ModelReply:
    """The reply ``parse`` reads from the recorded ``exchange``, made safe to use and store.

    Whatever goes wrong while a reply is read from untrusted bytes (a ``ValueError`` of the
    format, a ``RecursionError`` of JSON nested thousands deep, a wrong type anywhere) becomes
    a ``ProviderError`` that carries the exchange, so the raw response is always recorded. Text
    a database, a page or the next request could not carry (a lone surrogate, decoded from a
    ``\\ud800`` escape) is replaced by its escaped form, and the reply's ``notes`` say so.

    Raises:
        ProviderError: the response cannot be read as the wire format says.
    """
    try:
        reply = parse()
    except ProviderError:
        raise
    except Exception as exc:  # any failure on untrusted bytes means "unreadable"
        problem = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
        raise unreadable(exchange, problem[:2000]) from exc
    reply = _carriable(reply)
    note = undecodable_bytes(exchange.response_body)
    if note:
        reply.notes.append(note)
    return reply


def _with_bytes_note(message: str, exchange: WireExchange) -> str:
    """``message``, followed by what the response held that is not UTF-8 (``undecodable_bytes``)."""
    note = undecodable_bytes(exchange.response_body)
    return f"{message} ({note})" if note else message


def _carriable(reply: ModelReply) -> ModelReply:
    notes: list[str] = []

    def clean(text: str, what: str) -> str:
        stored, problem = storable_text(text)
        if problem:
            notes.append(f"{what}: {problem} (the raw response holds it as sent)")
        return stored

    if reply.text is not None:
        reply.text = clean(reply.text, "the reply's text")
    if reply.refusal is not None:
        reply.refusal = clean(reply.refusal, "the refusal")
    for index, call in enumerate(reply.tool_calls):
        call.id = clean(call.id, f"call {index}'s id")
        call.name = clean(call.name, f"call {index}'s tool name")
        call.arguments_text = clean(call.arguments_text, f"call {index}'s arguments")
    usage, found = storable_json(reply.usage, path="usage")
    reply.usage = usage if isinstance(usage, dict) else {}
    notes.extend(f"{note} (the raw response holds it as sent)" for note in found)
    if reply.echo is not None:
        echo, found = storable_json(reply.echo, path="echo")
        reply.echo = echo if isinstance(echo, dict) else None
        notes.extend(found)
    reply.notes.extend(notes)
    return reply


def error_detail(body: str, fallback: str) -> str:
    """The provider's own error message from an error body, verbatim, else ``fallback``.

    OpenAI (``{"error": {"message"}}``), Anthropic (``{"type": "error", "error": {"message"}}``)
    and Gemini (``{"error": {"code", "message", "status"}}``) all put it at ``error.message``;
    some compatible servers send ``{"error": "text"}``.
    """
    try:
        data = json.loads(body)
    except ValueError:
        return fallback
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])
    if isinstance(error, str) and error:
        return error
    return fallback


def status_error(exchange: WireExchange, status: int) -> ProviderError:
    """The error for an HTTP error status; its message carries the provider's text verbatim."""
    detail = error_detail(exchange.response_body, f"HTTP {status}")
    exchange.error = detail
    return ProviderError(
        _with_bytes_note(f"the model endpoint answered {status}: {detail}", exchange),
        exchange=exchange,
        status=status,
    )


def unreadable(exchange: WireExchange, problem: str) -> ProviderError:
    """The error for a 2xx answer that cannot be read as the wire format says."""
    exchange.error = f"unreadable response: {problem}"
    return ProviderError(
        _with_bytes_note(f"the model endpoint sent an unreadable response: {problem}", exchange),
        exchange=exchange,
    )


def stream_error(exchange: WireExchange, detail: str) -> ProviderError:
    """The error for an error event inside a 2xx event stream (e.g. Anthropic's ``overloaded_error``)."""
    exchange.error = detail
    return ProviderError(
        _with_bytes_note(f"the model endpoint sent an error in the event stream: {detail}", exchange),
        exchange=exchange,
    )


def post_json(
    endpoint: Endpoint,
    url: str,
    body: JSONDict,
    headers: Mapping[str, str],
    on_event: EventListener | None = None,
) -> tuple[WireExchange, str]:
    """POST ``body`` as JSON to ``url`` and read the whole answer (a JSON body or an event stream).

    Returns the recorded exchange and the response text (the raw event stream for a stream).
    With ``on_event`` the answer is read as it arrives and each server-sent event is passed on
    (``streaming.display_pass``); the recorded text is the same either way.

    Raises:
        ProviderError: an HTTP error status (the provider's message verbatim, ``status`` set), a
            timeout or a connection failure; always with the exchange as far as it got.
    """
    with http_client(endpoint) as client:
        return _post_json(client, endpoint, url, body, headers, on_event)


def _post_json(
    client: httpx2.Client,
    endpoint: Endpoint,
    url: str,
    body: JSONDict,
    headers: Mapping[str, str],
    on_event: EventListener | None,
) -> tuple[WireExchange, str]:
    request = client.build_request(
        "POST",
        url,
        content=json_bytes(body),
        headers={"content-type": "application/json", **headers},
    )
    started = datetime.now(UTC)
    t0 = time.monotonic()
    try:
        # Always streamed: the deadline bounds reading the body too (``read_streamed``).
        response = client.send(request, stream=True)
    except httpx2.TimeoutException as exc:
        exchange = new_exchange(request, started, t0)
        exchange.status = "timeout"
        exchange.error = f"{type(exc).__name__}: {exc}"
        raise ProviderError(f"the model endpoint timed out: {exchange.error}", exchange=exchange) from exc
    except httpx2.HTTPError as exc:
        exchange = new_exchange(request, started, t0)
        exchange.status = "error"
        exchange.error = f"{type(exc).__name__}: {exc}"
        raise ProviderError(
            f"the model endpoint could not be reached: {exchange.error}", exchange=exchange
        ) from exc
    content = read_streamed(response, on_event, started, t0, endpoint.deadline, endpoint.body_limit)
    exchange = with_response(new_exchange(request, started, t0), response, content)
    if response.status_code >= 400:
        raise status_error(exchange, response.status_code)
    return exchange, exchange.response_body


def bearer_auth(api_key: str) -> dict[str, str]:
    """The ``Authorization: Bearer`` header of a key (OpenAI's formats); none without a key."""
    return {"authorization": f"Bearer {api_key}"} if api_key else {}


def json_bytes(body: JSONDict) -> bytes:
    """``body`` as the JSON bytes of a request: UTF-8, with a lone surrogate (which UTF-8 cannot
    carry; a model may have sent one as ``\\ud800``) written as its JSON escape."""
    text = json.dumps(body, ensure_ascii=False)
    try:
        return text.encode()
    except UnicodeEncodeError:
        return json.dumps(body, ensure_ascii=True).encode()


# The decoder ``json.loads`` uses (its defaults), for ``json_object``'s shortcut.
_DECODER = json.JSONDecoder()


def json_object(text: str) -> JSONDict:
    """``text`` parsed as a JSON object.

    Every event of a streamed reply is read here (62,500 of them for a 1 MB reply), nearly all
    one object with nothing around it: that text is decoded by ``raw_decode`` at once, without
    ``json.loads``' searches for whitespace before and after it (half its time on a short
    event). Any other text, or one that does not decode so, goes through ``json.loads``, which
    reads it or gives its error.

    Raises:
        ValueError: it is not JSON, or not an object.
    """
    if text[:1] == "{":
        try:
            found, end = _DECODER.raw_decode(text)
        except ValueError:
            end = -1
        if end == len(text):
            return cast("JSONDict", found)
    value: JSONValue = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object, got {type(value).__name__}")
    return value


def compact_json(value: JSONValue) -> str:
    """The JSON text of an already parsed value (a tool input or ``args`` object)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class SynthesizedCallIds:
    """Stable ids for the calls of one reply whose wire gave them none (docs/wire-formats.md
    §10.7): the ``index``-th is ``synth_``, the first 16 hex digits of the SHA-256 of
    ``{seed}#{index}``, ``_{index}``. The seed (the reply's body, megabytes for a hostile one) is
    hashed once, on the first call that needs an id, and each id hashes only its ``#index`` on
    top of that."""

    def __init__(self, seed: str) -> None:
        self._seed: str | None = seed
        self._hashed = hashlib.sha256()

    def __call__(self, index: int) -> str:
        if self._seed is not None:
            self._hashed.update(self._seed.encode())
            self._seed = None
        hashed = self._hashed.copy()
        hashed.update(f"#{index}".encode())
        return f"{SYNTHESIZED_ID_PREFIX}{hashed.hexdigest()[:16]}_{index}"


def string_or_none(value: JSONValue) -> str | None:
    return value if isinstance(value, str) else None


def object_or_empty(value: JSONValue) -> JSONDict:
    return value if isinstance(value, dict) else {}


def list_or_empty(value: JSONValue) -> list[JSONValue]:
    return value if isinstance(value, list) else []
