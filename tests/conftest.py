"""Shared fixtures. With REQUIRE_SERVICES=1 (``make test``, CI) a missing PostgreSQL or Redis
stops the run with a clear message instead of letting tests skip."""

from __future__ import annotations

import collections
import logging
import os
import subprocess
import sys
import threading
import time
import traceback
import warnings
from collections.abc import AsyncIterator, Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import psycopg
import psycopg_pool
import pytest
import redis
from asgiref.sync import sync_to_async
from celery import Celery
from django.conf import settings
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.signals import connection_created
from kombu.exceptions import OperationalError as KombuOperationalError

from tests.support import REPO_ROOT


def pytest_sessionstart(session: pytest.Session) -> None:
    # Once Django has configured logging (which would drop a handler added before).
    logging.getLogger("psycopg.pool").addHandler(_POOL_WARNINGS)
    if os.environ.get("REQUIRE_SERVICES") != "1":
        return
    problems = []
    if settings.DATABASES["default"]["ENGINE"] != "inspector.postgresql":
        problems.append("DATABASE_URL must point at PostgreSQL")
    else:
        db = settings.DATABASES["default"]
        try:
            psycopg.connect(
                host=db.get("HOST") or "127.0.0.1",
                port=db.get("PORT") or 5432,
                user=db.get("USER") or None,
                password=db.get("PASSWORD") or None,
                dbname=db["NAME"],
                connect_timeout=5,
            ).close()
        except psycopg.Error as exc:
            problems.append(f"PostgreSQL is not reachable: {exc}")
    if not settings.REDIS_URL:
        problems.append("REDIS_URL must be set")
    else:
        try:
            redis.Redis.from_url(settings.REDIS_URL).ping()
        except Exception as exc:  # noqa: BLE001 — reported below
            problems.append(f"Redis is not reachable at {settings.REDIS_URL}: {exc}")
    if problems:
        pytest.exit("the test services are missing: " + "; ".join(problems), returncode=3)


# Which thread, from where, last took each PostgreSQL session (by its backend pid): a session
# still open when the run ends ("database is being accessed by other users" as the test
# database is dropped) is then named by where it was taken, not guessed at. ``_LENT`` below
# keeps, of those, the ones the pool has lent and not had back (the leak check).
_TAKEN: dict[int, str] = {}
_RUNNING: list[str | None] = [None]


def _note_taken(sender: object, connection: BaseDatabaseWrapper, **kwargs: object) -> None:
    if connection.vendor != "postgresql" or connection.connection is None:
        return
    # The frames that took it, without Django's and asgiref's own below them.
    frames = [
        frame
        for frame in traceback.extract_stack()[:-2]
        if "/django/" not in frame.filename and "/asgiref/" not in frame.filename
    ]
    stack = "".join(traceback.format_list(frames[-10:]))
    pid, thread = connection.connection.info.backend_pid, threading.current_thread().name
    during = _RUNNING[0] or "no test"
    _TAKEN[pid] = f"thread {thread!r} during {during}\n{stack}"
    lender = id(getattr(connection.connection, "_pool", None))
    _LENT[id(connection.connection)] = _Lent(lender, pid, thread, during, stack)


connection_created.connect(_note_taken)


# The connections the pool has lent and not had back, as Django took them: a thread that ends
# holding one lets it be closed by the garbage collector, so PostgreSQL no longer lists its
# session while the pool still counts it as lent. Only the pool knows it was handed back.
class _Lent(NamedTuple):
    pool: int
    pid: int
    thread: str
    during: str
    stack: str


_LENT: dict[int, _Lent] = {}
_putconn = psycopg_pool.ConnectionPool.putconn


def _putconn_noted(self: psycopg_pool.ConnectionPool, conn: Any) -> None:
    _LENT.pop(id(conn), None)
    _putconn(self, conn)


psycopg_pool.ConnectionPool.putconn = _putconn_noted  # type: ignore[method-assign,assignment]


