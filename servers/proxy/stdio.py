"""The stdio MCP proxy: a host runs this in place of a server's command.

It starts the server and passes raw bytes both ways — the host's stdin to the server's stdin, the
server's stdout to the host's stdout, the server's stderr to the proxy's stderr — in chunks as
they arrive, never parsed, never re-serialized: a host and a server cannot tell the proxy is
there. A copy of every chunk goes to the ``Recorder`` (``tap``: one write to the recorder's pipe,
never a wait), which records off the byte path.

The byte path is asyncio protocols, not streams: a chunk the kernel hands the proxy is written on
in the very callback that received it (no stream buffer, no task to wake, no ``drain``), then
tapped. Back-pressure is the transports' own: a destination whose buffer passes its high-water
mark pauses reading from its source until it has room (the host's pace reaches the server, and
the reverse, as without the proxy). An inherited regular file (a host's stdin or stdout
redirected to one) is read or written directly instead.

Lifecycle: the host closing the proxy's stdin closes the server's stdin (the server sees EOF,
as without the proxy); the server exiting ends the proxy, once its stdout and stderr are passed
on, with the server's exit code (a server killed by signal N: 128 + N, as a shell reports it);
SIGTERM, SIGINT and SIGHUP sent to the proxy are passed to the server.
"""

from __future__ import annotations

import asyncio
import os
import signal
import stat
from collections.abc import Callable, Sequence

from servers.proxy.pairing import HOST, SERVER, STDERR
from servers.proxy.recorder import Recorder

CHUNK = 256 * 1024
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _regular(fd: int) -> bool:
    return stat.S_ISREG(os.fstat(fd).st_mode)


class _Sink(asyncio.Protocol):
    """Writes to an inherited file descriptor (the host's stdout, the proxy's stderr). A slow
    reader pauses the source through ``full`` and ``room``; a reader that went away makes it
    discard what is sent (as a closed pipe would), while reading and recording go on."""

    def __init__(self, fd: int, full: Callable[[], None], room: Callable[[], None]) -> None:
        self.fd = fd
        self.full, self.room = full, room
        self.transport: asyncio.WriteTransport | None = None
        self.broken = False
        self.closed: asyncio.Future[None] | None = None

    async def open(self) -> _Sink:
        if not _regular(self.fd):
            loop = asyncio.get_running_loop()
            self.closed = loop.create_future()
            pipe = os.fdopen(os.dup(self.fd), "wb", buffering=0)
            await loop.connect_write_pipe(lambda: self, pipe)
        return self

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        self.transport = transport

    def pause_writing(self) -> None:
        self.full()

    def resume_writing(self) -> None:
        self.room()

    def connection_lost(self, exc: Exception | None) -> None:
        self.broken = True
        self.room()
        if self.closed is not None and not self.closed.done():
            self.closed.set_result(None)

    def write(self, data: bytes) -> None:
        if self.broken:
            return
        if self.transport is not None:
            self.transport.write(data)
            return
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self.fd, view) :]
        except OSError:
            self.broken = True

    async def close(self) -> None:
        """Pass on what is still buffered (waiting while the reader is slow), then close."""
        if self.transport is not None and self.closed is not None:
            if not self.broken:
                self.transport.close()
            await self.closed


class _Host(asyncio.Protocol):
    """The host's stdin, read as it arrives."""

    def __init__(self, proxy: _Proxy) -> None:
        self.proxy = proxy

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.ReadTransport)
        self.proxy.host = transport

    def data_received(self, data: bytes) -> None:
        self.proxy.from_host(data)

    def eof_received(self) -> bool:
        self.proxy.host_ended()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.proxy.host_ended()


