"""The stdio proxy put together: a key's recorder around ``servers.proxy.stdio.run``."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from django.conf import settings
from django.db import Error as DatabaseError
from django.db import connections

from conversations.loop.wire import WireExchange
from conversations.proxy.keys import authenticate
from conversations.proxy.models import ProxyKey
from conversations.proxy.recording import record_mcp
from servers.proxy.pairing import Pairer
from servers.proxy.recorder import KeyRefused, Recorder, Store
from servers.proxy.spool import Spool
from servers.proxy.stdio import run

# How long the proxy waits, once the server has exited, for its last records to be stored or spooled.
FINISH_SECONDS = 15.0
# The longest one store waits for a database connection. The proxy has one writer thread, so a
# pool wait only ever means the database is unreachable: fail fast and spool (the web processes'
# DATABASE_POOL_TIMEOUT_SECONDS, 30 s by default, would outlast a host's patience at exit).
POOL_WAIT_SECONDS = 3.0
SWITCH_SECONDS = 0.0005


def key_store(raw_key: str) -> Store:
    """``record_mcp`` under the key ``raw_key``, authenticated on first use (from the recorder's
    thread, so a database that is down at start delays nothing).

    Raises (from the returned function):
        KeyRefused: the key is unknown or revoked.
        django.db.Error: the database is unreachable (this thread's connections are closed, so
            a retry opens fresh ones).
    """
    found: list[ProxyKey] = []

    def store(session: str | None, server_name: str, records: Sequence[WireExchange]) -> object:
        try:
            if not found:
                key = authenticate(raw_key)
                if key is None:
                    raise KeyRefused(raw_key[:8])
                found.append(key)
            return record_mcp(
                found[0], session=session, server_name=server_name, records=records, secrets=(raw_key,)
            )
        except DatabaseError:
            connections.close_all()
            raise

    return store


def proxy_stdio(command: Sequence[str], *, raw_key: str, name: str, session: str | None) -> int:
    """Proxy ``command`` on this process's stdin/stdout/stderr, recording under ``raw_key``;
    returns the exit code to exit with.

    Raises:
        OSError: the command could not be started.
    """
    _fail_fast_without_a_database()
    _quiet_logging()
    # The byte pumps and the recorder share the GIL: when the recorder holds it (redacting,
    # sealing, writing a batch), the pumps wait for the next switch, 5 ms by default, on every
    # message. A shorter interval hands it back to them sooner (bench P13).
    sys.setswitchinterval(SWITCH_SECONDS)
    recorder = Recorder(
        store=key_store(raw_key),
        spool=Spool(Path(settings.VAR_DIR), raw_key),
        pairer=Pairer(line_limit=settings.MCP_STDOUT_LINE_LIMIT, body_limit=settings.EXCHANGE_BODY_LIMIT),
        session=session,
        server_name=name,
        secrets=(raw_key,),
        queue_limit=settings.PROXY_QUEUE_LIMIT,
    )
    # Recording costs CPU the byte pumps would otherwise wait behind (the GIL): it runs in a
    # process of its own (bench P13).
    recorder.start(own_process=True)
    try:
        return asyncio.run(run(command, recorder))
    finally:
        if not recorder.finish(FINISH_SECONDS):
            sys.stderr.write(
                f"proxy: recording did not finish within {FINISH_SECONDS:.0f} s; what it had not stored is lost\n"
            )


def _quiet_logging() -> None:
    """Only what an operator must see reaches stderr, which a host shows in its own log beside
    the server's: warnings and errors, and the recorder's own notes (written there directly:
    the database away, back, a key refused). Not a line for each group stored (the seal's INFO),
    nor the connection pool's warning at every retry while the database is away, which the
    recorder has said once."""
    logging.getLogger().setLevel(logging.WARNING)
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)


def _fail_fast_without_a_database() -> None:
    """Shorten this process's pool wait before its first connection (see POOL_WAIT_SECONDS)."""
    options = settings.DATABASES["default"].get("OPTIONS") or {}
    pool = options.get("pool")
    if isinstance(pool, dict):
        pool["timeout"] = min(float(pool.get("timeout", POOL_WAIT_SECONDS)), POOL_WAIT_SECONDS)