class _PoolWarnings(logging.Handler):
    """The pool's last warnings (a failed connection attempt, a connection discarded), kept to
    say why it had none to lend."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.last: collections.deque[str] = collections.deque(maxlen=5)

    def emit(self, record: logging.LogRecord) -> None:
        self.last.append(f"{time.strftime('%H:%M:%S', time.localtime(record.created))} {record.getMessage()}")


_POOL_WARNINGS = _PoolWarnings()


# --- a pooled connection a test's thread took and never handed back ---------------------------
# A thread that ends (or idles) holding a connection from the process's pool keeps it for good:
# the pool counts it as lent. One xdist process runs over a thousand tests against a pool of
# twenty, so a few such leaks end, much later, as a PoolTimeout in an unrelated test. Each test
# is therefore checked when its teardown is over: a connection that a thread other than this one
# took during the test and has not handed back (``_LENT``) is that test's error, naming the
# thread and where it took it.

# A thread still finishing (a turn the test stopped waiting for) may hand its connection back
# this long after the test; a busy CI host is slow, and only a connection kept costs the wait.
LEAK_GRACE_SECONDS = 10.0


def _pool() -> psycopg_pool.ConnectionPool | None:
    """This process's pool, if PostgreSQL's backend has made it (asking for it would make it)."""
    database = connections["default"]
    made: dict[str, psycopg_pool.ConnectionPool] = getattr(type(database), "_connection_pools", {})
    return made.get(database.alias)


def _kept_from(test: str) -> list[_Lent]:
    """The connections other threads took from this process's pool during ``test`` and still
    hold (this thread's own is the test's, handed back by Django)."""
    pool = _pool()
    if pool is None:
        return []
    main = threading.current_thread().name
    return [
        held
        for held in list(_LENT.values())
        if held.during == test and held.pool == id(pool) and held.thread != main
    ]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    yield
    kept = _kept_from(item.nodeid)
    deadline = time.monotonic() + LEAK_GRACE_SECONDS
    # A thread the test joined with a timeout may still be handing its connection back.
    while kept and time.monotonic() < deadline:
        time.sleep(0.05)
        kept = _kept_from(item.nodeid)
    if kept:
        pytest.fail(
            f"{len(kept)} pooled database connection(s) taken during this test were never handed back:\n"
            + "\n".join(
                f"backend {held.pid}, by thread {held.thread!r}, taken at:\n{held.stack}" for held in kept
            ),
            pytrace=False,
        )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _RUNNING[0] = item.nodeid


def _pool_timeout_in(error: BaseException | None) -> bool:
    while error is not None:
        if isinstance(error, psycopg_pool.PoolTimeout):
            return True
        error = error.__cause__ or error.__context__
    return False


def _why_no_connection() -> str:
    """What a PoolTimeout alone does not say: whether this process's pool was used up (every
    connection lent) or PostgreSQL refused new ones (the pool kept failing to connect)."""
    database = connections["default"]
    lines = []
    pool = _pool()
    if pool is not None:
        lines.append(f"this process's pool: {pool.get_stats()}")
    lent = [held for held in list(_LENT.values()) if pool is not None and held.pool == id(pool)]
    params = database.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    params["connect_timeout"] = 5
    try:
        with psycopg.connect(**params) as check:
            limit = check.execute("SHOW max_connections").fetchone()
            rows = check.execute(
                "SELECT datname, state, count(*) FROM pg_stat_activity WHERE backend_type ="
                " 'client backend' GROUP BY 1, 2 ORDER BY 3 DESC"
            ).fetchall()
            open_sessions = {
                pid: f"{state} since {since}, last query {query!r}"
                for pid, state, since, query in check.execute(
                    "SELECT pid, state, now() - state_change, left(query, 200) FROM pg_stat_activity"
                    " WHERE pid = ANY(%s)",
                    [[held.pid for held in lent]],
                )
            }
        lines.append(f"PostgreSQL's max_connections {limit[0] if limit else '?'}; sessions: {rows}")
    except psycopg.Error as exc:
        lines.append(f"a new connection to PostgreSQL failed too: {exc}")
        open_sessions = {}
    lines.append(f"the pool's last warnings: {list(_POOL_WARNINGS.last) or 'none'}")
    # Grouped by the test and the code that took them: twenty turn threads are one cause.
    lines.append(f"lent and not handed back: {len(lent)}")
    by_cause: dict[tuple[str, str], list[_Lent]] = {}
    for held in lent:
        by_cause.setdefault((held.during, held.stack), []).append(held)
    for (during, stack), group in by_cause.items():
        lines.append(f"{len(group)} taken during {during}, by threads {sorted({h.thread for h in group})}:")
        closed = "closed (its thread ended holding it?)"
        lines.append("  " + "; ".join(f"backend {h.pid}: {open_sessions.get(h.pid, closed)}" for h in group))
        lines.append(f"  taken at:\n{stack}")
    return "\n".join(lines)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if call.excinfo is not None and _pool_timeout_in(call.excinfo.value):
        report.sections.append((_WHY_NO_CONNECTION, _why_no_connection()))
    return report


_WHY_NO_CONNECTION = "why no database connection"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The PoolTimeouts' explanations again, last: a long run's log is often read from its end."""
    for kind in ("failed", "error"):
        for report in terminalreporter.stats.get(kind, []):
            for title, text in getattr(report, "sections", []):
                if title == _WHY_NO_CONNECTION:
                    terminalreporter.write_sep("-", f"{_WHY_NO_CONNECTION}: {report.nodeid}")
                    terminalreporter.write_line(text)


