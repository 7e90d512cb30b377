"""The MCP client gateway: pooled sessions, raw capture, timeouts — behind a plain sync API.

Every operation returns an outcome instead of raising: the records it captured (paired JSON-RPC
exchanges, notifications, stderr), the session it ran on, and an error message when it failed.
Callers persist the records; nothing here touches the database.

Two ways in: the blocking helpers (``list_tools``, ``call_tool``, ``run``) for callers that only
want the outcome, and ``begin`` for a caller that follows an operation as it happens — each
record as it is captured, the server's own requests (sampling, elicitation) to answer, and a
cancel — from its own thread.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import queue
import threading
import time
import warnings
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import anyio
import mcp.types as types
from django.conf import settings
from mcp import Client, MCPDeprecationWarning, MCPError

from conversations.loop.wire import CALL_ID_META_KEY, WireExchange
from servers.gateway.capabilities import CapabilityMissing, refusal
from servers.gateway.capture import Capture, current_capture
from servers.gateway.config import ConfigError, ServerConfig
from servers.gateway.features import log_level_send
from servers.gateway.pool import (
    AuthorizationNeeded,
    GatewayError,
    GatewayLoop,
    PooledSession,
    SessionInfo,
    SessionOptions,
    SessionPool,
    stderr_record,
)

__all__ = [
    "CallOutcome",
    "ListOutcome",
    "Outcome",
    "Question",
    "Running",
    "ServerConfig",
    "SessionInfo",
    "begin",
    "call_tool",
    "close_all",
    "list_tools",
    "run",
]

# Errors after which the connection cannot carry another request.
_CONNECTION_LOST = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, ConnectionError)
_MAX_LIST_PAGES = 50
# How long an HTTP operation waits for the answers to the notifications it sent (a 202 each).
HTTP_SETTLE_SECONDS = 2.0

Operation = Callable[[Client], Awaitable[Any]]


@dataclass
class Outcome:
    records: list[WireExchange] = field(default_factory=list)
    unclaimed: list[WireExchange] = field(default_factory=list)
    session: SessionInfo | None = None
    error: str = ""
    timed_out: bool = False
    cancelled: bool = False
    # What the operation returned, as JSON (a result, a list of definitions...).
    value: Any = None


@dataclass
class ListOutcome(Outcome):
    tools: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class CallOutcome(Outcome):
    result: dict[str, Any] | None = None


_loop = GatewayLoop()
_pool: SessionPool | None = None


def _get_pool() -> SessionPool:
    global _pool
    if _pool is None or _pool.pid != os.getpid():
        _pool = SessionPool(_session_options)
    return _pool


def _session_options() -> SessionOptions:
    return SessionOptions(
        stderr_dir=settings.MCP_STDERR_DIR,
        body_limit=settings.EXCHANGE_BODY_LIMIT,
        connect_timeout=settings.MCP_CONNECT_TIMEOUT_SECONDS,
        line_limit=settings.MCP_STDOUT_LINE_LIMIT,
        http_body_limit=settings.RESPONSE_BODY_LIMIT,
        max_sessions=settings.MCP_POOL_MAX_SESSIONS,
        idle_seconds=settings.MCP_POOL_IDLE_SECONDS,
    )


def _connection_lost(exc: BaseException) -> bool:
    if isinstance(exc, MCPError):
        return "connection closed" in str(exc.error.message).lower()
    return isinstance(exc, _CONNECTION_LOST)


def _describe_failure(config: ServerConfig, exc: BaseException) -> str:
    if isinstance(exc, CapabilityMissing | SessionLost):
        return str(exc)
    if isinstance(exc, MCPError):
        return f"MCP error {exc.error.code}: {exc.error.message}"
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe_failure(config, inner) for inner in exc.exceptions)
    return f"{type(exc).__name__}: {exc}"


async def _run(
    config: ServerConfig, outcome: Outcome, operation: Operation, capture: Capture, *, fresh: bool = False
) -> None:
    """Acquire the session, run ``operation(client)``, and gather everything it captured."""
    current_capture.set(capture)
    pool = _get_pool()
    if fresh:
        await pool.close_session(config)
    try:
        session, spawned, reason = await pool.acquire(config, capture)
    except (GatewayError, ConfigError) as exc:
        outcome.error = str(exc)
        outcome.records = capture.records
        capture.closed = True
        for record in outcome.records:
            _own(record, config)
        return
    outcome.session = session.info(spawned=spawned, respawn_reason=reason)
    session.tap.active.append(capture)
    try:
        assert session.client is not None
        outcome.value = await _unless_refused(operation(session.client), session)
    except AuthorizationNeeded as exc:
        outcome.error = str(exc)
        session.mark_dead(outcome.error)
    except asyncio.CancelledError:
        outcome.cancelled = True
        outcome.error = "cancelled by the user (the server was sent notifications/cancelled)"
    except Exception as exc:  # noqa: BLE001 — every failure becomes a recorded, explained outcome
        outcome.error = _describe_failure(config, exc)
        if isinstance(exc, MCPError) and exc.error.code == -32001:
            outcome.timed_out = True
            await pool.give_up(session, outcome.error)
        if _connection_lost(exc):
            session.mark_dead(outcome.error)
            outcome.error = f"{config.name} closed the connection during the call ({outcome.error})"
    finally:
        if capture in session.tap.active:
            session.tap.active.remove(capture)
        if config.oauth is not None and session.config.oauth is not None:
            # A reused session authorizes with the store it was opened with.
            config.oauth.store.take_from(session.config.oauth.store)
        try:
            if not session.dead:
                await session.tap.settle(capture, HTTP_SETTLE_SECONDS)
        finally:
            # Cancelled again while it waits, the operation still keeps what it captured; the
            # session may then be closed to make room (``SessionPool``).
            pool.release(session)
            _finish(session, capture, outcome)


async def _unless_refused(work: Awaitable[Any], session: PooledSession) -> Any:
    """``work``'s result, unless the server refuses us for lack of authorization first (a 401, a
    failed step-up or refresh): then at once, instead of after the call timeout.

    Raises:
        AuthorizationNeeded: the refusal, with what to do about it.
    """
    task = asyncio.ensure_future(work)
    refused = asyncio.ensure_future(session.tap.auth_failed().wait())
    try:
        await asyncio.wait({task, refused}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            raise AuthorizationNeeded(session.tap.auth_failure)
        return task.result()
    finally:
        refused.cancel()
        if not task.done():
            task.cancel()
            with suppress(asyncio.CancelledError, Exception):
                await task


def _finish(session: PooledSession, capture: Capture, outcome: Outcome) -> None:
    session.tap.finish(capture)
    stderr = session.read_stderr()
    if stderr:
        record = stderr_record(stderr, session.tap)
        _own(record, session.config)
        capture.records.append(record)
        if capture.listener is not None:
            capture.listener(record)
    outcome.records = capture.records
    outcome.unclaimed = session.take_unclaimed()
    for record in (*outcome.records, *outcome.unclaimed):
        _own(record, session.config)


def _own(record: WireExchange, config: ServerConfig) -> None:
    """Mark a captured record as the server's: its row and, kept with the record, its name (so a
    record outlives the server row it names)."""
    record.server_id = config.server_id
    record.server_name = config.name


# --- following an operation from another thread ------------------------------------------


@dataclass
class Question:
    """A request from the server (``sampling`` or ``elicitation``) waiting for an answer.

    ``params`` is the request's params as JSON. Answer with ``answer(result_json)`` (the
    protocol's result object) or ``refuse(message)``; both may be called from any thread.
    ``refuse(message, code=...)`` answers a sampling request with that JSON-RPC error code.
    """

    kind: str
    params: dict[str, Any]
    _future: asyncio.Future[dict[str, Any] | str | types.ErrorData]
    _loop: asyncio.AbstractEventLoop

    def answer(self, result: dict[str, Any]) -> None:
        self._loop.call_soon_threadsafe(self._settle, result)

    def refuse(self, message: str, code: int | None = None) -> None:
        value = message if code is None else types.ErrorData(code=code, message=message)
        self._loop.call_soon_threadsafe(self._settle, value)

    def _settle(self, value: dict[str, Any] | str | types.ErrorData) -> None:
        if not self._future.done():
            self._future.set_result(value)


Event = WireExchange | Question


class _HandOff:
    """``ClientFeatures`` that hand each request to the thread following the operation."""

    def __init__(self, events: queue.Queue[Event], wait_seconds: float) -> None:
        self.events = events
        self.wait_seconds = wait_seconds

    async def _ask(self, kind: str, params: Any) -> dict[str, Any] | str | types.ErrorData:
        loop = asyncio.get_running_loop()
        question = Question(
            kind=kind,
            params=params.model_dump(by_alias=True, exclude_none=True, mode="json"),
            _future=loop.create_future(),
            _loop=loop,
        )
        self.events.put(question)
        try:
            return await asyncio.wait_for(question._future, self.wait_seconds)
        except TimeoutError:
            return f"no answer within {self.wait_seconds:.0f} s"

    async def sample(
        self, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult | types.ErrorData:
        answer = await self._ask("sampling", params)
        if isinstance(answer, types.ErrorData):
            return answer
        if isinstance(answer, str):
            return types.ErrorData(code=types.INVALID_REQUEST, message=answer)
        try:
            return types.CreateMessageResult.model_validate(answer)
        except ValueError as exc:
            return types.ErrorData(
                code=types.INTERNAL_ERROR, message=f"the model's answer is unusable: {exc}"
            )

    async def elicit(self, params: types.ElicitRequestParams) -> types.ElicitResult | types.ErrorData:
        answer = await self._ask("elicitation", params)
        if isinstance(answer, types.ErrorData):
            return types.ElicitResult(action="decline")
        if isinstance(answer, str):
            return types.ElicitResult(action="cancel" if "no answer" in answer else "decline")
        return types.ElicitResult.model_validate(answer)


@dataclass
class Running:
    """An operation in flight on the gateway loop, followed from a plain thread.

    ``events`` carries each record twice when it is a request (in either direction): once the
    moment it is sent, unanswered, and again, the same object, once answered (``Capture``).

    ``done`` waits for the operation's coroutine to really end — after a cancel too, when its
    last records (the request left unanswered, ``notifications/cancelled``, stderr) are still
    being written — and for every event to be taken.
    """

    events: queue.Queue[Event]
    outcome: Outcome
    _future: Future[None]
    _ended: threading.Event

    def next_event(self, timeout: float) -> Event | None:
        """The next record or question, or None if none came within ``timeout`` seconds."""
        try:
            return self.events.get(timeout=timeout)
        except queue.Empty:
            return None

    @property
    def done(self) -> bool:
        return self._ended.is_set() and self.events.empty()

    def cancel(self) -> None:
        """Cancel the operation's task: the SDK sends the server ``notifications/cancelled``."""
        self._future.cancel()

    def wait(self, timeout: float) -> Outcome:
        """The outcome once finished (within ``timeout`` seconds, else a gateway error)."""
        if not self._ended.wait(timeout) and not self.outcome.error:
            self.outcome.error = f"the gateway did not finish the operation within {timeout:.0f} s"
        if self._future.cancelled() and not self.outcome.error:
            self.outcome.error = "the operation was cancelled"
            self.outcome.cancelled = True
        return self.outcome


