"""The pool's connections: one that carried a big record is closed, not pooled again; one found
dead makes the pool test and drop every idle one.

libpq grows a connection's input and output buffers to the largest message it has carried and
never shrinks them, so a pooled connection that wrote or read a 10 MB record would hold tens of
MB for as long as the pool keeps it. A connection that carried a record of ``BIG_RECORD_CHARS``
or more is closed instead of being given back (:func:`discard_connection`: the record writer
after such a write, a turn's runner after the end of a turn that had one); the pool opens a fresh
one in its place. (glibc's side of big payloads is ``inspector.memory``.)

After a database restart every idle connection of the pool is dead. psycopg's pool tests the
connection it is about to lend and, when that test fails, drops it and tries the next one after a
backoff that doubles each time (0, 1, 2, 4, 8, 16 s): with six or more dead connections a request
waited out the pool's whole timeout and failed. The pool's test is therefore
:func:`check_pooled_connection`: when it finds one dead it has the pool test all its idle
connections at once (``ConnectionPool.check``), dropping the dead ones and opening replacements,
so the lender's next try finds a working connection or waits for a new one.

This module imports no models: the log filter is named in ``settings.LOGGING``, which is
configured before Django's apps are loaded.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any

# A record this long (characters of a body) makes the connection that carried it not worth
# keeping: its buffers would stay at least this size.
BIG_RECORD_CHARS = 1024 * 1024

# Connections closed on purpose before going back to the pool (the pool says it discards them).
_discarded: weakref.WeakSet[Any] = weakref.WeakSet()


def discard_connection(connection: Any) -> None:
    """Close ``connection``'s (a Django connection's) underlying database connection, so that a
    pool drops it instead of lending it again; outside a transaction only (inside one, nothing).

    Without a pool the connection is simply closed; Django opens a new one when next needed."""
    if connection.in_atomic_block:
        return
    raw = connection.connection
    if raw is not None and connection.settings_dict["OPTIONS"].get("pool"):
        _discarded.add(raw)
        raw.close()  # returned closed: psycopg_pool drops it and opens a replacement
    connection.close()


def check_pooled_connection(conn: Any) -> None:
    """The pool's test of a connection before lending it (``settings.DATABASES``' pool ``check``):
    psycopg_pool's own, and, when it fails, the same test of every idle connection of the pool,
    which drops the dead ones (their database went away together) before the failure is raised
    for the pool to drop this one and try again."""
    from psycopg_pool import ConnectionPool

    try:
        ConnectionPool.check_connection(conn)
    except Exception:
        pool = getattr(conn, "_pool", None)  # set by the pool while it lends the connection
        if isinstance(pool, ConnectionPool):
            pool.check()
        raise


class DiscardedConnectionFilter(logging.Filter):
    """Drops psycopg_pool's warning about a closed connection given back to it when this process
    closed it on purpose (:func:`discard_connection`): that is no fault to warn an operator of.
    Every other warning of the pool passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        return not (record.msg == "discarding closed connection: %s" and args and args[0] in _discarded)
