"""Pooled MCP sessions on one event loop in one background thread per process.

This is the only place where async meets sync: callers in plain threads (the in-process runner,
Celery's thread pool, management commands) submit coroutines with ``GatewayLoop.run``. Each
session is entered and exited by its own holder task (anyio cancel scopes must be left by the
task that entered them); requests are sent from the callers' tasks.

Pooling is what keeps a stdio server's process (and its memory) alive from one operation to the
next, and spares each a new handshake. The pool is bounded: at most ``max_sessions`` sessions per
process, the least recently used idle one closed to make room, and a session no operation has
used for ``idle_seconds`` closed (``SessionPool``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import mcp.types as types
from mcp import Client, MCPError
from mcp.client.extension import advertise
from mcp.client.session import ClientRequestContext
from mcp.types import Implementation

from conversations.loop.wire import WireExchange
from servers.gateway.capture import Capture, Tap, current_capture, tapped
from servers.gateway.config import MODERN_VERSION, ServerConfig
from servers.gateway.features import ClientFeatures, log_level_send
from servers.gateway.transports import TRANSPORTS
from servers.mcp_apps import CLIENT_SETTINGS, UI_EXTENSION

T = TypeVar("T")
CLIENT_INFO = Implementation(name="tool-call-inspector", version="0.1.0")


class GatewayError(Exception):
    """A session could not be opened or used; the message is fit to show a user."""


class AuthorizationNeeded(GatewayError):
    """The server refused us for lack of authorization, or the OAuth flow failed (the message
    says which, and what to do)."""


# How long a connect may wait while a person signs in at the authorization server.
INTERACTIVE_AUTH_SECONDS = 900.0
# The most a session's first operation waits for its listening stream's answer (``_listening``).
LISTEN_SECONDS = 1.0
# The most sessions (so stdio server processes) a process keeps at once, open, opening or closing
# (``MCP_POOL_MAX_SESSIONS``), and how long one nobody uses stays open (``MCP_POOL_IDLE_SECONDS``).
MAX_SESSIONS = 32
IDLE_SECONDS = 900.0


async def _first_of(*waits: Coroutine[Any, Any, Any], timeout: float) -> None:
    """Wait until one of ``waits`` finishes (the others are cancelled).

    Raises:
        TimeoutError: none did within ``timeout`` seconds.
    """
    tasks = [asyncio.ensure_future(wait) for wait in waits]
    try:
        done, _ = await asyncio.wait(tasks, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
    if not done:
        raise TimeoutError


class EraNotOffered(GatewayError):
    """A server pinned to 2026-07-28 does not implement ``server/discover``."""


@dataclass
class SessionInfo:
    """What a caller should know about the session an operation ran on."""

    generation: int
    spawned: bool
    respawn_reason: str
    protocol_version: str
    server_name: str
    server_version: str
    instructions: str
    capabilities: dict[str, Any] = field(default_factory=dict)
    server_title: str = ""
    # How the era was settled: "initialize", "server/discover", or both for an auto fallback.
    handshake: str = ""


class GatewayLoop:
    """A daemon thread running one asyncio loop, started on first use.

    It remembers the pid it was started in, like the app's other process threads: threads do not
    survive a fork, so a child process (Celery's prefork pool) that finds a loop of another pid
    starts its own instead of handing coroutines to a loop nobody runs.
    """

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pid = 0
        self._lock = threading.Lock()

    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._loop.is_closed() or self._pid != os.getpid():
                ready = threading.Event()
                loop = asyncio.new_event_loop()

                def serve() -> None:
                    asyncio.set_event_loop(loop)
                    ready.set()
                    loop.run_forever()

                threading.Thread(target=serve, name="mcp-gateway", daemon=True).start()
                ready.wait()
                self._loop = loop
                self._pid = os.getpid()
            return self._loop

    def run(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        """Run ``coro`` on the gateway loop and wait for it, at most ``timeout`` seconds.

        Raises:
            GatewayError: the coroutine did not finish in time (it is cancelled).
        """
        future = asyncio.run_coroutine_threadsafe(coro, self.loop())
        try:
            return future.result(timeout)
        except FutureTimeout:
            future.cancel()
            raise GatewayError(f"the gateway gave no answer within {timeout:.0f} s") from None


class PooledSession:
    """One live connection to one server, shared by the turns and operations its key names
    (``session_key``) in this process. ``leases`` counts the operations running on it now (a
    leased session is never closed to make room); ``last_used`` is when the last one ended."""

    def __init__(
        self,
        config: ServerConfig,
        generation: int,
        stderr_dir: Path,
        body_limit: int,
        connect_timeout: float,
        line_limit: int = 32_000_000,
        http_body_limit: int = 32_000_000,
    ) -> None:
        self.config = config
        self.connect_timeout = connect_timeout
        self.generation = generation
        self.tap = Tap(
            body_limit=body_limit,
            secrets=config.maskable_secrets(),
            line_limit=line_limit,
            http_body_limit=http_body_limit,
        )
        self.client: Client | None = None
        self.dead_reason = ""
        self.opened_at = time.time()
        self.leases = 0
        self.last_used = time.monotonic()
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._error: BaseException | None = None
        stderr_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.stderr_path = stderr_dir / f"{config.name}-{os.getpid()}-{generation}.log"
        # The server's stderr, redacted (the transport writes it): readable by this user only.
        descriptor = os.open(self.stderr_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        self._errlog: BinaryIO = os.fdopen(descriptor, "wb")

    @property
    def dead(self) -> bool:
        return bool(self.dead_reason) or (self._task is not None and self._task.done())

    def mark_dead(self, reason: str) -> None:
        self.dead_reason = self.dead_reason or reason
        self._stop.set()

    async def open(self, timeout: float) -> None:
        """Start the holder task and wait for the handshake (or discovery).

        Raises:
            GatewayError: the server could not be started or did not answer in time.
        """
        self._task = asyncio.create_task(self._hold(), name=f"mcp-session-{self.config.name}")
        if self.config.oauth is not None and self.config.oauth.interactive:
            # A person is signing in at the authorization server.
            timeout = max(timeout, INTERACTIVE_AUTH_SECONDS)
        try:
            await _first_of(self._ready.wait(), self.tap.auth_failed().wait(), timeout=timeout)
        except TimeoutError:
            self.mark_dead("handshake timed out")
            await self.close()
            raise GatewayError(
                f"{self.config.name} did not complete the connection within {timeout:.0f} s"
            ) from None
        if self.tap.auth_failure and (self.client is None or not self._ready.is_set()):
            self.mark_dead(self.tap.auth_failure)
            await self.close()
            raise AuthorizationNeeded(self.tap.auth_failure)
        if self._error is not None or self.client is None:
            reason = _describe(self._error) if self._error else "the session ended during connect"
            self.mark_dead(reason)
            refused = _find(self._error, EraNotOffered)
            if refused is not None:
                raise refused
            raise GatewayError(f"could not connect to {self.config.name}: {reason}")

    async def _hold(self) -> None:
        try:
            transport = TRANSPORTS[self.config.transport].open(self.config, self._errlog, self.tap)
            async with Client(
                tapped(transport, self.tap),
                mode=self.config.client_mode(),
                # The handshake and list calls get the connect budget; tools/call passes its own.
                read_timeout_seconds=max(self.connect_timeout, self.config.call_timeout),
                client_info=CLIENT_INFO,
                cache=None,
                sampling_callback=self._sample if self.config.sampling else None,
                elicitation_callback=self._elicit if self.config.elicitation else None,
                list_roots_callback=self._roots if self.config.roots else None,
                # The workbench renders MCP Apps (docs/mcp-apps.md): servers may offer tool UIs.
                extensions=[advertise(UI_EXTENSION, CLIENT_SETTINGS)],
            ) as client:
                if self.config.era == "modern":
                    # Pinned to 2026-07-28 the SDK adopts the version without asking; discovery
                    # is still how the server says who it is (and a server MUST implement it).
                    raw = await _discover(client, self.config.name)
                    client.session.adopt(types.DiscoverResult.model_validate(raw))
                await self._apply_log_level(client)
                await self._listening(client)
                self.client = client
                self._ready.set()
                await self._stop.wait()
        except BaseException as exc:  # noqa: BLE001 — recorded and shown; the holder must not leak it
            self._error = exc
            self.dead_reason = self.dead_reason or _describe(exc)
        finally:
            self.client = None if self._error else self.client
            self._ready.set()
            self.tap.session_over()

    async def _listening(self, client: Client) -> None:
        """After an ``initialize`` handshake over streamable HTTP that gave the session an id, the
        SDK opens the session's listening stream (a GET) beside what comes next: the first
        operation waits for its answer (at most ``LISTEN_SECONDS``), so that the server sees the
        session's requests in the order the client made them and messages it sends on that
        stream from the start are heard."""
        if (
            self.config.transport != "http"
            or client.session.discover_result is not None
            or not self.tap.session_id_given
        ):
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.tap.listening.wait(), LISTEN_SECONDS)

    async def _apply_log_level(self, client: Client) -> None:
        """The server's chosen log level, on a session whose server advertised logging."""
        capabilities = client.session.server_capabilities
        if not self.config.log_level or capabilities is None or capabilities.logging is None:
            return
        try:
            await log_level_send(client, self.config.log_level)
        except MCPError:
            pass  # the refusal is recorded with the connection; the session stays usable

    def _features(self) -> ClientFeatures | None:
        capture = self.tap.newest_active()
        features = capture.features if capture is not None else None
        return features if isinstance(features, ClientFeatures) else None

    async def _sample(
        self, context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult | types.ErrorData:
        features = self._features()
        if features is None:
            return types.ErrorData(
                code=types.INVALID_REQUEST, message="no operation on this client is answering sampling now"
            )
        return await features.sample(params)

    async def _elicit(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        features = self._features()
        if features is None:
            # Nobody can answer (e.g. an agent turn): declining is the protocol's polite no.
            return types.ElicitResult(action="decline")
        return await features.elicit(params)

    async def _roots(self, context: ClientRequestContext) -> types.ListRootsResult:
        return types.ListRootsResult(
            roots=[types.Root(uri=uri, name=name or None) for uri, name in self.config.roots]  # type: ignore[arg-type]
        )

    async def close(self) -> None:
        self._stop.set()
        if self._task is not None and not self._task.done():
            try:
                await asyncio.wait_for(asyncio.shield(self._task), 5)
            except (TimeoutError, Exception):  # noqa: BLE001 — closing is best effort
                self._task.cancel()
        self._errlog.close()

    def info(self, *, spawned: bool, respawn_reason: str) -> SessionInfo:
        client = self.client
        session = client.session if client is not None else None
        server_info = session.server_info if session is not None else None
        capabilities = session.server_capabilities if session is not None else None
        handshake = ""
        if session is not None:
            handshake = "server/discover" if session.discover_result is not None else "initialize"
        return SessionInfo(
            server_title=(server_info.title or "") if server_info else "",
            handshake=handshake,
            generation=self.generation,
            spawned=spawned,
            respawn_reason=respawn_reason,
            protocol_version=(session.protocol_version or "") if session is not None else "",
            server_name=server_info.name if server_info else "",
            server_version=server_info.version if server_info else "",
            instructions=(session.instructions or "") if session is not None else "",
            capabilities=capabilities.model_dump(by_alias=True, exclude_none=True, mode="json")
            if capabilities is not None
            else {},
        )

    def read_stderr(self) -> str:
        """Server stderr written since the last read, redacted (each piece is reported once)."""
        return self.tap.take_stderr()

    def take_unclaimed(self) -> list[WireExchange]:
        records, self.tap.unclaimed = self.tap.unclaimed, []
        return records


async def _discover(client: Client, name: str) -> Any:
    """``server/discover`` for a session pinned to 2026-07-28.

    Any error answer refuses the pinned version: a server of the initialize era answers an
    unknown request as its framework does — "method not found", but also "Invalid request
    parameters" (the Python SDK before 2.x) or "Bad Request: Server not initialized" (the
    TypeScript SDK over HTTP, before a session) — and none of them speaks 2026-07-28.

    Raises:
        GatewayError: the server answered discovery with an error, so it does not offer the
            pinned version; pinning means no fallback to ``initialize`` (that is the ``auto`` era).
    """
    try:
        return await client.session.send_discover(MODERN_VERSION)
    except MCPError as exc:
        raise EraNotOffered(
            f"{name} did not offer the pinned protocol version {MODERN_VERSION}: it answered "
            f"server/discover with MCP error {exc.error.code} ({exc.error.message}), as a server of "
            "the initialize era answers a request it does not know; pin mode has no fallback to the "
            "initialize handshake; choose the legacy or auto era for this server."
        ) from exc


def _find(exc: BaseException | None, kind: type[EraNotOffered]) -> EraNotOffered | None:
    """``exc`` or the first exception of that kind inside it (task groups wrap what they raise)."""
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _find(inner, kind)
            if found is not None:
                return found
    return None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, GatewayError):
        return str(exc)
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(inner) for inner in exc.exceptions)
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if not text.startswith(type(exc).__name__) else text


SessionKey = tuple[int, str, int | None, bool]


def session_key(config: ServerConfig) -> SessionKey:
    """Which pooled session serves ``config``: one per server, OAuth grant owner and user.

    A session authorized with a user's token answers that user only: another user (or the same
    server without a grant) gets a session of their own, so one user's token never serves
    another's operation or turn. And a session is never shared between users
    (``ServerConfig.user_id``): a server keeps state per session — a stdio server in its
    process's memory (the demo server's notes), an HTTP server under its session id — that one
    user must not read or change for another. One user's turns and operations share theirs.

    Whether the client offers elicitation is part of the key too: the workbench offers it (a
    person is there to answer), a turn does not, and a session is opened with one or the other.
    Were they one key, each switch between a user's workbench and turns would replace the
    session, its server's state with it.
    """
    owner = config.oauth.owner if config.oauth is not None else ""
    return config.server_id, owner, config.user_id, config.elicitation


@dataclass(frozen=True)
class SessionOptions:
    """What a new session is opened with: where its server's stderr goes, how much of a message
    body its records keep, and how long it may take to connect."""

    stderr_dir: Path
    body_limit: int
    connect_timeout: float
    line_limit: int = 32_000_000
    http_body_limit: int = 32_000_000
    max_sessions: int = MAX_SESSIONS
    idle_seconds: float = IDLE_SECONDS


class SessionPool:
    """Sessions by ``session_key``; a dead or reconfigured one is replaced on next use.

    Bounded, so that the number of keys (servers, grants...) never makes the number of server
    processes unbounded: at most ``max_sessions`` are held at once — open, being opened or being
    closed (a closing stdio server may still run). A new session makes room by closing the least
    recently used one no operation is running on; when every one is in use it waits for one to
    end, at most the connect timeout. A session unused for ``idle_seconds`` is closed (by a
    reaper task on the gateway loop, and before any new session is opened). A caller ``release``s
    what ``acquire`` gave it once its operation is over.

    A pool belongs to the process that made it (``pid``): its sessions live on that process's
    gateway loop, so a forked child makes a pool of its own and never uses or closes these.
    """

    def __init__(self, options: Callable[[], SessionOptions]) -> None:
        self.pid = os.getpid()
        # Read when a session is opened: a pool lives as long as its process, settings may not.
        self.options = options
        self.spawns: Counter[int] = Counter()
        self._sessions: dict[SessionKey, PooledSession] = {}
        self._locks: dict[SessionKey, asyncio.Lock] = {}
        self._opening = 0
        self._closing = 0
        # Taken out of service (replaced, or their server closed) while a call still ran on them:
        # each is closed when its last lease is released, or once a call could no longer be
        # running on it (its call timeout: a subscription, which holds its lease, ends then).
        self._draining: set[PooledSession] = set()
        # Closes started from a callback (``_drained``), kept until done: the loop holds a task
        # only weakly.
        self._closers: set[asyncio.Task[None]] = set()
        # Set whenever a session is released or closed: what a caller waiting for room waits on.
        self._changed = asyncio.Event()
        self._reaper: asyncio.Task[None] | None = None
        # Why a key's session was given up (``give_up``): told to the caller that opens the next.
        self._given_up: dict[SessionKey, str] = {}

    @property
    def held(self) -> int:
        """The sessions ``max_sessions`` counts: open, being opened, drained and being closed."""
        return len(self._sessions) + self._opening + self._closing + len(self._draining)

    async def acquire(self, config: ServerConfig, capture: Capture) -> tuple[PooledSession, bool, str]:
        """The live session for ``config``, leased to the caller, opening one (recorded into
        ``capture``) if needed.

        Returns the session, whether this call opened it, and why an earlier one was replaced.

        Raises:
            GatewayError: a new session could not be opened, or no room was made for it in time.
        """
        key = session_key(config)
        self._reap_later()
        lock = self._locks.setdefault(key, asyncio.Lock())
        try:
            async with lock:
                session = self._sessions.get(key)
                reason = ""
                if session is not None and session.config != config:
                    reason = "the server's configuration changed"
                elif session is not None and session.dead:
                    reason = f"the previous session died ({session.dead_reason or 'connection closed'})"
                elif session is not None:
                    session.leases += 1
                    return session, False, ""
                if session is not None:
                    await self._retire(key)
                reason = reason or self._given_up.pop(key, "")
                options = self.options()
                await self._make_room(options)
                try:
                    fresh = await self._open(config, capture, options)
                finally:
                    self._opening -= 1
                    self._changed.set()
                fresh.leases += 1
                self._sessions[key] = fresh
                return fresh, True, reason
        finally:
            self._forget_lock(key, lock)

    async def _open(self, config: ServerConfig, capture: Capture, options: SessionOptions) -> PooledSession:
        """A new session for ``config``, connected, its connection recorded into ``capture``.

        Raises:
            GatewayError: it could not be opened (what the server wrote on stderr is named).
        """
        generation = self.spawns[config.server_id] + 1
        self.spawns[config.server_id] = generation
        fresh = PooledSession(
            config,
            generation,
            options.stderr_dir,
            options.body_limit,
            options.connect_timeout,
            options.line_limit,
            options.http_body_limit,
        )
        token = current_capture.set(capture)
        try:
            await fresh.open(options.connect_timeout)
        except GatewayError as exc:
            for record in fresh.take_unclaimed():
                capture.add(record)
            stderr = fresh.read_stderr()
            if stderr:
                capture.add(stderr_record(stderr, fresh.tap))
            fresh.tap.finish(capture)
            if stderr.strip() and not isinstance(exc, EraNotOffered):
                raise GatewayError(f"{exc}{_stderr_pointer(stderr, fresh.tap)}") from exc
            raise
        finally:
            current_capture.reset(token)
        return fresh

    async def give_up(self, session: PooledSession, reason: str) -> None:
        """A request on ``session`` timed out (``reason``): its server may be stopped or wedged,
        and every later request on it would wait its whole timeout too.

        It is taken out of service at once, so the next caller gets a new session (and a stdio
        server a new process); drained as a replaced session is (``_retire``: closed when the
        calls still running on it end, at the latest after its call timeout); and its server is
        then killed, not asked to stop (``Tap.hung``: SIGKILL to a stdio server's process group).
        """
        session.tap.hung = True
        session.dead_reason = session.dead_reason or reason
        key = session_key(session.config)
        if self._sessions.get(key) is session:
            self._given_up[key] = f"a request on the previous session timed out ({reason})"
            await self._retire(key)

    def release(self, session: PooledSession) -> None:
        """The operation ``acquire`` leased ``session`` to is over: it may be closed when idle, and
        is closed now if it was taken out of service while the operation ran (``_retire``). Called
        on the pool's loop."""
        session.leases = max(0, session.leases - 1)
        session.last_used = time.monotonic()
        if session.leases == 0:
            self._drained(session)
        self._changed.set()

    async def _make_room(self, options: SessionOptions) -> None:
        """Reserve room for one more session (counted in ``held`` until the caller's open ends).

        Raises:
            GatewayError: every session was in use for the whole connect timeout.
        """
        deadline = time.monotonic() + options.connect_timeout
        while True:
            await self.evict_idle(options.idle_seconds)
            if self.held < options.max_sessions:
                self._opening += 1
                return
            unused = [(key, session) for key, session in self._sessions.items() if session.leases == 0]
            if unused:
                await self._retire(min(unused, key=lambda item: item[1].last_used)[0])
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise GatewayError(
                    f"this process already holds {options.max_sessions} MCP sessions, the most it keeps, "
                    f"and all were in use for {options.connect_timeout:.0f} s; try again when one ends"
                )
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining)

    async def evict_idle(self, idle_seconds: float) -> None:
        """Close every session no operation is running on that died or was unused for
        ``idle_seconds``."""
        now = time.monotonic()
        for key, session in list(self._sessions.items()):
            if session.leases == 0 and (session.dead or now - session.last_used >= idle_seconds):
                if self._sessions.get(key) is session:
                    await self._retire(key)

    async def _retire(self, key: SessionKey, *, now: bool = False) -> None:
        """Take the session under ``key`` out of service and close it; it counts in ``held`` until
        its server has stopped. A session a call still runs on is closed when the last such call
        ends (``release``), at the latest after its call timeout, unless ``now``; the next caller
        of ``key`` gets a new one meanwhile."""
        session = self._sessions.pop(key, None)
        if session is None:
            return
        lock = self._locks.get(key)
        if lock is not None:
            self._forget_lock(key, lock)
        if session.leases > 0 and not now:
            self._draining.add(session)
            asyncio.get_running_loop().call_later(session.config.call_timeout, self._drained, session)
            return
        self._closing += 1
        await self._close(session)

    def _drained(self, session: PooledSession) -> None:
        """Close ``session`` now if it is still being drained (its calls outlived their timeout)."""
        if session in self._draining:
            self._draining.discard(session)
            self._closing += 1
            closer = asyncio.get_running_loop().create_task(self._close(session), name="mcp-session-close")
            self._closers.add(closer)
            closer.add_done_callback(self._closers.discard)

    async def _close(self, session: PooledSession) -> None:
        """Close ``session``, counted in ``_closing`` by the caller until its server has stopped."""
        try:
            await session.close()
        finally:
            self._closing -= 1
            self._changed.set()

    def _forget_lock(self, key: SessionKey, lock: asyncio.Lock) -> None:
        """Drop a key's lock once nothing holds it and no session is under it, so the locks stay as
        few as the sessions. (An asyncio lock nobody holds has no waiters, and a caller that gets it
        takes it without yielding.)"""
        if key not in self._sessions and self._locks.get(key) is lock and not lock.locked():
            del self._locks[key]

    def _reap_later(self) -> None:
        """Start the reaper on this loop unless it runs."""
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.get_running_loop().create_task(self._reap(), name="mcp-session-reaper")

    async def _reap(self) -> None:
        """Close idle sessions now and then, so a quiet process does not keep servers running."""
        while True:
            idle = self.options().idle_seconds
            await asyncio.sleep(min(max(idle / 4, 0.05), 60.0))
            try:
                await self.evict_idle(self.options().idle_seconds)
            except Exception:  # noqa: BLE001 — closing is best effort; the next round tries again
                continue

    async def close_all(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            self._reaper = None
        for key in list(self._sessions):
            await self._retire(key, now=True)
        draining, self._draining = list(self._draining), set()
        for session in draining:
            self._closing += 1
            await self._close(session)

    async def close(self, server_id: int) -> None:
        """Close the server's sessions, everyone's (each once no call runs on it)."""
        for key in [key for key in self._sessions if key[0] == server_id]:
            await self._retire(key)

    async def close_session(self, config: ServerConfig) -> None:
        """Close the session that serves ``config`` (``session_key``), no one else's, now: the
        user asked for a new one (what still ran on it ends with the session's error)."""
        await self._retire(session_key(config), now=True)


STDERR_TAIL_LINES = 5


def _stderr_pointer(text: str, tap: Tap) -> str:
    """Where a server that failed to connect explained itself: its last stderr lines, masked."""
    lines = [line for line in tap.mask(text).splitlines() if line.strip()][-STDERR_TAIL_LINES:]
    shown = "\n    ".join(lines)
    return (
        f" — the server closed the connection at start; its stderr (recorded with this operation, "
        f"last {len(lines)} line{'s' if len(lines) != 1 else ''}):\n    {shown}"
    )


def stderr_record(text: str, tap: Tap | None = None) -> WireExchange:
    """An unpaired record carrying what the server wrote to stderr (secrets masked)."""
    return WireExchange(
        channel="mcp",
        label="stderr",
        started_at=datetime.now(UTC),
        direction="server",
        response_body=tap.mask(text) if tap is not None else text,
    )