def begin(
    config: ServerConfig,
    operation: Operation,
    *,
    answer_wait: float = 120.0,
    fresh: bool = False,
    outcome: Outcome | None = None,
) -> Running:
    """Start ``operation`` and return at once; the caller drains ``events`` until ``done``.

    ``fresh`` closes the pooled session first, so the connection (handshake included) is part
    of this operation's record. The server's requests wait at most ``answer_wait`` seconds.
    """
    events: queue.Queue[Event] = queue.Queue()
    result = outcome if outcome is not None else Outcome()
    capture = Capture(listener=events.put, features=_HandOff(events, answer_wait))
    ended = threading.Event()

    async def followed() -> None:
        try:
            await _run(config, result, operation, capture, fresh=fresh)
        finally:
            ended.set()

    future = asyncio.run_coroutine_threadsafe(followed(), _loop.loop())
    return Running(events=events, outcome=result, _future=future, _ended=ended)


def run(config: ServerConfig, operation: Operation, *, fresh: bool = False) -> Outcome:
    """Run ``operation`` to its end; the server's own requests are refused (nobody to ask)."""
    outcome = Outcome()
    _loop.run(_run(config, outcome, operation, Capture(), fresh=fresh), timeout=_budget(config))
    return outcome


# --- the operations ------------------------------------------------------------------------


