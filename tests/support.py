"""Small helpers the tests share: waiting for a condition, and a database connection of a test's own."""

from __future__ import annotations

import time
from collections.abc import Callable

import psycopg
from django.db import connection


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
