"""A PostgreSQL server of a test's own (initdb into a scratch folder, its own port), for tests
that stop the database mid-session: the shared one is never stopped."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import free_port

BIN = Path("/usr/lib/postgresql/15/bin")


def _tool(name: str) -> str:
    found = shutil.which(name) or (str(BIN / name) if (BIN / name).exists() else None)
    if found is None:
        pytest.fail(f"{name} is not installed: a private PostgreSQL needs the server binaries")
    return found


def _as_postgres(command: list[str]) -> list[str]:
    """initdb and postgres refuse to run as root: run them as the postgres account then."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


@dataclass
class PrivatePostgres:
    folder: Path
    port: int

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/inspector"

    def _ctl(self, *args: str) -> None:
        subprocess.run(
            _as_postgres([_tool("pg_ctl"), "-D", str(self.folder / "data"), *args]),
            check=True,
            capture_output=True,
            timeout=120,
        )

    def start(self) -> None:
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._ctl("-o", options, "-l", str(self.folder / "log"), "-w", "start")

    def stop(self) -> None:
        self._ctl("-m", "fast", "-w", "stop")


@contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    folder = Path(tempfile.mkdtemp(prefix="private-pg-"))
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
    server = PrivatePostgres(folder=folder, port=free_port())
    subprocess.run(
        _as_postgres(
            [
                _tool("initdb"),
                "-D",
                str(folder / "data"),
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--no-sync",
            ]
        ),
        check=True,
        capture_output=True,
        timeout=300,
    )
    server.start()
    try:
        subprocess.run(
            _as_postgres(
                [_tool("createdb"), "-h", "127.0.0.1", "-p", str(server.port), "-U", "postgres", "inspector"]
            ),
            check=True,
            capture_output=True,
            timeout=60,
        )
        yield server
    finally:
        try:
            server.stop()
        except subprocess.CalledProcessError:
            pass  # already stopped by the test
        shutil.rmtree(folder, ignore_errors=True)
