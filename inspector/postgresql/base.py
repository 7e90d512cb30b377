"""Django's PostgreSQL backend, whose connection pool tests a connection before lending it with
``conversations.connections.check_pooled_connection``: a dead one found has the pool drop every
dead idle one at once, instead of trying them one by one a backoff apart.

Django builds the pool itself and gives psycopg_pool's plain test as its ``check`` (with
``CONN_HEALTH_CHECKS``), so the setting cannot name another one; this backend sets it on the pool
Django built, once, before the pool lends its first connection.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db.backends.postgresql import base

from conversations.connections import check_pooled_connection


class DatabaseWrapper(base.DatabaseWrapper):
    @property
    def pool(self) -> Any:
        pool = super().pool
        if pool is not None and getattr(pool, "_check", None) is not check_pooled_connection:
            if not hasattr(pool, "_check"):  # a psycopg_pool that keeps its test elsewhere
                raise ImproperlyConfigured("this psycopg_pool does not keep its connection test as _check")
            pool._check = check_pooled_connection
        return pool