class _Server(asyncio.SubprocessProtocol):
    def __init__(self, proxy: _Proxy) -> None:
        self.proxy = proxy

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        assert isinstance(data, bytes)
        self.proxy.from_server(fd, data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        self.proxy.server_pipe_closed(fd)

    def process_exited(self) -> None:
        self.proxy.server_pipe_closed(-1)

    def pause_writing(self) -> None:  # the server's stdin is full: stop reading the host
        self.proxy.pause_host()

    def resume_writing(self) -> None:
        self.proxy.resume_host()


class _Proxy:
    """The pumps of one proxied server: callbacks on the event loop, nothing else."""

    def __init__(self, recorder: Recorder, stdin_fd: int) -> None:
        self.recorder = recorder
        self.stdin_fd = stdin_fd
        self.sinks: dict[int, _Sink] = {}
        self.server: asyncio.SubprocessTransport | None = None
        self.server_stdin: asyncio.WriteTransport | None = None
        self.host: asyncio.ReadTransport | None = None
        self.host_reader: asyncio.Task[None] | None = None
        self.host_paused = asyncio.Event()  # set: the server's stdin is full (regular-file stdin only)
        self.host_done = False
        self.open_pipes = {1, 2, -1}  # the server's stdout, stderr, and -1 for the process itself
        self.finished = asyncio.get_running_loop().create_future()

    async def start(self, command: Sequence[str], stdout_fd: int, stderr_fd: int) -> None:
        loop = asyncio.get_running_loop()
        self.sinks[1] = await _Sink(stdout_fd, lambda: self._pause(1), lambda: self._resume(1)).open()
        self.sinks[2] = await _Sink(stderr_fd, lambda: self._pause(2), lambda: self._resume(2)).open()
        self.server, _ = await loop.subprocess_exec(
            lambda: _Server(self),
            *command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        stdin = self.server.get_pipe_transport(0)
        assert isinstance(stdin, asyncio.WriteTransport)
        self.server_stdin = stdin
        if _regular(self.stdin_fd):
            self.host_reader = asyncio.create_task(self._read_regular_stdin())
        else:
            pipe = os.fdopen(os.dup(self.stdin_fd), "rb", buffering=0)
            await loop.connect_read_pipe(lambda: _Host(self), pipe)

    # The host's side.

    def from_host(self, data: bytes) -> None:
        if self.server_stdin is not None:
            self.server_stdin.write(data)
        self.recorder.tap(HOST, data)

    def host_ended(self) -> None:
        if self.host_done:
            return
        self.host_done = True
        if self.server_stdin is not None:
            self.server_stdin.close()  # the host's EOF, passed on once what is buffered is written

    def pause_host(self) -> None:
        if self.host is not None:
            self.host.pause_reading()
        self.host_paused.set()

    def resume_host(self) -> None:
        if self.host is not None:
            self.host.resume_reading()
        self.host_paused.clear()

    async def _read_regular_stdin(self) -> None:
        while chunk := await asyncio.to_thread(os.read, self.stdin_fd, CHUNK):
            self.from_host(chunk)
            while self.host_paused.is_set() and self.server_stdin is not None:
                await asyncio.sleep(0.01)
        self.host_ended()

    # The server's side.

    def from_server(self, fd: int, data: bytes) -> None:
        self.sinks[fd].write(data)
        self.recorder.tap(SERVER if fd == 1 else STDERR, data)

    def server_pipe_closed(self, fd: int) -> None:
        if fd == 0:
            self.server_stdin = None  # the server closed its stdin: what the host sends is dropped
            self.resume_host()
        self.open_pipes.discard(fd)
        if not self.open_pipes and not self.finished.done():
            self.finished.set_result(None)

    def _pause(self, fd: int) -> None:
        if self.server is not None and (pipe := self.server.get_pipe_transport(fd)) is not None:
            assert isinstance(pipe, asyncio.ReadTransport)
            pipe.pause_reading()

    def _resume(self, fd: int) -> None:
        if self.server is not None and (pipe := self.server.get_pipe_transport(fd)) is not None:
            assert isinstance(pipe, asyncio.ReadTransport)
            pipe.resume_reading()


async def run(
    command: Sequence[str],
    recorder: Recorder,
    *,
    stdin_fd: int = 0,
    stdout_fd: int = 1,
    stderr_fd: int = 2,
) -> int:
    """Run ``command`` behind the proxy until it exits; returns the exit code to exit with.

    Raises:
        OSError: the command could not be started (nothing was proxied).
    """
    loop = asyncio.get_running_loop()
    proxy = _Proxy(recorder, stdin_fd)
    try:
        await proxy.start(command, stdout_fd, stderr_fd)
        assert proxy.server is not None
        for number in FORWARDED_SIGNALS:
            loop.add_signal_handler(number, _forward, proxy.server, number)
        await proxy.finished
        code = proxy.server.get_returncode()
    finally:
        for number in FORWARDED_SIGNALS:
            loop.remove_signal_handler(number)
        if proxy.host_reader is not None:
            proxy.host_reader.cancel()
            await asyncio.gather(proxy.host_reader, return_exceptions=True)
        if proxy.host is not None:
            proxy.host.close()
        if proxy.server is not None:
            proxy.server.close()
        for sink in proxy.sinks.values():
            await sink.close()
    assert code is not None
    return 128 - code if code < 0 else code


def _forward(server: asyncio.SubprocessTransport, number: int) -> None:
    if server.get_returncode() is None:
        server.send_signal(number)
