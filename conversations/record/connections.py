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
waited out the pool's whole timeout and failed. The backend
(``inspector.postgresql``) therefore tests each connection it borrows with
:func:`connection_usable`, and when it finds one dead has the pool test all its idle connections
at once (``ConnectionPool.check``), dropping the dead ones and opening replacements, so the next
try finds a working connection or waits for a new one. A connection the server has sent nothing
on since it was handed back (a quiet socket: a server that ends a session says so and closes it)
is lent without the test's round trip.

A thread that looks something up and then waits on a stream for minutes (the proxies' routes)
hands its connection back first (:func:`handed_back`): a pooled connection kept by such a thread
is one the pool no longer has, and is never handed back if the stream is cut off (a server
shutting down cancels its requests before Django's end-of-request signal).

This module imports no models: the log filter is named in ``settings.LOGGING``, which is
configured before Django's apps are loaded.
"""

from __future__ import annotations

import logging
import select
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connection as default_connection

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


@contextmanager
def handed_back() -> Iterator[None]:
    """Run the block, then close (hand back to the pool) the default connection if the block
    opened it, outside a transaction. A connection the thread already held is left as it was."""
    opened_here = default_connection.connection is None
    try:
        yield
    finally:
        if opened_here and not default_connection.in_atomic_block:
            default_connection.close()


def connection_usable(conn: Any) -> bool:
    """Whether ``conn`` (a psycopg connection just borrowed from the pool) can be lent: the
    backend's test (``inspector.postgresql``) of every connection the pool lends.

    A connection that is open and idle, on whose socket the server has sent nothing since it
    was handed back, is lent as it is (``_quiet``). Any other is tested by psycopg_pool's own
    test, an empty query (``ConnectionPool.check_connection``, public)."""
    import psycopg
    from psycopg_pool import ConnectionPool

    if _quiet(conn):
        return True
    try:
        ConnectionPool.check_connection(conn)
    except psycopg.Error:
        return False
    return True


def _quiet(conn: Any) -> bool:
    """Whether ``conn`` (a psycopg connection idle in the pool) is open, outside any transaction,
    and has nothing waiting on its socket: nothing the server sent since its last answer.

    A server that ends a session (a restart, ``pg_terminate_backend``, an idle timeout) sends
    its reason and closes the connection, either of which makes the socket readable; so does
    anything else it may send unasked (a notification, a changed setting). Such a connection, or
    one whose socket cannot be asked, takes the full test. Asking the socket is one ``poll``
    system call; the full test is a round trip, which each borrowing paid (every web request,
    every write of a turn)."""
    from psycopg import pq

    if conn.closed or conn.pgconn.status != pq.ConnStatus.OK:
        return False
    if conn.info.transaction_status != pq.TransactionStatus.IDLE:
        return False
    try:
        poller = select.poll()
        poller.register(conn.fileno(), select.POLLIN | select.POLLPRI)
        return not poller.poll(0)
    except (OSError, ValueError, AttributeError):  # no socket to ask (or no poll here)
        return False


class DiscardedConnectionFilter(logging.Filter):
    """Drops psycopg_pool's warning about a closed connection given back to it when this process
    closed it on purpose (:func:`discard_connection`): that is no fault to warn an operator of.
    Every other warning of the pool passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        return not (record.msg == "discarding closed connection: %s" and args and args[0] in _discarded)
