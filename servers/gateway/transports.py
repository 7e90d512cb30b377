"""MCP transports: one small class each behind one contract, registered in ``TRANSPORTS``."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from typing import Any, BinaryIO, ClassVar, Protocol

import anyio
import anyio.lowlevel
import httpx2
from anyio.abc import ByteReceiveStream, Process
from mcp.client.sse import sse_client
from mcp.client.stdio import get_default_environment
from mcp.client.streamable_http import streamable_http_client
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage

from servers.gateway.capture import Released, Tap, wire_text
from servers.gateway.config import ServerConfig, resolve_references
from servers.gateway.http_limit import BoundedTransport
from servers.gateway.oauth import FLOW_STEP, recording_auth

Streams = tuple[Any, Any]


class Transport(Protocol):
    """Opens the SDK transport for a server.

    ``open`` returns an async context manager yielding the SDK's ``(read_stream, write_stream)``;
    the gateway wraps those streams to capture every message. ``errlog`` is a binary file that
    receives a subprocess's stderr, redacted.
    HTTP transports also report each request's headers and each response's status and headers
    to ``tap``.

    Raises (from ``open``):
        ConfigError: an ``${VAR}`` reference in env or headers is not set.
    """

    key: ClassVar[str]
    label: ClassVar[str]
    spawns_process: ClassVar[bool]

    def open(
        self, config: ServerConfig, errlog: BinaryIO, tap: Tap
    ) -> AbstractAsyncContextManager[Streams]: ...


class StdioTransport(Transport):
    key = "stdio"
    label = "stdio (spawns a command on the worker)"
    spawns_process = True

    def open(self, config: ServerConfig, errlog: BinaryIO, tap: Tap) -> AbstractAsyncContextManager[Streams]:
        env = {key: resolve_references(value) for key, value in config.env}
        return _exact_stdio([config.command, *config.args], env, config.cwd or None, errlog, tap)


# How long a stopping server gets after its stdin closes, and after SIGTERM, before the next step.
STDIO_EXIT_GRACE_SECONDS = 2.0
# A stdout message at least this big is followed by a ``Released`` item.
RELEASE_AFTER_BYTES = 1_000_000
# A stderr "line" longer than this is passed on in pieces (redaction works line by line).
STDERR_PIECE_BYTES = 1_000_000


@asynccontextmanager
async def _exact_stdio(
    argv: list[str], env: dict[str, str], cwd: str | None, errlog: BinaryIO, tap: Tap
) -> AsyncIterator[Streams]:
    """A stdio MCP server as the SDK's pair of message streams, reading its output as bytes.

    The SDK's ``stdio_client`` decodes stdout as text and drops what does not parse; the record
    must keep every byte a server writes. So each stdout line goes to ``tap.stdout_line`` as it
    was written: a JSON-RPC message goes on to the session, anything else (not JSON, not UTF-8,
    a line cut short when the server died) is recorded verbatim with the operation it
    interrupted. stderr goes through ``tap.stderr_text`` (redacted, kept with the operation) into
    ``errlog``. The process runs in its own session, and is stopped as the SDK stops it: stdin
    closed, then SIGTERM and SIGKILL to its process group.
    """
    process = await anyio.open_process(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=get_default_environment() | env,
        cwd=cwd,
        start_new_session=True,
    )
    stdin, stdout, stderr = process.stdin, process.stdout, process.stderr
    assert stdin is not None and stdout is not None and stderr is not None
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)
    stderr_done = anyio.Event()

    async def read_stderr() -> None:
        def write(piece: bytes) -> None:
            redacted = tap.stderr_text(piece)
            errlog.write(redacted)
            errlog.flush()

        try:
            await _each_line(stderr, write, keep_newline=True, piece_limit=STDERR_PIECE_BYTES)
        finally:
            stderr_done.set()

    async def read_stdout() -> None:
        async def deliver(line: bytes) -> None:
            # The server wrote its stderr before this line: let the stderr reader take it first,
            # so what it logged for an operation is recorded with that operation.
            await anyio.lowlevel.checkpoint()
            await anyio.lowlevel.checkpoint()
            await read_writer.send(tap.stdout_line(line))
            if len(line) > RELEASE_AFTER_BYTES:
                # The SDK's read loop holds the last message it received until the next one
                # arrives; an idle session would keep a 20 MB result alive. This empty item
                # (passed over by the SDK and the tap) takes its place.
                await read_writer.send(Released())

        async with read_writer:
            try:
                rest = await _each_line_async(stdout, deliver, _LineCutter(tap))
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                return
            # The server closed stdout (it exited or crashed): its last stderr words first, then
            # whatever it left half-written, then the session learns the connection is gone.
            with anyio.move_on_after(STDIO_EXIT_GRACE_SECONDS):
                await stderr_done.wait()
            if rest:
                tap.stdout_fragment(rest)

    async def write_stdin() -> None:
        try:
            async with write_reader:
                async for message in write_reader:
                    await stdin.send(wire_text(message).encode() + b"\n")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_writer.aclose()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(read_stderr)
        tasks.start_soon(read_stdout)
        tasks.start_soon(write_stdin)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):
                await _stop(process, kill=tap.hung)
                for stream in (read_stream, write_stream, read_writer, write_reader):
                    await stream.aclose()
            tasks.cancel_scope.cancel()


async def _each_line(
    stream: ByteReceiveStream, handle: Callable[[bytes], None], *, keep_newline: bool, piece_limit: int
) -> None:
    """Hand each line of ``stream`` to ``handle`` (a line longer than ``piece_limit`` in pieces)."""
    parts: list[bytes] = []
    size = 0
    with suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        async for chunk in stream:
            start = 0
            while (end := chunk.find(b"\n", start)) >= 0:
                parts.append(chunk[start : end + 1 if keep_newline else end])
                handle(b"".join(parts))
                parts, size = [], 0
                start = end + 1
            if start < len(chunk):
                parts.append(chunk[start:])
                size += len(chunk) - start
                if size > piece_limit:
                    handle(b"".join(parts))
                    parts, size = [], 0
    if parts:
        handle(b"".join(parts))


class _LineCutter:
    """The line being read from a stdio server's stdout, kept up to the tap's ``line_limit``.

    Past the limit the line is recorded at once, cut and marked (``Tap.stdout_overlong``), and
    the rest of it only counted: a server writing one endless line costs a limit's worth of
    memory, and the record says so while the call still waits."""

    def __init__(self, tap: Tap) -> None:
        self.tap = tap
        self.limit = max(tap.line_limit, 1)
        self.parts: list[bytes] = []
        self.size = 0
        # Bytes of the current line past the limit (-1: the line is within it).
        self.over = -1

    def add(self, piece: bytes) -> None:
        if self.over >= 0:
            self.over += len(piece)
            return
        room = self.limit - self.size
        if len(piece) <= room:
            self.parts.append(piece)
            self.size += len(piece)
            return
        self.parts.append(piece[:room])
        kept = b"".join(self.parts)
        self.parts, self.size, self.over = [], 0, len(piece) - room
        self.tap.stdout_overlong(kept, self.limit)

    def end(self, *, ended: bool) -> bytes | None:
        """The line, ended by a newline (or by the stream's end), to deliver; None if it was cut."""
        if self.over >= 0:
            self.tap.stdout_overlong_end(self.limit + self.over, ended=ended)
            self.over = -1
            return None
        line = b"".join(self.parts)
        self.parts, self.size = [], 0
        return line


async def _each_line_async(
    stream: ByteReceiveStream, deliver: Callable[[bytes], Awaitable[None]], cutter: _LineCutter
) -> bytes:
    """Await ``deliver`` for each complete line of ``stream`` (without its newline); return what
    was left after the last newline when the stream ended (a half-written line, or b"").

    Lines are joined once from their chunks (never re-concatenated per chunk), and nothing of a
    delivered line is kept afterwards: a 20 MB message does not stay alive while the session idles.
    A line longer than the tap's ``line_limit`` is not delivered: ``cutter`` records it cut.
    """
    with suppress(anyio.EndOfStream, OSError):
        async for chunk in stream:
            # Counted until the session takes each (``Tap.settle``).
            cutter.tap.lines_read(chunk.count(b"\n"))
            start = 0
            while (end := chunk.find(b"\n", start)) >= 0:
                cutter.add(chunk[start:end])
                line = cutter.end(ended=True)
                if line is not None:
                    await deliver(line)
                else:
                    cutter.tap.line_taken()
                del line
                start = end + 1
            if start < len(chunk):
                cutter.add(chunk[start:])
            del chunk
    return cutter.end(ended=False) or b""


async def _stop(process: Process, *, kill: bool = False) -> None:
    """Close stdin, give the server a grace period, then end its whole process group (SIGTERM,
    then SIGKILL to what is left) — also when the server itself exited, as what it started may
    not have. ``kill``: a server that stopped answering (a request timed out) may be stopped
    (SIGSTOP) or wedged, and would neither read EOF nor handle SIGTERM: its group is sent
    SIGKILL at once."""
    with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        assert process.stdin is not None
        await process.stdin.aclose()
    if kill:
        # The group's id is the server's pid (start_new_session); gone already: nothing to kill.
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
    with anyio.move_on_after(STDIO_EXIT_GRACE_SECONDS):
        while process.returncode is None:
            await anyio.sleep(0.01)
    await terminate_posix_process_tree(process, STDIO_EXIT_GRACE_SECONDS)
    with anyio.move_on_after(STDIO_EXIT_GRACE_SECONDS):
        while process.returncode is None:
            await anyio.sleep(0.01)
    for pipe in (process.stdout, process.stderr):
        if pipe is not None:
            with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                await pipe.aclose()


def _http_headers(config: ServerConfig) -> dict[str, str]:
    return {key: resolve_references(value) for key, value in config.headers}


def _observed_client(tap: Tap, config: ServerConfig, **kwargs: Any) -> httpx2.AsyncClient:
    """An HTTP client whose event hooks report every request and response to ``tap``.

    A server that answers 401 (or 403 ``insufficient_scope``) when no OAuth grant is configured
    fails the connect or the operation at once with "needs authorization" (``Tap.fail_auth``).
    With a grant, the OAuth flow records its own requests (``oauth.RecordingAuth``).
    """
    tap.http = True
    records: dict[int, Any] = {}

    async def on_request(request: httpx2.Request) -> None:
        if request.extensions.get(FLOW_STEP):
            return
        content = request.content if request.method != "GET" else b""
        records[id(request)] = tap.http_request(request.method, request.url.path, request.headers, content)

    async def on_response(response: httpx2.Response) -> None:
        if response.request.extensions.get(FLOW_STEP):
            return
        record = records.pop(id(response.request), None)
        tap.http_response(record, response.status_code, response.headers)
        challenge = response.headers.get("www-authenticate", "")
        refused = response.status_code == 401 or (
            response.status_code == 403 and "insufficient_scope" in challenge
        )
        if refused and config.oauth is None:
            tap.fail_auth(needs_authorization(config.name, response.status_code, challenge))

    auth = None
    if config.oauth is not None:
        settings = config.oauth
        auth = recording_auth(
            config.url,
            settings,
            record=lambda record: tap.flow_record(record, settings.secrets()),
            on_failure=lambda message: tap.fail_auth(f"{config.name}: {message}"),
            body_limit=tap.body_limit,
            timeout=config.call_timeout,
            learn=tap.learn,
        )
    if kwargs.get("auth") is None:
        kwargs.pop("auth", None)
        if auth is not None:
            kwargs["auth"] = auth
    kwargs.setdefault("transport", BoundedTransport(tap))
    return httpx2.AsyncClient(event_hooks={"request": [on_request], "response": [on_response]}, **kwargs)


def needs_authorization(name: str, status: int, challenge: str) -> str:
    """What a user is told when a server refuses us for lack of authorization."""
    shown = f", WWW-Authenticate: {challenge[:300]}" if challenge else ""
    return (
        f"{name} needs authorization (HTTP {status}{shown}): run `manage.py server auth {name}` "
        "or press Connect on the server's page to sign in"
    )


class StreamableHttpTransport(Transport):
    key = "http"
    label = "streamable HTTP"
    spawns_process = False

    def open(self, config: ServerConfig, errlog: BinaryIO, tap: Tap) -> AbstractAsyncContextManager[Streams]:
        return self._open(config, tap)

    @asynccontextmanager
    async def _open(self, config: ServerConfig, tap: Tap) -> AsyncIterator[Streams]:
        timeout = httpx2.Timeout(config.call_timeout, read=config.call_timeout + 5)
        async with _observed_client(
            tap, config, headers=_http_headers(config), timeout=timeout
        ) as http_client:
            async with streamable_http_client(config.url, http_client=http_client) as streams:
                yield streams[0], streams[1]


class SseTransport(Transport):
    key = "sse"
    label = "HTTP+SSE (legacy, deprecated)"
    spawns_process = False

    def open(self, config: ServerConfig, errlog: BinaryIO, tap: Tap) -> AbstractAsyncContextManager[Streams]:
        def factory(
            headers: dict[str, str] | None = None,
            timeout: httpx2.Timeout | None = None,
            auth: httpx2.Auth | None = None,
        ) -> httpx2.AsyncClient:
            return _observed_client(tap, config, headers=headers, timeout=timeout, auth=auth)

        return sse_client(
            config.url,
            headers=_http_headers(config),
            timeout=config.call_timeout,
            httpx_client_factory=factory,
        )


TRANSPORTS: dict[str, Transport] = {
    transport.key: transport for transport in (StdioTransport(), StreamableHttpTransport(), SseTransport())
}
