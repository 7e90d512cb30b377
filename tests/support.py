"""Small helpers the tests share: waiting for a condition, a free local port, a database connection
of a test's own, a count of the work a call does, and work run under a CPU limit."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import psycopg
from django.db import connection

T = TypeVar("T")
REPO_ROOT = Path(__file__).resolve().parents[1]


def wait_until(condition: Callable[[], object], seconds: float, step: float = 0.05) -> bool:
    """Whether ``condition`` is true within ``seconds`` (asked every ``step``, and once more at the end)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(step)
    return bool(condition())


def free_port() -> int:
    """A localhost TCP port nothing listens on (the system's choice), for a server of the test's own."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def other_connection() -> psycopg.Connection[tuple[object, ...]]:
    """A connection to the test database of its own: it sees only what has been committed, and
    holds its own locks."""
    db = connection.settings_dict
    return psycopg.connect(
        host=db["HOST"] or "127.0.0.1", port=db["PORT"] or 5432, user=db["USER"] or None, dbname=db["NAME"]
    )


def python_calls(work: Callable[[], T]) -> tuple[T, int]:
    """``work()``'s result and how many Python calls it made (functions and builtins alike): a
    count of work that does not depend on the host's speed, for a test that holds a cost to the
    size of its input."""
    calls = 0

    def count(frame: object, event: str, arg: object) -> None:
        nonlocal calls
        if event in {"call", "c_call"}:
            calls += 1

    sys.setprofile(count)
    try:
        result = work()
    finally:
        sys.setprofile(None)
    return result, calls


def within_cpu_limit(script: str, *args: str, seconds: int, setup: str = "") -> str:
    """What ``script`` printed, run with ``args`` in a Python of its own (after ``setup``, whose
    CPU is not counted) that the kernel stops once the script has taken ``seconds`` of CPU.

    For a test that a piece of work on hostile input ends: the limit sits far above the work's
    linear cost and far below what its quadratic form would take, so it holds on a loaded host
    and fails on the quadratic code. Fails with the child's error output if it was stopped or
    failed or wrote to stderr."""
    limit = f"""
import math as _math, resource as _resource
_used = _resource.getrusage(_resource.RUSAGE_SELF)
_spent = _math.ceil(_used.ru_utime + _used.ru_stime)
_resource.setrlimit(_resource.RLIMIT_CPU, (_spent + {seconds}, _spent + {seconds + 1}))
"""
    done = subprocess.run(
        [sys.executable, "-c", setup + limit + script, *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,  # a hang guard only: the CPU limit ends the child first
        check=False,
    )
    # Nothing on stderr either: a warning or a traceback the script caught is a failure too.
    assert (done.returncode, done.stderr[-3000:]) == (0, ""), f"stopped past {seconds} CPU seconds, or failed"
    return done.stdout
