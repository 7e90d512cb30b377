"""Who sent a request: its session and the session's user, each read as a prepared statement.

Every page, API call made with a session and socket starts with these two reads (Django's
``LoginRequiredMiddleware``, Channels' ``get_user``). Django builds each as a queryset anew, and
PostgreSQL parses and plans each anew; here the session is one fixed statement and the user one
compiled read (``conversations.compiled_reads``), both prepared once per connection on
PostgreSQL (``conversations.connections.prepared_cursor``). What they read and answer is
Django's: the session only while it has not expired, the user only while they may sign in.
"""

from __future__ import annotations

import functools
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.sessions.backends import db as db_sessions
from django.contrib.sessions.models import Session
from django.core.exceptions import PermissionDenied
from django.db import connections, router
from django.db.models import Field
from django.utils import timezone

from conversations.compiled_reads import CompiledRead
from conversations.connections import prepared_cursor


class SessionStore(db_sessions.SessionStore):
    """Django's database sessions (``SESSION_ENGINE``), the session read as one fixed statement."""

    def _get_session_from_db(self) -> Session | None:
        db = connections[router.db_for_read(self.model)]
        now = db.ops.adapt_datetimefield_value(timezone.now())
        with prepared_cursor(db) as cursor:
            cursor.execute(_session_sql(db.alias), [self.session_key, now])
            row = cursor.fetchone()
        if row is None:  # none, or expired: as Django's, the key is not kept
            self._session_key = None
            return None
        return Session(session_key=self.session_key or "", session_data=row[0])


@functools.cache
def _session_sql(alias: str) -> str:
    quote = connections[alias].ops.quote_name
    table = quote(Session._meta.db_table)
    key, data, expires = (quote(_column(name)) for name in ("session_key", "session_data", "expire_date"))
    return f"SELECT {data} FROM {table} WHERE {key} = %s AND {expires} > %s"


def _column(name: str) -> str:
    field = Session._meta.get_field(name)
    if not isinstance(field, Field) or not field.column:
        raise TypeError(f"Session.{name} is not a column")
    return field.column


_user = CompiledRead(lambda user_id: get_user_model()._default_manager.filter(pk=user_id))


class UserBackend(ModelBackend):
    """Django's ``ModelBackend``, the session's user read by a compiled read. First in
    ``AUTHENTICATION_BACKENDS``; ``ModelBackend`` stays after it for sessions signed in before
    (a session names the backend that let its user in).

    Credentials it refuses are refused for good (``PermissionDenied`` ends Django's round of the
    backends): ``ModelBackend`` would give the same answer after hashing the password again."""

    def authenticate(
        self, request: Any, username: str | None = None, password: str | None = None, **kwargs: Any
    ) -> Any:
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is None:
            raise PermissionDenied
        return user

    def get_user(self, user_id: Any) -> Any:
        if type(user_id) is not int:
            return super().get_user(user_id)
        found = _user(user_id=user_id)
        if not found or not self.user_can_authenticate(found[0]):
            return None
        return found[0]
