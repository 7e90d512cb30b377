"""Services a test starts for itself when it must break them (restart, stop): never the shared
ones. Each test that uses one takes a port of its own."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
import redis


class PrivateRedis:
    """A redis-server of the test's own, without persistence (a restart loses everything in it)."""

    def __init__(self, port: int, log_dir: Path) -> None:
        self.port = port
        self.url = f"redis://127.0.0.1:{port}/0"
        self.log_path = log_dir / f"private-redis-{port}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdout=self.log_path.open("ab"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                redis.Redis.from_url(self.url).ping()
                return
            except redis.ConnectionError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"the private redis-server did not start; see {self.log_path}")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=20)
            self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()
