"""Pass one HTTP request through to an upstream and its answer back, as it arrives, and capture both.

The host's request goes out with its own headers (its credentials included, each the bytes the
host sent) less the hop-by-hop ones, and no others (no client default, no stored cookie: the
proxy keeps nothing of one call for the next), its body streamed on as it arrives; the
upstream's answer comes back with its status, its headers (less the hop-by-hop ones) and its
body bytes exactly as they came over the wire — a compressed body stays compressed, a stream is
handed on chunk by chunk, never gathered first. Beside the bytes that pass, a
``Capture`` keeps what the record needs: the body with its content-encoding undone, at most
``limit`` bytes of it (the rest is passed on and only counted; the record is marked cut), for
the request's body as for the answer's.

When the answer has ended — completely, broken off by the upstream, or abandoned by a host that
went away — ``on_done`` gets the exchange as far as it got, in a thread of this module's own
(``FINISHING``): the captured bodies are joined and decoded there, not on the event loop, where
a 1 MB streamed reply's 8 MB of events cost the host's last bytes about 15 ms of copying and
decoding (bench P13; decision 0400). ``on_done`` must not block long: ``llm`` queues the
record for its recorder threads. A failure in it never reaches the host.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
import zlib
from collections.abc import AsyncGenerator, AsyncIterable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from http.cookiejar import CookieJar, DefaultCookiePolicy
from weakref import WeakKeyDictionary

import httpx2
from django.http import HttpRequest, HttpResponseBase, JsonResponse, StreamingHttpResponse

from conversations.loop.wire import WireExchange, decode_body

logger = logging.getLogger(__name__)

# RFC 9110 §7.6.1: meaningful only for one connection, never forwarded. ``host`` and
# ``content-length`` are not hop-by-hop but are set anew for the upstream's connection by the client.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
# Headers addressed to the inspector, not to the upstream: never forwarded.
INSPECTOR_HEADERS = frozenset({"x-inspector-session"})
_NOT_FORWARDED = HOP_BY_HOP | INSPECTOR_HEADERS | {"host", "content-length"}

# The upstream's connection: a host waits on a model for minutes between two chunks at most;
# connecting and sending are quick or the upstream is down.
CONNECT_TIMEOUT_SECONDS = 10.0
WRITE_TIMEOUT_SECONDS = 60.0
# Concurrent upstream connections of one web process (a streamed reply holds one throughout).
MAX_CONNECTIONS = 1000
MAX_KEEPALIVE = 100

ExchangeDone = Callable[[WireExchange], None]

# Where a finished exchange's bodies are joined and decoded and ``on_done`` is called: one thread
# (the work is a copy and a decode per body, far less than the record's own). What waits for it
# is bounded: past ``FINISHING_LIMIT`` bytes of captured bodies waiting, an exchange is finished
# on the event loop as it was before (the record's own queue is bounded by ``pending``).
FINISHING = ThreadPoolExecutor(max_workers=1, thread_name_prefix="proxy-capture")
FINISHING_LIMIT = 64_000_000
_finishing_lock = threading.Lock()
_finishing = {"count": 0, "bytes": 0}


def settled() -> bool:
    """No finished exchange is waiting to be handed to its ``on_done`` (then every one has been)."""
    with _finishing_lock:
        return _finishing["count"] == 0


_clients: WeakKeyDictionary[asyncio.AbstractEventLoop, httpx2.AsyncClient] = WeakKeyDictionary()


def no_cookies() -> CookieJar:
    """A jar that keeps no cookie and gives none: its policy allows no domain at all (stdlib
    ``DefaultCookiePolicy``, ``allowed_domains``: the only domains cookies are set for or
    returned to)."""
    return CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))


def upstream_client(read_timeout: float) -> httpx2.AsyncClient:
    """The process's client for upstreams, one per event loop (a connection pool belongs to one
    loop), kept for the loop's life so connections are reused across requests.

    Every host's calls share it, so it keeps nothing of one call for the next: its cookie jar
    refuses every cookie (an upstream's ``Set-Cookie`` still goes back to the host that was
    answered, and the host's own ``Cookie`` goes on as sent), and requests are built without
    it (``outgoing``), so none of its default headers is added."""
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None:
        client = httpx2.AsyncClient(
            cookies=no_cookies(),
            timeout=httpx2.Timeout(
                connect=CONNECT_TIMEOUT_SECONDS,
                read=read_timeout,
                write=WRITE_TIMEOUT_SECONDS,
                pool=CONNECT_TIMEOUT_SECONDS,
            ),
            limits=httpx2.Limits(max_connections=MAX_CONNECTIONS, max_keepalive_connections=MAX_KEEPALIVE),
            # The host's own redirects and encodings are its business: pass them on as they are.
            follow_redirects=False,
            trust_env=False,
        )
        _clients[loop] = client
    return client


def outgoing(
    method: str, url: str, headers: list[tuple[bytes, bytes]], content: Body | None = None
) -> httpx2.Request:
    """The request to the upstream with exactly ``headers``, ``Host`` and the body's framing
    (``Content-Length``, or chunked for a stream of unknown length) added as for any request.
    Built on its own, not by the client's ``build_request``, which would merge in the client's
    defaults (``Accept``, ``Accept-Encoding``, ``User-Agent``, ``Connection``): the upstream
    would then compress an answer the host never asked to be compressed. ``send`` sends a
    request as it is, with the client's timeouts."""
    return httpx2.Request(method, url, headers=headers, content=content)


def forwarded_headers(
    headers: Iterable[tuple[str, str]], *, streamed: bool = False
) -> list[tuple[bytes, bytes]]:
    """The host's request headers as they go to the upstream: all, less hop-by-hop and ours, as
    the bytes the host sent (``headers`` are text as servers give it, each byte one Latin-1
    character: RFC 9110 §5.5). A ``streamed`` body keeps the host's ``Content-Length`` (the
    client frames a body it has whole itself)."""
    dropped = _NOT_FORWARDED - {"content-length"} if streamed else _NOT_FORWARDED
    return [
        (name.encode("latin-1"), value.encode("latin-1"))
        for name, value in headers
        if name.lower() not in dropped
    ]


def passed_back(headers: httpx2.Headers) -> list[tuple[str, str]]:
    """The upstream's response headers as they go to the host: all, less hop-by-hop (the host's
    connection has its own framing), each the bytes the upstream sent read as Latin-1 (one
    character a byte), so the host gets them back byte for byte whatever their encoding."""
    return [
        (name.decode("latin-1"), value.decode("latin-1"))
        for name, value in headers.raw
        if name.lower().decode("latin-1") not in HOP_BY_HOP
    ]


# A piece of a body smaller than this is copied into the record's buffer; a bigger one is kept
# as it came.
SMALL_PIECE = 4096


# What zlib reads for each encoding the record inflates (its ``wbits``): a gzip member (RFC 1952),
# or a zlib stream, which is what HTTP's ``deflate`` is (RFC 9110 §8.4.1.2).
INFLATED = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
# Where a member ends, zlib copies what follows it in its input (``unused_data``): a piece goes
# to zlib whole, but once a member has ended in it the rest goes this much at a time, so a piece
# of many tiny members costs a copy of this size per member, not of the rest of the piece.
INFLATE_STEP = 4096
_NOT_PADDING = re.compile(rb"[^\x00]")


class Capture:
    """What the record keeps of a body passing by: at most ``limit`` bytes, content-encoding undone.

    ``gzip`` and ``deflate`` are inflated (never more than one byte past what is kept, so a bomb
    never expands whole), every member of them: a gzip body may be several members one after the
    other (RFC 1952 §2.2), each decoded in turn as gzip(1) and browsers do, and a deflate body
    several zlib streams likewise; zero bytes after a member are padding, skipped as gzip(1)
    skips them. Bytes that do not inflate are kept as they came from there on, and ``note`` says
    so, as it does for another encoding, kept as it came. Past the limit the bytes are only
    counted, and ``note`` says where the record was cut.
    """

    def __init__(self, limit: int, encoding: str = "") -> None:
        self.limit = limit
        self.encoding = encoding.strip().lower()
        self.wire_bytes = 0
        self.cut = False
        # Big pieces as they came (no copy on the byte path), small ones gathered in ``_small``
        # (a stream of tiny pieces costs no list entry each); joined once for the record.
        self._kept: list[bytes] = []
        self._small = bytearray()
        self._size = 0
        self._wbits = INFLATED.get(self.encoding, 0)
        self._inflate: zlib._Decompress | None = None  # noqa: SLF001 (the stdlib's own type name)
        # A member has ended and the next one has not begun.
        self._between = False
        self._undecoded = ""
        if self._wbits:
            self._inflate = zlib.decompressobj(self._wbits)
        elif self.encoding not in {"", "identity"}:
            self._undecoded = f"its content-encoding {self.encoding!r} is kept as it came (not decoded)"

    def feed(self, data: bytes) -> None:
        self.wire_bytes += len(data)
        if self.cut:
            return
        if self._inflate is not None:
            data = self._inflated(data)
        room = self.limit - self._size
        if len(data) > room:
            data = data[:room]
            self.cut = True
        self._size += len(data)
        if len(data) < SMALL_PIECE:
            self._small += data
            return
        if self._small:
            self._kept.append(bytes(self._small))
            self._small.clear()
        self._kept.append(data)

    def _inflated(self, data: bytes) -> bytes:
        """``data`` inflated, member after member, until it is used up or the output is one byte
        past the room left (then ``feed`` cuts the record, and nothing more is inflated)."""
        inflate = self._inflate
        if inflate is None:
            return data
        view = memoryview(data)
        pieces: list[bytes] = []
        wanted = self.limit - self._size + 1
        at, size = 0, len(data)
        try:
            while at < len(data) and wanted > 0:
                if self._between:
                    found = _NOT_PADDING.search(data, at)
                    if found is None:
                        break
                    at = found.start()
                    inflate = self._inflate = zlib.decompressobj(self._wbits)
                    self._between = False
                step = view[at : at + size]
                piece = inflate.decompress(step, wanted)
                pieces.append(piece)
                wanted -= len(piece)
                if inflate.eof:
                    self._between = True
                    at += len(step) - len(inflate.unused_data)
                    size = INFLATE_STEP
                else:
                    at += len(step)
        except zlib.error as exc:
            self._inflate = None
            self._undecoded = (
                f"its {self.encoding} body could not be inflated ({exc}); the rest is kept as it came"
            )
            pieces.append(data[at:])
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    @property
    def kept(self) -> int:
        """Bytes the record keeps (``body``'s length)."""
        return self._size

    @property
    def body(self) -> bytes:
        return b"".join([*self._kept, self._small])

    @property
    def note(self) -> str:
        notes = []
        if self.cut:
            notes.append(
                f"the record was cut at {self.limit:,} bytes (RESPONSE_BODY_LIMIT); the whole body, "
                f"{self.wire_bytes:,} bytes over the wire, was passed on"
            )
        if self._undecoded:
            notes.append(self._undecoded)
        return "; ".join(notes)


def _label(request: httpx2.Request) -> str:
    return f"{request.method} {request.url.path}"


class HostGone(Exception):
    """The host went away before its request body had come whole (raised by a body it sends)."""


Body = bytes | AsyncIterable[bytes]


class _Sent:
    """The host's body on its way to the upstream, as it arrives: each piece handed on as it came
    and fed to ``capture`` (which keeps at most its limit), never gathered whole."""

    def __init__(self, body: AsyncIterable[bytes], capture: Capture) -> None:
        self.pieces = aiter(body)
        self.capture = capture

    async def __aiter__(self) -> AsyncGenerator[bytes, None]:
        async for piece in self.pieces:
            self.capture.feed(piece)
            yield piece

    async def rest(self) -> None:
        """What the upstream did not take (it could not be reached), read for the record."""
        async for piece in self.pieces:
            self.capture.feed(piece)


def _request_note(capture: Capture) -> str:
    return f"request body: {capture.note}" if capture.cut else ""


def error_body(kind: str, message: str) -> dict[str, dict[str, str]]:
    """A JSON error in the shape all three formats' SDKs read (``error.message``, ``error.type``)."""
    return {"error": {"type": kind, "message": message}}


@dataclass
class Answer:
    """The upstream's answer as it goes to the host: its status, its headers less the hop-by-hop
    ones, and its body bytes as they arrive (``error`` set instead when the upstream could not be
    reached: the host gets that JSON with ``status``)."""

    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: AsyncGenerator[bytes, None] | None = None
    error: dict[str, dict[str, str]] | None = None


async def pass_on(
    method: str,
    url: str,
    headers: Iterable[tuple[str, str]],
    body: Body,
    *,
    limit: int,
    read_timeout: float,
    on_done: ExchangeDone,
) -> Answer | None:
    """Send the host's request (``method``, ``headers`` as the host sent them, ``body``: bytes,
    or its pieces as they arrive, which go on as they come) on to ``url``; the answer's body is
    passed on as the upstream sends it. The record keeps at most ``limit`` bytes of each body.

    An upstream that cannot be reached gets the host a 502 (a 504 when it did not answer in
    time) with a JSON body saying why. ``on_done`` is called once with the exchange: when the
    body has ended, broken off, or the host went away (then it holds what had passed). None: the
    host went away while sending its body (``HostGone``), and there is nobody to answer.
    """
    client = upstream_client(read_timeout)
    sent = Capture(limit)
    streamed = not isinstance(body, bytes)
    if isinstance(body, bytes):
        sent.feed(body)
        content: bytes | _Sent = body
    else:
        content = _Sent(body, sent)
    request = outgoing(method, url, forwarded_headers(headers, streamed=streamed), content)
    started = datetime.now(UTC)
    t0 = time.monotonic()
    exchange = WireExchange(
        channel="llm",
        label=_label(request),
        started_at=started,
        request_headers={name.lower(): value for name, value in request.headers.multi_items()},
    )
    try:
        upstream = await client.send(request, stream=True)
    except (httpx2.HTTPError, HostGone) as exc:
        gone = isinstance(exc, HostGone)
        if isinstance(content, _Sent) and not gone:
            try:
                await content.rest()
            except HostGone:
                gone = True
        exchange.duration_ms = (time.monotonic() - t0) * 1000
        if gone:
            exchange.status = "error"
            exchange.error = "; ".join(
                filter(
                    None,
                    [
                        f"the host went away while sending its request body; the {sent.wire_bytes:,} "
                        "bytes received until then are kept",
                        _request_note(sent),
                    ],
                )
            )
            _done(on_done, exchange, request=sent)
            return None
        timed_out = isinstance(exc, httpx2.TimeoutException)
        exchange.status = "timeout" if timed_out else "error"
        exchange.error = "; ".join(
            filter(
                None, [f"the upstream could not be reached: {type(exc).__name__}: {exc}", _request_note(sent)]
            )
        )
        _done(on_done, exchange, request=sent)
        where = f"{request.url.scheme}://{request.url.netloc.decode('ascii', 'replace')}"
        message = (
            f"the inspector's proxy could not reach the upstream {where}: {type(exc).__name__}"
            f"{' (timed out)' if timed_out else ''}"
        )
        return Answer(
            status=504 if timed_out else 502,
            reason="",
            headers=[("content-type", "application/json")],
            error=error_body("upstream_unreachable", message),
        )
    capture = Capture(limit, upstream.headers.get("content-encoding", ""))
    return Answer(
        status=upstream.status_code,
        reason=upstream.reason_phrase,
        headers=passed_back(upstream.headers),
        body=_passed(upstream, (sent, capture), exchange, _request_note(sent), t0, on_done),
    )


def host_gone_first(method: str, url: str, headers: Iterable[tuple[str, str]], on_done: ExchangeDone) -> None:
    """Record a call whose host went away before the first piece of its body came: nothing was
    forwarded (the upstream never saw it), and the record says so."""
    request = outgoing(method, url, forwarded_headers(headers))
    exchange = WireExchange(
        channel="llm",
        label=_label(request),
        started_at=datetime.now(UTC),
        request_headers={name.lower(): value for name, value in request.headers.multi_items()},
        status="error",
        error="the host went away before sending its request body; nothing was forwarded",
        duration_ms=0.0,
    )
    _done(on_done, exchange)


async def _request_pieces(request: HttpRequest, size: int = 65_536) -> AsyncGenerator[bytes, None]:
    while piece := request.read(size):
        yield piece


async def relay(
    request: HttpRequest,
    url: str,
    *,
    limit: int,
    read_timeout: float,
    on_done: ExchangeDone,
) -> HttpResponseBase:
    """``pass_on`` for a Django view: ``request`` sent on to ``url``, the answer as a streaming
    response (the LLM routes themselves are served by ``inspector.proxy_front``)."""
    answer = await pass_on(
        request.method or "POST",
        url,
        request.headers.items(),
        _request_pieces(request),
        limit=limit,
        read_timeout=read_timeout,
        on_done=on_done,
    )
    if answer is None:  # Django has the body whole before the view runs: never the case here
        return JsonResponse(error_body("host_gone", "the request body did not arrive whole"), status=400)
    if answer.body is None:
        return JsonResponse(answer.error, status=answer.status)
    response = StreamingHttpResponse(answer.body, status=answer.status, reason=answer.reason or None)
    if not any(name.lower() == "content-type" for name, _ in answer.headers):
        del response["Content-Type"]
    for name, value in answer.headers:
        # Django keeps one value per name; a repeated header (Set-Cookie aside) joins with a comma.
        response[name] = (
            f"{response[name]}, {value}" if name in response and name.lower() != "content-type" else value
        )
    return response


async def _passed(
    upstream: httpx2.Response,
    captures: tuple[Capture, Capture],
    exchange: WireExchange,
    request_note: str,
    t0: float,
    on_done: ExchangeDone,
) -> AsyncGenerator[bytes, None]:
    problem = ""
    sent, capture = captures
    # The last bytes of an event stream as they came (none decoded: an encoded one is not read).
    events = _is_event_stream(upstream.headers)
    tail = b""
    try:
        async for chunk in upstream.aiter_raw():
            capture.feed(chunk)
            if events and chunk:
                tail = (tail + chunk[-4:])[-4:]
            yield chunk
        if tail and not _ends_an_event(tail):
            problem = (
                "the event stream ended mid-event: the upstream closed it with no blank line after "
                "its last event"
            )
    except httpx2.HTTPError as exc:
        problem = f"the upstream stopped sending mid-body: {type(exc).__name__}: {exc}"
        raise
    except (asyncio.CancelledError, GeneratorExit):
        kept = (
            f"the record keeps the first {capture.kept:,} bytes of it"
            if capture.cut
            else "the record keeps them all"
        )
        problem = f"the host went away mid-body; {capture.wire_bytes:,} bytes had passed until then, {kept}"
        raise
    finally:
        exchange.status = str(upstream.status_code)
        exchange.response_headers = {name.lower(): value for name, value in upstream.headers.multi_items()}
        response_note = f"response body: {capture.note}" if capture.note else ""
        exchange.error = "; ".join(filter(None, [problem, request_note, response_note]))
        exchange.duration_ms = (time.monotonic() - t0) * 1000
        _done(on_done, exchange, request=sent, response=capture)
        try:
            await upstream.aclose()
        except Exception:  # closing a broken connection: nothing left to pass or record
            logger.debug("closing an upstream response failed", exc_info=True)


def _is_event_stream(headers: httpx2.Headers) -> bool:
    encoding = headers.get("content-encoding", "").strip().lower()
    return headers.get("content-type", "").lower().startswith("text/event-stream") and encoding in (
        "",
        "identity",
    )


def _ends_an_event(tail: bytes) -> bool:
    """``tail`` (an event stream's last bytes) ends with a blank line: two line ends (CRLF, LF
    or CR each), which is where an event ends (HTML Living Standard, "Server-sent events")."""
    if tail.endswith(b"\r\n"):
        rest = tail[:-2]
    elif tail.endswith((b"\n", b"\r")):
        rest = tail[:-1]
    else:
        return False
    return rest.endswith((b"\n", b"\r"))


def _done(
    on_done: ExchangeDone,
    exchange: WireExchange,
    *,
    request: Capture | None = None,
    response: Capture | None = None,
) -> None:
    """Hand ``exchange`` to ``on_done``, its bodies taken from the ``request`` and ``response``
    captures, in the ``FINISHING`` thread. From the event loop, two turns of it later: the last
    chunk sent to the host waits in the server's buffer for the loop's next turn (daphne writes
    when the socket is writable), and a thread copying megabytes holds the interpreter for the
    whole copy, so it starts only once that write has had its turn."""
    size = sum(capture.kept for capture in (request, response) if capture is not None)

    def finish() -> None:
        try:
            if request is not None:
                exchange.request_body = decode_body(request.body)
            if response is not None:
                exchange.response_body = decode_body(response.body)
            on_done(exchange)
        except Exception:  # the host's answer never depends on the record
            logger.exception("recording a proxied exchange failed: %s", exchange.label)

    def finish_counted() -> None:
        try:
            finish()
        finally:
            with _finishing_lock:
                _finishing["count"] -= 1
                _finishing["bytes"] -= size

    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    with _finishing_lock:
        room = loop is not None and _finishing["bytes"] + size <= FINISHING_LIMIT
        if room:
            _finishing["count"] += 1
            _finishing["bytes"] += size
    if not room or loop is None:
        finish()
        return
    loop.call_soon(_next_turn, loop, finish_counted)


def _next_turn(loop: asyncio.AbstractEventLoop, job: Callable[[], None]) -> None:
    loop.call_soon(FINISHING.submit, job)
