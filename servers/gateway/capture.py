"""Capture every JSON-RPC message by wrapping the SDK transport's streams.

The tap pairs requests with their responses by JSON-RPC id and hands each finished record to
the ``Capture`` of the call that caused it: outgoing messages are attributed through a context
variable set by the calling task; incoming ones through the id they answer (or the progress
token they report on). Whatever belongs to no open call — a late response, a log notification,
a list_changed — is kept as *unclaimed* for the server's own transcript.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import mcp.types as types
from mcp.shared.dispatcher import coerce_request_id
from mcp.shared.message import SessionMessage

from conversations.loop.wire import WireExchange, decode_body, safe_headers
from conversations.redaction import current as current_redactor

current_capture: contextvars.ContextVar[Capture | None] = contextvars.ContextVar("mcp_capture", default=None)


SECRET_MARKER = "[REDACTED:secret]"
Listener = Callable[[WireExchange], None]
STRAY_LABEL = "transport error"


def wire_text(item: SessionMessage) -> str:
    """A message as the client writes it: the stdio transport writes this line (and the tap
    records it), so what is recorded is what crossed the pipe."""
    return item.message.model_dump_json(by_alias=True, exclude_unset=True)


class StrayLine(ValueError):
    """A stdout line that is not a JSON-RPC message; already recorded verbatim by the tap."""


class Released(StrayLine):
    """Sent after a big message so the SDK's read loop lets go of it (see ``_exact_stdio``)."""


# How many answered requests a session remembers, to tell a later answer to one as a duplicate.
REMEMBERED_ANSWERS = 64


def _id_key(value: object) -> str:
    """A JSON-RPC id (or progress token) as the MCP client library correlates it.

    JSON-RPC 2.0 makes ``7`` and ``"7"`` two ids, but the SDK takes them as one
    (``mcp.shared.dispatcher.coerce_request_id``, as the TypeScript SDK does): a server that
    answers request 7 with ``"id": "7"`` has answered it, for the client. The capture pairs as
    the client does, so its record shows the answer the client used (``_id_note`` says the type
    was wrong)."""
    if isinstance(value, str):
        value = coerce_request_id(value)
    return json.dumps(value)


def _id_kind(value: object) -> str:
    return "a string" if isinstance(value, str) else "a number" if isinstance(value, int) else "not an id"


def _id_note(sent: object, answered: object) -> str:
    """What a record says when an answer's id is the request's only as the client library
    correlates ids (``_id_key``), not as JSON-RPC 2.0 compares them."""
    if type(sent) is type(answered) and sent == answered:
        return ""
    return (
        f"the server answered with the id {json.dumps(answered)} ({_id_kind(answered)}) for request id "
        f"{json.dumps(sent)} ({_id_kind(sent)}): JSON-RPC 2.0 counts them as two ids, the MCP client "
        "library as one (coerce_request_id), so this is the answer the client used"
    )


class Capture:
    """The records of one logical gateway operation (a connect, a tools/list, a tools/call).

    ``listener``, when set, is told of each record as it is finished (on the gateway loop: it
    must not block), and before that of each request, in either direction, the moment it is
    sent: the same ``WireExchange`` object, still without its response (``status`` empty), which
    it is told of again once answered. ``features`` answers the server's own requests made during
    the operation. ``watching`` holds the resource URIs whose ``notifications/resources/updated``
    belong to this operation (a subscription); ``session_lost`` is set if the session it runs on
    ends while it is open.
    """

    def __init__(self, listener: Listener | None = None, features: object | None = None) -> None:
        self.records: list[WireExchange] = []
        self.closed = False
        self.listener = listener
        self.features = features
        self.watching: set[str] = set()
        self.session_lost = asyncio.Event()

    def add(self, record: WireExchange) -> None:
        self.records.append(record)
        if self.listener is not None:
            self.listener(record)

    def opened(self, record: WireExchange) -> None:
        """A request of this operation is on the wire and not answered yet."""
        if self.listener is not None and not self.closed:
            self.listener(record)


@dataclass
class _Pending:
    capture: Capture | None
    record: WireExchange
    started: float
    # The request's id as it was sent (its record keeps it as text).
    sent_id: object = None


