"""The processes the measures start (a Celery worker, a daphne web server) and /proc readings.

Both run the product exactly as deployed (``celery -A inspector worker -P threads``, ``daphne
inspector.asgi:application``) with the bench's environment; their logs go to ``var/bench/``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from types import TracebackType

from bench.environment import REPO_ROOT, VAR_DIR


def children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (Linux /proc; empty elsewhere)."""
    found: list[int] = []
    pending = [pid]
    while pending:
        current = pending.pop()
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                kids = [int(k) for k in (task / "children").read_text().split()]
            except OSError:
                continue
            found.extend(kids)
            pending.extend(kids)
    return found


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def demo_server_pids(root: int) -> set[int]:
    """The bundled stdio MCP server processes running under ``root``."""
    return {pid for pid in children(root) if "servers.demo_server" in cmdline(pid)}


def _proc_kib(pid: int, name: str, key: str) -> int:
    """The ``key`` line (in kB) of ``/proc/<pid>/<name>``, in bytes (0 if the process is gone)."""
    try:
        for line in Path(f"/proc/{pid}/{name}").read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def rss_bytes(pid: int) -> int:
    """Resident set size of one process (0 if it is gone)."""
    return _proc_kib(pid, "status", "VmRSS:")


def cpu_seconds(pid: int | str) -> float:
    """User + system CPU time a process (or ``"<pid>/task/<tid>"``: one thread) has used so far
    (0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # After the command name: state is field 3, utime 14 and stime 15 (1-based, man proc).
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pss_bytes(pid: int) -> int:
    """Proportional set size of one process (0 if it is gone): its private pages, and each page
    it shares with other processes divided by how many map it. Summed over processes it counts
    a shared page once, where a sum of RSS counts it in every process that maps it."""
    return _proc_kib(pid, "smaps_rollup", "Pss:")


class RssSampler:
    """Samples a process's RSS (and its descendants') every ``interval`` s on a thread, and
    every ``pss_every``-th sample the tree's PSS too (reading it walks the page tables)."""

    def __init__(self, pid: int, interval: float = 0.1, pss_every: int = 5) -> None:
        self.pid = pid
        self.interval = interval
        self.pss_every = pss_every
        self.own: list[int] = []
        self.tree: list[int] = []
        self.tree_pss: list[int] = []
        # The tree's RSS at the samples PSS was read at, to compare the two sample for sample.
        self.tree_at_pss: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        count = 0
        while not self._stop.is_set():
            own = rss_bytes(self.pid)
            tree = [self.pid, *children(self.pid)]
            self.own.append(own)
            self.tree.append(own + sum(rss_bytes(child) for child in tree[1:]))
            if count % self.pss_every == 0:
                self.tree_pss.append(sum(pss_bytes(pid) for pid in tree))
                self.tree_at_pss.append(self.tree[-1])
            count += 1
            self._stop.wait(self.interval)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _environment(extra: dict[str, str] | None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra or {})
    return env


def _stop(process: subprocess.Popen[bytes] | None) -> None:
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            # A process that will not go (a loaded host) must not turn the results measured
            # with it into an error: say so and go on.
            print(f"  process {process.pid} did not exit after SIGKILL within 30 s", flush=True)


class CeleryWorker:
    """``celery -A inspector worker -P threads -c N`` on the bench's Redis and database."""

    def __init__(self, *, concurrency: int, name: str, env: dict[str, str] | None = None) -> None:
        self.concurrency = concurrency
        self.name = name
        self.env = _environment(env)
        self.log_path = VAR_DIR / f"{name}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> CeleryWorker:
        from inspector.celery import app

        log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "inspector",
                "worker",
                "-P",
                "threads",
                "-c",
                str(self.concurrency),
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "-l",
                "warning",
                "-n",
                f"{self.name}-{os.getpid()}@%h",
            ],
            cwd=REPO_ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + 60
        while not app.control.ping(timeout=0.5):
            if self.process.poll() is not None or time.monotonic() > deadline:
                _stop(self.process)
                raise RuntimeError(f"the Celery worker did not come up; see {self.log_path}")
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        _stop(self.process)
        self.process = None


class WebServer:
    """``daphne inspector.asgi:application`` (or another ``application``) on a free port of 127.0.0.1."""

    def __init__(
        self, *, name: str, env: dict[str, str] | None = None, application: str = "inspector.asgi:application"
    ) -> None:
        self.application = application
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.env = _environment(env)
        self.log_path = VAR_DIR / f"{name}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> WebServer:
        log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "daphne",
                "-v",
                "0",
                "-b",
                "127.0.0.1",
                "-p",
                str(self.port),
                self.application,
            ],
            cwd=REPO_ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{self.base}/accounts/login/", timeout=1)
                return self
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    _stop(self.process)
                    raise RuntimeError(f"the web server did not start; see {self.log_path}") from None
                time.sleep(0.1)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        _stop(self.process)
        self.process = None
