"""Django's PostgreSQL backend, testing each connection its pool lends: a thin subclass on
Django's and psycopg_pool's public interfaces.

Django builds its connection pool itself (``OPTIONS["pool"]``) and gives it psycopg_pool's plain
test (``check``) when ``CONN_HEALTH_CHECKS`` is on; the test cannot be replaced through the
settings. The project leaves ``CONN_HEALTH_CHECKS`` off, so the pool lends without a test, and
tests here, in ``get_new_connection`` (the backend method Django opens a connection with), the
connection just borrowed: :func:`conversations.record.connections.connection_usable` (a quiet socket
lends it as it is; anything else takes psycopg_pool's test, an empty query). A dead one is given
back (the pool drops a broken connection) and the pool tests every idle connection at once
(``ConnectionPool.check``), so after a database restart the next try finds a working connection
or waits for a new one, instead of trying the dead ones one by one a backoff apart.
"""

from __future__ import annotations

from typing import Any

from django.db.backends.postgresql import base

from conversations.record.connections import connection_usable

# Borrowings tried before the last one is lent untested (and fails as any dead connection does).
ATTEMPTS = 3


class DatabaseWrapper(base.DatabaseWrapper):
    def get_new_connection(self, conn_params: Any) -> Any:
        connection = super().get_new_connection(conn_params)
        pool = self.pool
        for _ in range(ATTEMPTS):
            if pool is None or connection_usable(connection):
                break
            pool.putconn(connection)  # broken: the pool drops it and opens a replacement
            pool.check()  # every idle connection tested at once, the dead ones replaced
            connection = super().get_new_connection(conn_params)
        return connection
