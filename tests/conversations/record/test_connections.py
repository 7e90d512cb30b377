"""The pool's connections (``conversations.record.connections``, tested by the backend,
``inspector.postgresql``, as it borrows each): one that carried a big record is closed instead of
pooled; dead ones are found and dropped together; quiet ones are lent without a round trip."""

from __future__ import annotations

import logging
import select
from typing import Any

import psycopg_pool
import pytest
from django.db import connection, transaction

from conversations.record import connections
from conversations.record.connections import DiscardedConnectionFilter, discard_connection
from tests.support import other_connection, wait_until


def _answers(value: int) -> bool:
    """Whether the connection (opened anew if need be) answers a query."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {value}")
        return bool(cursor.fetchone() == (value,))


@pytest.mark.django_db(transaction=True)
def test_a_discarded_connection_is_closed_and_a_new_one_serves_the_next_query() -> None:
    assert _answers(1)
    used = connection.connection

    discard_connection(connection)

    assert connection.connection is None
    assert _answers(2)
    assert connection.connection is not used


@pytest.mark.django_db(transaction=True)
def test_inside_a_transaction_a_connection_is_never_discarded() -> None:
    with transaction.atomic():
        assert _answers(1)
        used = connection.connection

        discard_connection(connection)

        assert connection.connection is used
        assert _answers(2)


def test_the_pools_warning_is_dropped_only_for_a_connection_discarded_on_purpose() -> None:
    """psycopg_pool warns of every closed connection given back to it; only those this process
    closed on purpose are not worth a warning."""

    class Closed:
        pass

    ours, other = Closed(), Closed()
    connections._discarded.add(ours)

    def record(argument: object) -> logging.LogRecord:
        return logging.LogRecord(
            "psycopg.pool",
            logging.WARNING,
            __file__,
            1,
            "discarding closed connection: %s",
            (argument,),
            None,
        )

    keep = DiscardedConnectionFilter().filter
    assert keep(record(ours)) is False
    assert keep(record(other)) is True
    assert keep(logging.LogRecord("psycopg.pool", logging.WARNING, __file__, 1, "other: %s", (ours,), None))


def _borrowed() -> Any:
    """A connection borrowed from the pool as Django's backend borrows one (and tests it)."""
    return connection.get_new_connection(connection.get_connection_params())


def _idle_pooled(pool: Any, count: int) -> list[int]:
    """Have at least ``count`` connections idle in the pool; the backend pids of ``count`` of them."""
    held = [pool.getconn() for _ in range(count)]
    pids = [conn.info.backend_pid for conn in held]
    for conn in held:
        pool.putconn(conn)
    return pids


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_once_the_database_dropped_the_pools_connections_a_working_one_is_lent_within_seconds() -> None:
    """After a database restart every idle connection of the pool is dead. psycopg's pool tests
    the one it is about to lend and, when that fails, tries the next after a backoff that doubles
    (0, 1, 2, 4, 8, 16 s): with eight dead ones a request waited out the pool's whole timeout and
    failed. The first failed test now drops every dead idle connection at once."""
    connection.close()  # Django's own connection back in the pool, idle too
    pool = connection.pool  # type: ignore[attr-defined]
    pids = _idle_pooled(pool, 8)
    with other_connection() as admin:
        admin.autocommit = True
        admin.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", [pids])
        assert wait_until(
            lambda: (
                not admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = ANY(%s)", [pids]).fetchone()
            ),
            10,
        )

    lent = _borrowed()  # before: PoolTimeout (0 + 1 + 2 + 2 s of backoff, still dead)
    try:
        assert lent.info.backend_pid not in pids
        assert lent.execute("SELECT 1").fetchone() == (1,)
    finally:
        pool.putconn(lent)
    assert _answers(3)


class _FullChecks:
    """Counts psycopg_pool's own test of a connection (a round trip to the server)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        plain = psycopg_pool.ConnectionPool.check_connection

        def counted(conn: Any) -> None:
            self.count += 1
            plain(conn)

        monkeypatch.setattr(psycopg_pool.ConnectionPool, "check_connection", staticmethod(counted))


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_an_idle_connection_the_server_sent_nothing_on_is_lent_without_a_round_trip(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every borrowing of a connection (each web request, each write of a turn) was preceded
    by an empty query to test it. A server that ends a session says so and closes it, which
    makes the socket readable: a connection whose socket is quiet is lent as it is."""
    pool = connection.pool  # type: ignore[attr-defined]
    _idle_pooled(pool, 3)
    checks = _FullChecks(monkeypatch)

    lent = [_borrowed() for _ in range(3)]
    try:
        assert all(conn.execute("SELECT 1").fetchone() == (1,) for conn in lent)
    finally:
        for conn in lent:
            pool.putconn(conn)
    assert checks.count == 0


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_connection_the_server_sent_something_on_is_tested_before_it_is_lent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Anything waiting on an idle connection's socket (here a notification; after a restart,
    the server's goodbye) has the backend test it first: a working one is lent all the same."""
    pool = connection.pool  # type: ignore[attr-defined]
    listener = pool.getconn()
    listener.execute("LISTEN inspector_test_channel")
    pid = listener.info.backend_pid
    pool.putconn(listener)
    with other_connection() as other:
        other.autocommit = True
        other.execute("NOTIFY inspector_test_channel, 'hello'")
    # The listening session sends the notification when the server gets round to it (on a busy
    # machine, after the pool was asked): wait until it is on the socket, as a goodbye would be.
    waiting = select.poll()
    waiting.register(listener.fileno(), select.POLLIN | select.POLLPRI)
    assert waiting.poll(10_000), "the notification never reached the listening connection"
    checks = _FullChecks(monkeypatch)

    taken: list[Any] = []
    try:
        while not taken or taken[-1].info.backend_pid != pid:
            assert len(taken) < 30, "the listening connection was never lent"
            taken.append(_borrowed())
        assert taken[-1].execute("SELECT 1").fetchone() == (1,)
        taken[-1].execute("UNLISTEN *")
    finally:
        for conn in taken:
            pool.putconn(conn)
    assert checks.count == 1  # the listening one only
