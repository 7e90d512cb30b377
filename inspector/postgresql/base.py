"""Django's PostgreSQL backend, with two additions.

Its connection pool tests a connection before lending it with
``conversations.connections.check_pooled_connection``: a dead one found has the pool drop every
dead idle one at once, instead of trying them one by one a backoff apart. Django builds the pool
itself and gives psycopg_pool's plain test as its ``check`` (with ``CONN_HEALTH_CHECKS``), so the
setting cannot name another one; this backend sets it on the pool Django built, once, before the
pool lends its first connection.

It lends cursors whose statements PostgreSQL prepares (:meth:`DatabaseWrapper.prepared_cursor`):
parsed and planned once per connection, then run with new values. Django's own cursors bind
values on the client (the values are written into the statement's text), so PostgreSQL parses
and plans every statement anew; for the short reads run on every turn and every live row, the
planning took more of the database's time than running them. Only the callers that ask for such
a cursor use it, with statements of a fixed text. ``OPTIONS["prepared_statements"]`` (on unless
set False: ``DATABASE_PREPARED_STATEMENTS``) turns it off, for a connection pooler in front of
PostgreSQL that cannot carry prepared statements; the cursor is then Django's plain one.
"""

from __future__ import annotations

from typing import Any

import psycopg
from django.core.exceptions import ImproperlyConfigured
from django.db.backends.postgresql import base, operations
from django.db.backends.utils import CursorWrapper

from conversations.connections import check_pooled_connection


class _PreparingCursor(psycopg.Cursor[Any]):
    """psycopg's server-side binding cursor (``$n`` parameters, as Django's with
    ``server_side_binding``), preparing every statement it runs: the first run on a connection
    prepares it, later ones run the prepared plan.

    The connection's threshold for preparing is set only while this cursor runs a statement. At
    any other time it is None, as Django leaves it: psycopg then keeps no account of the other
    statements at all. A statement bound on the client carries its values in its text, and psycopg
    would keep up to a hundred such texts per connection, a 10 MB body among them."""

    def execute(
        self, query: Any, params: Any = None, *, prepare: bool | None = None, binary: bool | None = None
    ) -> Any:
        conn = self.connection
        conn.prepare_threshold = _ONLY_WHEN_ASKED
        try:
            return super().execute(query, params, prepare=True, binary=binary)
        finally:
            conn.prepare_threshold = None


# psycopg prepares a statement by itself once it has run this many times on a connection, and
# never, not even when asked, when the threshold is None.
_ONLY_WHEN_ASKED = 2**31 - 1


class DatabaseOperations(operations.DatabaseOperations):
    def last_executed_query(self, cursor: Any, sql: str, params: Any) -> str:
        """A prepared statement's run as Django logs a statement bound on the client: its text
        with the values in place."""
        if isinstance(cursor, _PreparingCursor):
            try:
                composed: str = self.compose_sql(sql, params)
                return composed
            except psycopg.errors.DataError:  # a value it cannot quote: the text alone
                return sql
        return super().last_executed_query(cursor, sql, params)


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations

    def get_connection_params(self) -> dict[str, Any]:
        params = super().get_connection_params()
        params.pop("prepared_statements", None)
        if params.get("prepare_threshold") is not None:
            raise ImproperlyConfigured(
                "OPTIONS['prepare_threshold'] would prepare Django's statements, bound on the client"
                " with their values in their text: use OPTIONS['prepared_statements']"
            )
        return params

    @property
    def prepares(self) -> bool:
        """Whether ``prepared_cursor`` prepares (the setting: a pooled connection was made by
        whichever thread's wrapper built the pool)."""
        return self.settings_dict["OPTIONS"].get("prepared_statements", True) is not False

    def prepared_cursor(self) -> CursorWrapper:
        """A cursor, wrapped as ``cursor()`` wraps Django's, whose statements PostgreSQL prepares
        on this connection the first time each runs; Django's plain cursor when prepared
        statements are turned off. For statements of a fixed text only: each text is prepared
        once per connection (psycopg keeps the last hundred)."""
        if not self.prepares:
            return self.cursor()
        self.close_if_health_check_failed()
        self.ensure_connection()
        with self.wrap_database_errors:
            cursor: Any = _PreparingCursor(self.connection)  # Django's stubs take it for a wrapper
        # As Django wraps its own (``_prepare_cursor``): the query log and its error mapping.
        self.validate_thread_sharing()
        wrapped: CursorWrapper = (
            self.make_debug_cursor(cursor) if self.queries_logged else self.make_cursor(cursor)
        )
        return wrapped

    @property
    def pool(self) -> Any:
        pool = super().pool
        if pool is not None and getattr(pool, "_check", None) is not check_pooled_connection:
            if not hasattr(pool, "_check"):  # a psycopg_pool that keeps its test elsewhere
                raise ImproperlyConfigured("this psycopg_pool does not keep its connection test as _check")
            pool._check = check_pooled_connection
        return pool