def dump(model: Any) -> Any:
    """What the server sent, as JSON: fields the SDK only filled with defaults (a 2026-era
    ``resultType``/``ttlMs``/``cacheScope`` on a 2025 session, an absent ``isError``) are left out."""
    return model.model_dump(by_alias=True, exclude_none=True, exclude_unset=True, mode="json")


async def _all_pages(fetch: Callable[[str | None], Awaitable[Any]], attribute: str) -> list[Any]:
    items: list[Any] = []
    cursor: str | None = None
    for _ in range(_MAX_LIST_PAGES):
        page = await fetch(cursor)
        items.extend(dump(item) for item in getattr(page, attribute))
        cursor = page.next_cursor
        if not cursor:
            break
    return items


def gate(client: Client, method: str) -> None:
    """Refuse ``method`` unless the session's server advertised the capability it needs.

    Raises:
        CapabilityMissing: not advertised; nothing is sent.
    """
    session = client.session
    advertised = session.server_capabilities
    capabilities = (
        advertised.model_dump(by_alias=True, exclude_none=True, mode="json")
        if advertised is not None
        else None
    )
    name = session.server_info.name if session.server_info is not None else "the server"
    message = refusal(name, method, capabilities)
    if message:
        raise CapabilityMissing(message)


async def op_list_tools(client: Client) -> list[Any]:
    gate(client, "tools/list")
    return await _all_pages(lambda cursor: client.list_tools(cursor=cursor, cache_mode="bypass"), "tools")


