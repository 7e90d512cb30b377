"""Small helpers the tests share: waiting for a condition, a database connection of a test's own,
and a count of the work a call does."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TypeVar

import psycopg
from django.db import connection

T = TypeVar("T")


def wait_until(condition: Callable[[], object], seconds: float, step: float = 0.05) -> bool:
    """Whether ``condition`` is true within ``seconds`` (asked every ``step``, and once more at the end)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(step)
    return bool(condition())


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