@pytest.fixture(scope="session", autouse=True)
def _flush_by_delete() -> Iterator[None]:
    """A transactional test's database is emptied with ``DELETE`` where Django's PostgreSQL
    backend uses ``TRUNCATE``: on the test tables, a few rows each, ``TRUNCATE`` makes and
    unlinks every table's and index's files and took about a second a test here, ``DELETE``
    some milliseconds. The same rows go: every table is listed (no ``available_apps``), and the
    foreign keys (all ``DEFERRABLE``) are checked at the commit, when the rows they referred to
    are gone too. A flush that resets sequences or cascades to tables left off the list keeps
    Django's ``TRUNCATE``."""
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncate = DatabaseOperations.sql_flush

    def sql_flush(
        self: DatabaseOperations,
        style: Any,
        tables: list[str],
        *,
        reset_sequences: bool = False,
        allow_cascade: bool = False,
    ) -> list[str]:
        if reset_sequences or allow_cascade or not tables:
            return truncate(self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
        deleted = [
            f"{style.SQL_KEYWORD('DELETE FROM')} {style.SQL_FIELD(self.quote_name(t))};" for t in tables
        ]
        return [f"{style.SQL_KEYWORD('SET CONSTRAINTS ALL DEFERRED')};", *deleted]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(DatabaseOperations, "sql_flush", sql_flush)
        yield


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """pytest-django's, and before the test database is dropped: a warning for each session of
    it still open in this process's other threads, naming where it was taken. The turn
    lifecycle thread is stopped first: it would go on checking a database that is gone."""
    yield
    from conversations.lifecycle import lifecycle_stop

    lifecycle_stop()
    database = connections["default"]
    if database.vendor != "postgresql":
        return
    with django_db_blocker.unblock():
        # As pytest-django's teardown does next: what is left is held by a thread.
        database.close()
        database.close_pool()
        params = database.get_connection_params()
        params.pop("cursor_factory", None)
        params.pop("context", None)
        params.setdefault("connect_timeout", 5)
        params["autocommit"] = True  # each look its own snapshot of pg_stat_activity
        try:
            with psycopg.connect(**params) as check:
                # A session whose connection was just closed ends on the server a moment later
                # (on a busy host, after the first look): look again before calling it left open.
                deadline = time.monotonic() + 3.0
                while True:
                    left_open = check.execute(
                        "SELECT pid, state, left(query, 300) FROM pg_stat_activity WHERE datname ="
                        " current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
                    ).fetchall()
                    if not left_open or time.monotonic() > deadline:
                        break
                    time.sleep(0.1)
        except psycopg.Error as exc:
            warnings.warn(f"could not look for sessions left open: {exc}", pytest.PytestWarning, stacklevel=1)
            return
    for pid, state, query in left_open:
        warnings.warn(
            f"a session of the test database is still open (backend {pid}, {state}, last query "
            f"{query!r}); it was taken by {_TAKEN.get(pid, 'no thread of this process')}",
            pytest.PytestWarning,
            stacklevel=1,
        )


@pytest.fixture
def redis_url() -> str:
    """The Redis the scaled deployment uses; a test that needs it fails (never skips) without it."""
    if not settings.REDIS_URL:
        pytest.fail("this test needs REDIS_URL (run it through `make test`)")
    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        client.ping()
    except redis.ConnectionError as exc:
        pytest.fail(f"Redis is not reachable at {settings.REDIS_URL}: {exc}")
    return str(settings.REDIS_URL)


@pytest.fixture
async def async_db_connections() -> AsyncIterator[None]:
    """Close the connection the async ORM opened in its worker thread, so the test database can be dropped."""
    yield
    await sync_to_async(connections.close_all)()


def _database_url() -> str:
    db = settings.DATABASES["default"]
    if db["ENGINE"] != "inspector.postgresql":
        pytest.fail("a real Celery worker needs the PostgreSQL test database (run through `make test`)")
    user = db.get("USER") or ""
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    auth = f"{user}{password}@" if user else ""
    return f"postgres://{auth}{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}/{db['NAME']}"


@contextmanager
def running_celery_worker(redis_url: str, **extra_env: str) -> Iterator[subprocess.Popen[str]]:
    """A real ``celery worker`` process on the real Redis, using the test database (plus ``extra_env``)."""
    redis.Redis.from_url(redis_url).flushdb()
    env = {
        **os.environ,
        "DATABASE_URL": _database_url(),
        "REDIS_URL": redis_url,
        "VAR_DIR": str(settings.VAR_DIR),
        "SECRET_KEY": settings.SECRET_KEY,
        **extra_env,
    }
    log = worker_log_path().open("w")
    worker = subprocess.Popen(
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
            "8",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-l",
            "info",
            "-n",
            f"test-{os.getpid()}@%h",
        ],
        cwd=REPO_ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )
    if not worker_answers(redis_url, worker, within=60):
        worker.kill()
        pytest.fail(f"the Celery worker did not come up; see {log.name}")
    try:
        yield worker
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()
        log.close()


def worker_answers(redis_url: str, worker: subprocess.Popen[str], within: float) -> bool:
    """Whether ``worker`` answers a ping through the broker at ``redis_url`` within ``within`` seconds.

    The ping goes through an app of its own on that broker (``app.control`` publishes through the
    configured broker whatever connection it is given).
    """
    deadline = time.monotonic() + within
    probe = Celery("probe", broker=redis_url, set_as_current=False)
    try:
        while True:
            try:
                if probe.control.ping(timeout=0.5):
                    return True
            except (OSError, KombuOperationalError, redis.ConnectionError):
                pass  # the broker is not back yet
            if worker.poll() is not None or time.monotonic() > deadline:
                return False
    finally:
        probe.close()


def worker_log_path() -> Path:
    return Path(settings.VAR_DIR) / "celery-worker-test.log"


@pytest.fixture
def celery_worker(redis_url: str, transactional_db: None) -> Iterator[subprocess.Popen[str]]:
    """A real ``celery worker`` process on the real Redis, using the test database."""
    with running_celery_worker(redis_url) as worker:
        yield worker