async def op_list_resources(client: Client) -> list[Any]:
    gate(client, "resources/list")
    return await _all_pages(
        lambda cursor: client.list_resources(cursor=cursor, cache_mode="bypass"), "resources"
    )


async def op_list_templates(client: Client) -> list[Any]:
    gate(client, "resources/templates/list")
    return await _all_pages(
        lambda cursor: client.list_resource_templates(cursor=cursor, cache_mode="bypass"),
        "resource_templates",
    )


async def op_list_prompts(client: Client) -> list[Any]:
    gate(client, "prompts/list")
    return await _all_pages(lambda cursor: client.list_prompts(cursor=cursor, cache_mode="bypass"), "prompts")


async def _noop_progress(progress: float, total: float | None, message: str | None) -> None:
    """Asking for progress makes the request carry a progressToken; the tap records the rest."""


# Tasks (2025-11-25, experimental) are how a tool with ``execution.taskSupport: "required"`` must
# be called; the 2026-07-28 core moved them to an extension.
TASK_PROTOCOL_VERSION = "2025-11-25"
TASK_CANCEL_SECONDS = 5.0


def op_call_tool(name: str, arguments: dict[str, Any], timeout: float, *, as_task: bool = False) -> Operation:
    """Call a tool; ``as_task`` (a tool that requires it) runs it as a task on a 2025-11-25 session."""

    async def operation(client: Client) -> Any:
        gate(client, "tools/call")
        if as_task and client.session.protocol_version == TASK_PROTOCOL_VERSION:
            return await _call_as_task(client, name, arguments, timeout)
        with _own_output_check(client, name):
            result = await client.call_tool(
                name, arguments, read_timeout_seconds=timeout, progress_callback=_noop_progress
            )
        return dump(result)

    return operation