@dataclass
class Tap:
    """Pairs and routes the messages of one session. Lives on the gateway loop only."""

    body_limit: int
    secrets: tuple[str, ...] = ()
    # The most bytes of one stdout line of a stdio server that are kept (MCP_STDOUT_LINE_LIMIT).
    line_limit: int = 32_000_000
    # The most bytes of one HTTP response body (of one event, on an event stream), decoded, that
    # are read from an HTTP server (RESPONSE_BODY_LIMIT; ``transports._BoundedBody``).
    http_body_limit: int = 32_000_000
    unclaimed: list[WireExchange] = field(default_factory=list)
    # Operations in flight on this session, oldest first: server→client requests go to the newest.
    active: list[Capture] = field(default_factory=list)
    _pending: dict[str, _Pending] = field(default_factory=dict)
    _progress: dict[str, Capture] = field(default_factory=dict)
    _sent_notifications: dict[str, WireExchange] = field(default_factory=dict)
    _answered: dict[str, WireExchange] = field(default_factory=dict)
    # The last REMEMBERED_ANSWERS requests answered, by the key their answer had, with the
    # operation each belonged to: a further answer to one is recorded there, as a duplicate.
    _settled: dict[str, tuple[Capture | None, WireExchange]] = field(default_factory=dict)
    # Lines a stdio server wrote that the transport has read and the session not yet taken
    # (``settle`` waits for them: an answer written right after the one the client used).
    _unseen_lines: int = 0
    # The line each message the stdio transport read was parsed from, until the session takes
    # it (``observe``), by the message's id (the message is kept with it, so the id stays its).
    _lines: dict[int, tuple[SessionMessage, bytes]] = field(default_factory=dict)
    # Over HTTP a notification (and a GET or DELETE) is complete only once its HTTP response
    # arrives: such records are held, with the operation they belong to, until then.
    http: bool = False
    _held: dict[int, tuple[Capture | None, WireExchange]] = field(default_factory=dict)
    # Set whenever a held message gets its HTTP response or the session takes a line read.
    _arrived: asyncio.Event = field(default_factory=asyncio.Event)
    # Whether the server gave the session an id (``Mcp-Session-Id``): only then does a streamable
    # HTTP client open the session's listening stream, a GET, after the handshake. ``listening``
    # is set once that GET has its answer, whatever its status.
    session_id_given: bool = False
    listening: asyncio.Event = field(default_factory=asyncio.Event)
    # stderr read since the last ``take_stderr`` (redacted).
    _stderr: list[str] = field(default_factory=list)
    # Why the server refused us (a 401, or an OAuth flow that failed): set once, read by the pool
    # to fail the connect or the operation at once instead of waiting for a timeout.
    auth_failure: str = ""
    _auth_failed: asyncio.Event | None = None
    # A request on the session timed out (``SessionPool.give_up``): its transport ends the server
    # at once — SIGKILL to a stdio server's process group — instead of asking it to stop.
    hung: bool = False

    def stdout_line(self, raw: bytes) -> SessionMessage | Exception:
        """One line a stdio server wrote on stdout (without its newline), for the session.

        A JSON-RPC message is returned as the SDK's ``SessionMessage``. Anything else is
        recorded verbatim (every byte kept: ``conversations.loop.wire.decode_body``) with the operation it interrupted
        (the newest one open on this session; none: the server's own transcript) and returned
        as a ``StrayLine`` for the SDK to pass over. A message that is not valid UTF-8 is both:
        recorded verbatim, and passed on with its bad bytes replaced, as the SDK would.
        """
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            bad = f"bytes that are not UTF-8 (first at byte {exc.start})"
            try:
                message = SessionMessage(
                    types.jsonrpc_message_adapter.validate_json(raw.decode("utf-8", "replace"), by_name=False)
                )
            except ValueError as parse_error:
                return self._stray(raw, f"{bad}; not a JSON-RPC message: {_first_line(parse_error)}")
            self._stray(raw, f"{bad}; passed on as a message with U+FFFD in their place")
            self._lines[id(message)] = (message, raw)
            return message
        try:
            message = SessionMessage(types.jsonrpc_message_adapter.validate_json(text, by_name=False))
        except ValueError as parse_error:
            return self._stray(raw, f"not a JSON-RPC message: {_first_line(parse_error)}")
        self._lines[id(message)] = (message, raw)
        return message

    def stdout_fragment(self, raw: bytes) -> None:
        """What a server left after its last newline when its stdout closed (it died mid-line)."""
        self._stray(raw, "a line cut short: the server closed stdout before ending it (it exited or crashed)")

    def stdout_overlong(self, kept: bytes, limit: int) -> None:
        """A stdout line passed ``limit`` bytes: its first ``limit`` bytes, recorded now; the rest
        is counted, not kept, and the line is not passed to the session."""
        self._stray(
            kept,
            f"a line longer than {limit:,} bytes (MCP_STDOUT_LINE_LIMIT): its first {limit:,} bytes are "
            "kept here, the rest is counted and not kept, and the line is not read as a message",
        )

    def stdout_overlong_end(self, total: int, *, ended: bool) -> None:
        """Where a line cut by ``stdout_overlong`` ended, and how long it was."""
        how = "ended" if ended else "was never ended (stdout closed)"
        self._stray(b"", f"the line cut at MCP_STDOUT_LINE_LIMIT {how} after {total:,} bytes")

    def http_body_cut(self, *, limit: int, wire: int, encoding: str, what: str) -> None:
        """An HTTP response body (or one event of an event stream) passed ``limit`` decoded
        bytes: it was not read further (nothing of it is kept: the SDK had not parsed it)."""
        encoded = f" ({encoding}-encoded)" if encoding and encoding != "identity" else ""
        self._stray(
            b"",
            f"{what} passed the limit of {limit:,} bytes (RESPONSE_BODY_LIMIT) and was not read further; "
            f"{wire:,} bytes{encoded} had arrived over the wire",
        )

    def _stray(self, raw: bytes, why: str) -> StrayLine:
        record = WireExchange(
            channel="mcp",
            label=STRAY_LABEL,
            started_at=datetime.now(UTC),
            direction="server",
            response_body=self.mask(decode_body(raw)),
            status="error",
            error=f"{len(raw)} bytes on stdout that the session could not use: {why}",
        )
        self._route(self.newest_active(), record)
        return StrayLine(why)

    def stderr_text(self, raw: bytes) -> bytes:
        """Keep a piece of a server's stderr for the operation it belongs to; returns it redacted,
        as it may be written to the stderr file."""
        text = current_redactor().text(self.mask(decode_body(raw)))
        self._stderr.append(text)
        return text.encode("utf-8", errors="surrogateescape")

    def auth_failed(self) -> asyncio.Event:
        """Set when ``auth_failure`` is (created on the gateway loop on first use)."""
        if self._auth_failed is None:
            self._auth_failed = asyncio.Event()
        return self._auth_failed

    def fail_auth(self, message: str) -> None:
        if not self.auth_failure:
            self.auth_failure = self.mask(message)
        self.auth_failed().set()

    def flow_record(self, record: WireExchange, secrets: tuple[str, ...]) -> None:
        """One recorded step of an OAuth flow, for the operation it serves; the credentials it
        obtained are masked from here on in everything the tap records."""
        self.learn(secrets)
        capture = current_capture.get()
        self._route(capture if capture is not None and not capture.closed else self.newest_active(), record)

    def learn(self, secrets: tuple[str, ...]) -> None:
        """Mask ``secrets`` (credentials an OAuth flow obtained) in everything recorded from now on."""
        fresh = [value for value in secrets if len(value) >= 6 and value not in self.secrets]
        if fresh:
            self.secrets = tuple(sorted({*self.secrets, *fresh}, key=len, reverse=True))

    def take_stderr(self) -> str:
        """The stderr kept since the last call (each piece is taken once)."""
        text, self._stderr = "".join(self._stderr), []
        return text

    def _hold(self, record: WireExchange) -> None:
        self._held[id(record)] = (current_capture.get(), record)

    def _release_orphans(self) -> None:
        """Held records whose operation has ended, or that belong to none, go out as they are."""
        for key, (capture, record) in list(self._held.items()):
            if capture is None or capture.closed:
                del self._held[key]
                self.unclaimed.append(record)

    def _route(self, capture: Capture | None, record: WireExchange) -> None:
        if capture is None or capture.closed:
            self.unclaimed.append(record)
        else:
            capture.add(record)

    def newest_active(self) -> Capture | None:
        """The operation a server→client request most likely belongs to.

        stdio gives no hint which request a server's own request serves; the caller's context
        does when the SDK runs the callback in the calling task (2026 input-required rounds).
        """
        current = current_capture.get()
        if current is not None and not current.closed and current in self.active:
            return current
        open_ones = [capture for capture in self.active if not capture.closed]
        # A subscription waits for updates, not for questions: a call open beside it comes first.
        calls = [capture for capture in open_ones if not capture.watching]
        return (calls or open_ones)[-1] if open_ones else None

    def mask(self, text: str) -> str:
        """``text`` with every configured secret value replaced by a marker."""
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, SECRET_MARKER)
        return text

    def _body(self, message: dict[str, Any]) -> str:
        """The message as the client library parsed it, serialised (what an HTTP server sent:
        the SDK reads its bodies and events itself), masked and cut."""
        return self._cut(self.mask(json.dumps(message, ensure_ascii=False, separators=(",", ":"))))

    def _exact_body(self, text: str, message: dict[str, Any]) -> str:
        """``text``, the message as it crossed the wire, masked and cut.

        A secret written with JSON escapes (``\\u0073ecret``, ``a\\/b``) is not in the text as
        itself, so the mask would miss it: when the text has escapes and its parsed value, masked,
        still holds a secret, the record keeps the message as parsed (``_body``) instead."""
        masked = self.mask(text)
        if self.secrets and "\\" in masked:
            try:
                value = json.dumps(json.loads(masked), ensure_ascii=False)
            except ValueError:
                return self._body(message)
            if any(secret in value for secret in self.secrets):
                return self._body(message)
        return self._cut(masked)

    def _cut(self, text: str) -> str:
        if len(text) > self.body_limit:
            return text[: self.body_limit] + f"\n… [cut: {len(text)} characters in all]"
        return text

    def _headers(self, headers: Any) -> dict[str, str]:
        return {name: self.mask(value) for name, value in safe_headers(headers.multi_items()).items()}

    def http_request(self, method: str, path: str, headers: Any, content: bytes) -> WireExchange | None:
        """Attach an HTTP request's headers to the JSON-RPC record its body carries.

        A request without a JSON-RPC body (the GET stream, DELETE on close) becomes a record of
        its own, returned for the response hook to complete.
        """
        message = _json_object(content)
        record = self._record_for(message)
        if record is not None:
            record.request_headers = {":method": method, ":path": path, **self._headers(headers)}
            return record
        if message is not None:
            return None
        record = WireExchange(
            channel="mcp",
            label=f"{method} {path}",
            started_at=datetime.now(UTC),
            request_headers={":method": method, ":path": path, **self._headers(headers)},
        )
        self._hold(record)
        return record

    def http_response(self, record: WireExchange | None, status: int, headers: Any) -> None:
        if record is None:
            return
        if "mcp-session-id" in headers:
            self.session_id_given = True
        record.response_headers = {":status": str(status), **self._headers(headers)}
        if record.label.startswith(("GET ", "DELETE ")):
            record.status = str(status)
            record.direction = "client"
        if record.label.startswith("GET "):
            self.listening.set()
        held = self._held.pop(id(record), None)
        if held is not None:
            self._route(held[0], record)
            self._arrived.set()

    def lines_read(self, count: int) -> None:
        """The stdio transport read ``count`` more complete stdout lines."""
        self._unseen_lines += count

    def line_taken(self) -> None:
        """The session took one of those lines (or the transport dropped it: ``_LineCutter``)."""
        self._unseen_lines = max(0, self._unseen_lines - 1)
        self._arrived.set()

    async def settle(self, capture: Capture, seconds: float) -> None:
        """Wait, at most ``seconds``, until what already arrived for ``capture`` is recorded.

        Over stdio: the lines the server wrote that the transport has read and the session not yet
        taken. A server may write a second answer right behind the one the client used; taken
        after the operation ended it would go to the server's transcript, not to the operation
        as a duplicate. Over HTTP: the responses to ``capture``'s held messages. The SDK's send
        of a notification returns before its POST is answered (202), so an operation that ends
        with one (the handshake's notifications/initialized, a cancel) would otherwise record it
        without its HTTP status.
        """
        deadline = time.monotonic() + seconds
        while self._unseen_lines > 0 or any(owner is capture for owner, _ in self._held.values()):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), remaining)
            except TimeoutError:
                return

    def _record_for(self, message: dict[str, Any] | None) -> WireExchange | None:
        if message is None:
            return None
        msg_id = message.get("id")
        if msg_id is not None and "method" in message:
            pending = self._pending.get(f"send:{_id_key(msg_id)}")
            return pending.record if pending is not None else None
        if msg_id is not None:
            # Our response to a server→client request.
            return self._answered.get(_id_key(msg_id))
        method = message.get("method")
        return self._sent_notifications.get(str(method)) if method is not None else None

    def observe(self, direction: str, item: object) -> None:
        """Record one item seen on a stream (``send`` = client→server, ``recv`` = server→client)."""
        now = time.monotonic()
        wall = datetime.now(UTC)
        if (
            direction == "recv"
            and isinstance(item, SessionMessage | StrayLine)
            and not isinstance(item, Released)
        ):
            self.line_taken()
        if isinstance(item, StrayLine):
            return  # recorded verbatim when it was read
        if not isinstance(item, SessionMessage):
            # The SDK hands transport failures (e.g. a non-JSON line on stdout) down the stream.
            record = WireExchange(
                channel="mcp",
                label="transport error",
                started_at=wall,
                direction="server",
                response_body=self.mask(repr(item)),
                status="error",
                error=self.mask(str(item)),
            )
            self.unclaimed.append(record) if direction == "recv" else self._route(
                current_capture.get(), record
            )
            return
        text = wire_text(item)
        message = json.loads(text)
        line = self._lines.pop(id(item), None) if direction == "recv" else None
        if direction == "send":
            body = self._exact_body(text, message)
        elif line is not None and line[0] is item:
            body = self._exact_body(decode_body(line[1]), message)
        else:
            body = self._body(message)
        del line
        method = message.get("method")
        msg_id = message.get("id")
        key = f"{direction}:{_id_key(msg_id)}"
        is_request = method is not None and msg_id is not None
        is_response = method is None and msg_id is not None
        if is_request:
            record = WireExchange(
                channel="mcp",
                label=str(method),
                started_at=wall,
                jsonrpc_id=str(msg_id),
                direction="client" if direction == "send" else "server",
                request_body=body,
            )
            capture = current_capture.get() if direction == "send" else self.newest_active()
            self._pending[key] = _Pending(capture, record, now, sent_id=msg_id)
            token = (message.get("params") or {}).get("_meta", {}).get("progressToken")
            if token is not None and capture is not None:
                self._progress[_id_key(token)] = capture
            if capture is not None:
                capture.opened(record)
            return
        if is_response:
            counterpart = f"{'send' if direction == 'recv' else 'recv'}:{_id_key(msg_id)}"
            pending = self._pending.pop(counterpart, None)
            if pending is None and counterpart in self._settled:
                self._duplicate(direction, msg_id, message, body, wall, *self._settled[counterpart])
                return
            if pending is None:
                # Linked to the call in flight when it came (its step shows it; the server's
                # transcript has it through that call); with none in flight, the transcript's.
                target = self.newest_active() if direction == "recv" else None
                during = " (it came while this operation was in flight)" if target is not None else ""
                error = f"the id matches no request in flight{during}"
                self._route(
                    target,
                    _lone_response("response to unknown id", direction, msg_id, message, body, wall, error),
                )
                return
            record = pending.record
            record.response_body = body
            record.duration_ms = (now - pending.started) * 1000
            if direction == "send":
                self._answered = {_id_key(msg_id): record}
            note = _id_note(pending.sent_id, msg_id)
            if "error" in message:
                record.status = "error"
                record.error = "; ".join(
                    filter(None, (self.mask(str(message["error"].get("message", ""))), note))
                )
            else:
                record.status = "ok"
                record.error = note
            self._settled.pop(counterpart, None)
            self._settled[counterpart] = (pending.capture, record)
            if len(self._settled) > REMEMBERED_ANSWERS:
                del self._settled[next(iter(self._settled))]
            self._route(pending.capture, record)
            return
        # A notification.
        record = WireExchange(
            channel="mcp",
            label=str(method),
            started_at=wall,
            direction="client" if direction == "send" else "server",
        )
        if direction == "send":
            record.request_body = body
            self._sent_notifications[str(method)] = record
            if self.http:
                self._hold(record)
            else:
                self._route(current_capture.get(), record)
            return
        record.response_body = body
        params = message.get("params") or {}
        token = params.get("progressToken")
        target = self._progress.get(_id_key(token)) if token is not None else None
        if target is None and method == "notifications/resources/updated":
            target = self._watcher(str(params.get("uri", "")))
        if target is None and method == "notifications/message":
            # A log line sent while an operation runs is shown with it (it also reaches the
            # server's transcript through that operation).
            target = self.newest_active()
        self._route(target, record)

    def _duplicate(
        self,
        direction: str,
        msg_id: object,
        message: dict[str, Any],
        body: str,
        wall: datetime,
        owner: Capture | None,
        first: WireExchange,
    ) -> None:
        """A further answer to a request already answered: recorded with that request's operation
        while it is open (else with the one in flight, else the server's transcript). The client
        library used the first answer: it drops a second one, whatever its id's type."""
        target = owner if owner is not None and not owner.closed else None
        if target is None and direction == "recv":
            target = self.newest_active()
        where = "" if target is owner else " (it came after that request's operation ended)"
        error = (
            f"request {first.jsonrpc_id} ({first.label}) was already answered{where}: the client "
            "library used the first answer and dropped this one"
        )
        self._route(
            target, _lone_response("duplicate response", direction, msg_id, message, body, wall, error)
        )

    def _watcher(self, uri: str) -> Capture | None:
        """The open subscription operation following ``uri``, newest first."""
        for capture in reversed(self.active):
            if not capture.closed and uri in capture.watching:
                return capture
        return None

    def session_over(self) -> None:
        """The session ended: operations still open on it are told (a subscription stops waiting)."""
        for capture in self.active:
            capture.session_lost.set()

    def finish(self, capture: Capture) -> None:
        """Close a capture: requests of it still unanswered are recorded as such, and messages
        still waiting for their HTTP response are recorded without it."""
        for key, pending in list(self._pending.items()):
            if pending.capture is capture:
                del self._pending[key]
                pending.record.status = "no response"
                pending.record.duration_ms = (time.monotonic() - pending.started) * 1000
                capture.add(pending.record)
        for held_key, (owner, record) in list(self._held.items()):
            if owner is capture:
                del self._held[held_key]
                capture.add(record)
        for token, owner in list(self._progress.items()):
            if owner is capture:
                del self._progress[token]
        capture.closed = True
        self._release_orphans()


