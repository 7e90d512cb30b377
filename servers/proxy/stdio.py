"""The stdio MCP proxy: a host runs this in place of a server's command.

It starts the server and pumps raw bytes both ways — the host's stdin to the server's stdin, the
server's stdout to the host's stdout, the server's stderr to the proxy's stderr — in chunks as
they arrive, never parsed, never re-serialized: a host and a server cannot tell the proxy is
there. A copy of every chunk goes to the ``Recorder`` (a queue put), which records off the byte
path.

Lifecycle: the host closing the proxy's stdin closes the server's stdin (the server sees EOF,
as without the proxy); the server exiting ends the proxy with the server's exit code (a server
killed by signal N: 128 + N, as a shell reports it); SIGTERM, SIGINT and SIGHUP sent to the
proxy are passed to the server.
"""

from __future__ import annotations

import asyncio
import os
import signal
import stat
from collections.abc import Sequence

from servers.proxy.pairing import HOST, SERVER, STDERR
from servers.proxy.recorder import Recorder

CHUNK = 256 * 1024
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class _Source:
    """Reads an inherited file descriptor without blocking the loop (a pipe, socket or terminal
    through asyncio; a regular file through a thread)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.reader: asyncio.StreamReader | None = None

    async def open(self) -> _Source:
        if not stat.S_ISREG(os.fstat(self.fd).st_mode):
            loop = asyncio.get_running_loop()
            reader = self.reader = asyncio.StreamReader(limit=CHUNK)
            pipe = os.fdopen(os.dup(self.fd), "rb", buffering=0)
            await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
        return self

    async def read(self) -> bytes:
        if self.reader is not None:
            return await self.reader.read(CHUNK)
        return await asyncio.to_thread(os.read, self.fd, CHUNK)


class _Sink:
    """Writes to an inherited file descriptor, waiting (without blocking the loop) when its reader
    is slow: the host's pace is passed back to the server as it would be without the proxy."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.writer: asyncio.StreamWriter | None = None
        self.broken = False

    async def open(self) -> _Sink:
        if not stat.S_ISREG(os.fstat(self.fd).st_mode):
            loop = asyncio.get_running_loop()
            pipe = os.fdopen(os.dup(self.fd), "wb", buffering=0)
            transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, pipe)
            self.writer = asyncio.StreamWriter(transport, protocol, None, loop)
        return self

    async def write(self, data: bytes) -> None:
        if self.broken:
            return
        try:
            if self.writer is not None:
                self.writer.write(data)
                await self.writer.drain()
            else:
                view = memoryview(data)
                while view:
                    view = view[await asyncio.to_thread(os.write, self.fd, view) :]
        except (BrokenPipeError, ConnectionResetError):
            # The reader went away: keep reading (and recording) what is sent, as a closed pipe
            # would have discarded it.
            self.broken = True

    async def close(self) -> None:
        if self.writer is not None and not self.broken:
            try:
                await self.writer.drain()
            except (BrokenPipeError, ConnectionResetError):
                pass


async def _pump(read: asyncio.StreamReader, sink: _Sink, recorder: Recorder, stream: str) -> None:
    while True:
        chunk = await read.read(CHUNK)
        if not chunk:
            return
        await sink.write(chunk)
        recorder.tap(stream, chunk)


async def _host_to_server(source: _Source, child: asyncio.subprocess.Process, recorder: Recorder) -> None:
    assert child.stdin is not None
    server_gone = False
    while True:
        chunk = await source.read()
        if not chunk:
            break
        if not server_gone:
            try:
                child.stdin.write(chunk)
                await child.stdin.drain()
            except (BrokenPipeError, ConnectionResetError):
                server_gone = True
        recorder.tap(HOST, chunk)
    if not server_gone:
        child.stdin.close()  # the host's EOF, passed on


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
    child = await asyncio.create_subprocess_exec(
        *command,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert child.stdout is not None and child.stderr is not None
    for number in FORWARDED_SIGNALS:
        loop.add_signal_handler(number, _forward, child, number)
    source = await _Source(stdin_fd).open()
    out, err = await _Sink(stdout_fd).open(), await _Sink(stderr_fd).open()
    upstream = asyncio.create_task(_host_to_server(source, child, recorder))
    try:
        await asyncio.gather(
            _pump(child.stdout, out, recorder, SERVER),
            _pump(child.stderr, err, recorder, STDERR),
        )
        code = await child.wait()
    finally:
        for number in FORWARDED_SIGNALS:
            loop.remove_signal_handler(number)
        upstream.cancel()
        await asyncio.gather(upstream, return_exceptions=True)
        await out.close()
        await err.close()
    return 128 - code if code < 0 else code


def _forward(child: asyncio.subprocess.Process, number: int) -> None:
    if child.returncode is None:
        child.send_signal(number)