@contextmanager
def _own_output_check(client: Client, name: str) -> Iterator[None]:
    """Keep the SDK from checking this call's ``structuredContent`` itself.

    The SDK checks a result against the tool's ``outputSchema`` from its own listing and, on a
    session that has not listed the tool, first sends an extra ``tools/list``; an invalid result
    then raises and the result is lost. The workbench checks it instead
    (``servers.operations.output_check``) and shows the result with the check, so for this call
    the SDK is told the tool has no schema; what it had listed is put back afterwards.
    """
    schemas = client.session._tool_output_schemas  # noqa: SLF001 — no public switch in mcp 2.3
    missing = object()
    before = schemas.get(name, missing)
    schemas[name] = None
    try:
        yield
    finally:
        if before is missing:
            schemas.pop(name, None)
        else:
            schemas[name] = before  # type: ignore[assignment]


async def _call_as_task(client: Client, name: str, arguments: dict[str, Any], timeout: float) -> Any:
    """``tools/call`` with ``task``, then ``tasks/result``, which waits for the task to end.

    The server's own requests for the task (elicitation, sampling) arrive while ``tasks/result``
    is open and are answered like any other; the final ``CallToolResult`` is the outcome.

    Raises:
        MCPError: the server refused either request (or a read timed out).
        ValueError: the server's answers are not a task and a tool result.
    """
    call = types.CallToolRequestParams(
        name=name, arguments=arguments, task=types.TaskMetadata(ttl=int(timeout * 1000))
    )
    created = types.CreateTaskResult.model_validate(
        await _send_raw(
            client, "tools/call", call.model_dump(by_alias=True, mode="json", exclude_none=True), timeout
        )
    )
    task_id = created.task.task_id
    try:
        payload = await _send_raw(client, "tasks/result", {"taskId": task_id}, timeout)
    except asyncio.CancelledError:
        # Abandoning tasks/result (notifications/cancelled) leaves the task running: end it too.
        await asyncio.shield(_cancel_task(client, task_id))
        raise
    return dump(types.CallToolResult.model_validate(payload))


async def _cancel_task(client: Client, task_id: str) -> None:
    try:
        await _send_raw(client, "tasks/cancel", {"taskId": task_id}, TASK_CANCEL_SECONDS)
    except (MCPError, *_CONNECTION_LOST):
        pass  # recorded by the tap either way; the call is being cancelled regardless