def _lone_response(
    label: str, direction: str, msg_id: Any, message: dict[str, Any], body: str, wall: datetime, error: str
) -> WireExchange:
    """A response that answers no request in flight (``label`` says how), as its own record."""
    return WireExchange(
        channel="mcp",
        label=label,
        started_at=wall,
        jsonrpc_id=str(msg_id),
        direction="server" if direction == "recv" else "client",
        response_body=body,
        status="error" if "error" in message else "ok",
        error=error,
    )


def _first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0][:300] if str(error).strip() else type(error).__name__


def _json_object(content: bytes) -> dict[str, Any] | None:
    if not content:
        return None
    try:
        value = json.loads(content)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class _TapRead:
    """Mirrors the SDK's read stream, reporting each item it yields."""

    def __init__(self, inner: Any, observe: Callable[[str, object], None]) -> None:
        self._inner = inner
        self._observe = observe

    async def receive(self) -> Any:
        item = await self._inner.receive()
        self._observe("recv", item)
        return item

    def __aiter__(self) -> _TapRead:
        return self

    async def __anext__(self) -> Any:
        item = await self._inner.__anext__()
        self._observe("recv", item)
        return item

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _TapRead:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> Any:
        return await self._inner.__aexit__(*exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _TapWrite(_TapRead):
    """Mirrors the SDK's write stream, reporting each item before it is sent."""

    async def send(self, item: Any, /) -> None:
        self._observe("send", item)
        await self._inner.send(item)


@asynccontextmanager
async def tapped(
    transport: AbstractAsyncContextManager[tuple[Any, Any]], tap: Tap
) -> AsyncIterator[tuple[Any, Any]]:
    """The same transport, with both message streams reporting to ``tap``."""
    async with transport as (read_stream, write_stream):
        yield _TapRead(read_stream, tap.observe), _TapWrite(write_stream, tap.observe)