async def _send_raw(client: Client, method: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
    """A request whose result the SDK must not validate by method.

    mcp 2.3 types tasks but does not dispatch them: ``ClientSession.send_request`` checks a
    ``tools/call`` result against ``CallToolResult``, which a ``CreateTaskResult`` is not. So this
    goes one layer down, to the session's dispatcher (the same stamp, the same streams, so the
    tap records it like any other request).
    """
    session = client.session
    data: dict[str, Any] = {"method": method, "params": params}
    opts: Any = {"timeout": timeout}
    session._stamp(data, opts)  # noqa: SLF001 — see the docstring: no public raw request in mcp 2.3
    raw = await session._dispatcher.send_raw_request(method, data.get("params"), opts)  # noqa: SLF001
    return dict(raw)


def op_read_resource(uri: str) -> Operation:
    async def operation(client: Client) -> Any:
        gate(client, "resources/read")
        return dump(await client.read_resource(uri, cache_mode="bypass"))

    return operation


def op_get_prompt(name: str, arguments: dict[str, str]) -> Operation:
    async def operation(client: Client) -> Any:
        gate(client, "prompts/get")
        return dump(await client.get_prompt(name, arguments))

    return operation


async def op_ping(client: Client) -> Any:
    """``ping``: in the eras with a session (up to 2025-11-25) any party may send it at any time,
    no capability gates it, and the answer is empty. The 2026-07-28 era removed it (there is no
    session to keep alive): on a session opened with ``server/discover`` nothing is sent.
    The result is the round trip as this client timed it, around the request and its answer.

    Raises:
        CapabilityMissing: the session is of the 2026-07-28 era; nothing is sent.
    """
    session = client.session
    if session.discover_result is not None:
        name = session.server_info.name if session.server_info is not None else "the server"
        raise CapabilityMissing(
            f"ping was not sent: {name} speaks the 2026-07-28 protocol (connected with "
            "server/discover), which removed ping; Connect (a new server/discover) checks it answers"
        )
    started = time.perf_counter()
    with warnings.catch_warnings():
        # The SDK warns that ping is gone in the newest era; this session is of an older one.
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        await client.send_ping()
    return {"round_trip_ms": round((time.perf_counter() - started) * 1000, 3)}


def op_complete(ref: dict[str, str], argument: dict[str, str], context: dict[str, str]) -> Operation:
    async def operation(client: Client) -> Any:
        gate(client, "completion/complete")
        reference: types.ResourceTemplateReference | types.PromptReference
        if ref.get("type") == "ref/resource":
            reference = types.ResourceTemplateReference(type="ref/resource", uri=ref["uri"])
        else:
            reference = types.PromptReference(type="ref/prompt", name=ref["name"])
        return dump(await client.complete(reference, argument, context or None))

    return operation


def op_set_level(level: str) -> Operation:
    """``logging/setLevel``: the server sends ``notifications/message`` at ``level`` and above."""

    async def operation(client: Client) -> Any:
        gate(client, "logging/setLevel")
        return dump(await log_level_send(client, level))

    return operation


UPDATED = "notifications/resources/updated"
STOP_POLL_SECONDS = 0.2


class SessionLost(Exception):
    """The session ended while a subscription was waiting for updates."""


class Stop(Protocol):
    """Tells a subscription to end (``threading.Event`` is one)."""

    def is_set(self) -> bool: ...


def op_subscribe(uri: str, *, seconds: float, stop: Stop) -> Operation:
    """``resources/subscribe``, then wait for ``notifications/resources/updated`` about ``uri``.

    Each update is a record of this operation as it arrives; the operation ends with
    ``resources/unsubscribe`` once ``stop`` is set or ``seconds`` have passed, and returns the
    URI and how many updates came.

    Raises:
        CapabilityMissing: the server did not advertise ``resources.subscribe``; nothing is sent.
        SessionLost: the session closed while subscribed (no unsubscribe is sent then).
    """

    async def operation(client: Client) -> Any:
        gate(client, "resources/subscribe")
        capture = current_capture.get()
        assert capture is not None  # _run sets it
        capture.watching.add(uri)
        await client.session.send_request(
            types.SubscribeRequest(params=types.SubscribeRequestParams(uri=uri)), types.EmptyResult
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while not stop.is_set() and loop.time() < deadline:
            try:
                await asyncio.wait_for(capture.session_lost.wait(), STOP_POLL_SECONDS)
            except TimeoutError:
                continue
            raise SessionLost(f"the session closed while subscribed to {uri}")
        await client.session.send_request(
            types.UnsubscribeRequest(params=types.UnsubscribeRequestParams(uri=uri)), types.EmptyResult
        )
        updates = sum(1 for record in capture.records if record.label == UPDATED)
        return {"uri": uri, "updates": updates}

    return operation


async def op_connect(client: Client) -> Any:
    """Nothing beyond the connection itself: the handshake (or discovery) is the record."""
    return None


# --- the agent's blocking helpers ------------------------------------------------------------


def list_tools(config: ServerConfig, *, stop: StopSignal | None = None) -> ListOutcome:
    """Every tool the server offers now (all pages, never from a cache); ``stop`` as in ``call_tool``."""
    outcome = ListOutcome()
    _run_stoppable(config, outcome, op_list_tools, stop)
    outcome.tools = list(outcome.value or [])
    return outcome


def call_tool(
    config: ServerConfig,
    name: str,
    arguments: dict[str, Any],
    *,
    stop: StopSignal | None = None,
    call_id: str | None = None,
) -> CallOutcome:
    """Call one tool; the server's ``call_timeout`` bounds the wait (the SDK then sends a cancel).

    Only ``tools/call`` is sent, and the result is not checked against the tool's outputSchema
    here: the caller has the listing its model saw (``servers.operations.output_check``).

    When ``stop`` fires the call is abandoned at once: the SDK sends the server
    ``notifications/cancelled``, which is in the outcome's records with everything else
    captured, and the outcome is ``cancelled``.

    ``call_id`` (the model's call this runs) goes in the request's ``params._meta`` under
    ``CALL_ID_META_KEY``, so a recording proxy between here and the server can link the two.
    """
    outcome = CallOutcome()
    # RequestParamsMeta is an open TypedDict (any further key is allowed, as _meta is in the spec).
    meta = cast("types.RequestParamsMeta", {CALL_ID_META_KEY: call_id}) if call_id else None

    async def operation(client: Client) -> Any:
        gate(client, "tools/call")
        # As in the workbench, the caller checks structuredContent itself (``toolhost``): the
        # SDK would send its own tools/list first on a session that never listed the tool.
        with _own_output_check(client, name):
            result = await client.call_tool(
                name, arguments, read_timeout_seconds=config.call_timeout, meta=meta
            )
        return dump(result)

    _run_stoppable(config, outcome, operation, stop)
    outcome.result = outcome.value
    return outcome


class StopSignal(Protocol):
    """Tells a blocking operation to give up (e.g. ``conversations.lifecycle.TurnSignal``)."""

    def on_stop(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener`` once when stopped (at once if already); returns an undo."""
        ...


# How long a stopped operation may take to write its last records (the request left unanswered,
# notifications/cancelled, stderr).
STOP_SETTLE_SECONDS = 5.0


def _run_stoppable(
    config: ServerConfig, outcome: Outcome, operation: Operation, stop: StopSignal | None
) -> None:
    """``_run`` on the gateway loop, waited for from this thread until it ends or ``stop`` fires.

    Raises:
        GatewayError: the operation did not end within the outer budget (a wedged loop).
    """
    if stop is None:
        _loop.run(_run(config, outcome, operation, Capture()), timeout=_budget(config))
        return
    ended = threading.Event()
    wake = threading.Event()
    stopped = threading.Event()

    async def guarded() -> None:
        try:
            await _run(config, outcome, operation, Capture())
        finally:
            ended.set()
            wake.set()

    def on_stop() -> None:
        stopped.set()
        wake.set()

    future = asyncio.run_coroutine_threadsafe(guarded(), _loop.loop())
    forget = stop.on_stop(on_stop)
    try:
        woken = wake.wait(_budget(config))
    finally:
        forget()
    if ended.is_set():
        return
    future.cancel()
    if not woken:
        raise GatewayError(f"the gateway gave no answer within {_budget(config):.0f} s")
    if not ended.wait(STOP_SETTLE_SECONDS) and not outcome.error:
        outcome.error = (
            f"the gateway did not finish the cancelled operation within {STOP_SETTLE_SECONDS:.0f} s"
        )
    outcome.cancelled = True
    outcome.error = outcome.error or "cancelled before the server was reached"


def _budget(config: ServerConfig) -> float:
    # The SDK's own timeouts fire first; this outer bound only guards against a wedged loop.
    return settings.MCP_CONNECT_TIMEOUT_SECONDS + config.call_timeout + 15


def spawn_count(server_id: int) -> int:
    """How many sessions this process has opened for a server (1 = pooled all along)."""
    return _get_pool().spawns[server_id]


def close_server(server_id: int) -> None:
    _loop.run(_get_pool().close(server_id), timeout=15)


def close_all() -> None:
    """Close every pooled session of this process (tests, shutdown); a forked child's own only."""
    if _pool is not None and _pool.pid == os.getpid():
        _loop.run(_pool.close_all(), timeout=30)


atexit.register(close_all)
