"""Who sent a request (``inspector.sessions``): the session and its user are read as Django reads
them — a session only until it expires, a user only while they may sign in, a session signed in
by Django's own backend still honoured — and on PostgreSQL each read is a prepared statement."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, base_user
from django.contrib.auth.models import User
from django.contrib.auth.signals import user_login_failed
from django.contrib.sessions.models import Session
from django.db import connection
from django.test import Client
from django.utils import timezone

from inspector.sessions import SessionStore, UserBackend

pytestmark = pytest.mark.django_db(transaction=True)


def _signed_in(user: User, backend: str) -> Client:
    """A client whose session cookie names ``user`` signed in by ``backend``."""
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = backend
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.save()
    client = Client(HTTP_HOST="127.0.0.1")
    client.cookies["sessionid"] = session.session_key or ""
    return client


def test_a_session_is_read_until_it_expires_and_an_unknown_one_is_empty() -> None:
    session = SessionStore()
    session["colour"] = "dark"
    session.save()
    key = session.session_key

    assert SessionStore(key).load() == {"colour": "dark"}
    Session.objects.filter(session_key=key).update(expire_date=timezone.now() - timedelta(seconds=1))
    expired = SessionStore(key)
    assert expired.load() == {}
    assert expired.session_key is None  # as Django's: an expired key is not kept
    unknown = SessionStore("x" * 32)
    assert unknown.load() == {} and unknown.session_key is None


@pytest.mark.parametrize(
    "backend", ["inspector.sessions.UserBackend", "django.contrib.auth.backends.ModelBackend"]
)
def test_a_signed_in_user_gets_their_pages_whichever_backend_signed_them_in(backend: str) -> None:
    user = User.objects.create_user("alice", password="not-secret-at-all")
    assert _signed_in(user, backend).get("/").status_code == 200


def test_signing_in_through_the_form_is_remembered_by_the_session() -> None:
    User.objects.create_user("alice", password="not-secret-at-all")
    client = Client(HTTP_HOST="127.0.0.1")
    response = client.post("/accounts/login/", {"username": "alice", "password": "not-secret-at-all"})
    assert response.status_code == 302
    assert client.session[BACKEND_SESSION_KEY] == "inspector.sessions.UserBackend"
    assert client.get("/").status_code == 200


@pytest.mark.parametrize("username", ["alice", "nobody"])
def test_a_refused_sign_in_hashes_the_password_once_and_is_refused(
    username: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not once per backend listed: the second, Django's own, would answer the same."""
    User.objects.create_user("alice", password="not-secret-at-all")
    hashed: list[str] = []
    for name in ("check_password", "make_password"):
        plain = getattr(base_user, name)
        monkeypatch.setattr(
            base_user,
            name,
            lambda *args, _plain=plain, _name=name, **kw: (hashed.append(_name), _plain(*args, **kw))[1],
        )
    failed: list[str] = []
    user_login_failed.connect(
        lambda **kwargs: failed.append(kwargs["credentials"]["username"]), weak=False, dispatch_uid="t"
    )
    try:
        client = Client(HTTP_HOST="127.0.0.1")
        response = client.post("/accounts/login/", {"username": username, "password": "wrong-password"})
    finally:
        user_login_failed.disconnect(dispatch_uid="t")
    assert response.status_code == 200 and SESSION_KEY not in client.session
    assert len(hashed) == 1, hashed
    assert failed == [username]


def test_an_inactive_deleted_or_repassworded_user_is_signed_out() -> None:
    inactive, deleted, changed = (User.objects.create_user(name, password="pw-not-secret") for name in "abc")
    clients = [_signed_in(user, "inspector.sessions.UserBackend") for user in (inactive, deleted, changed)]
    User.objects.filter(pk=inactive.pk).update(is_active=False)
    deleted.delete()
    changed.set_password("another-one")
    changed.save()

    for client in clients:
        response = client.get("/")
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    assert UserBackend().get_user(inactive.pk) is None and UserBackend().get_user(deleted.pk) is None
    # A user id in another form (a session written by hand) is read as Django reads it.
    assert UserBackend().get_user(str(changed.pk)) == changed


@pytest.mark.postgres
def test_on_postgresql_the_session_and_its_user_are_prepared_statements() -> None:
    user = User.objects.create_user("alice", password="pw-not-secret")
    client = _signed_in(user, "inspector.sessions.UserBackend")
    for _ in range(2):
        assert client.get("/").status_code == 200
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements WHERE NOT from_sql")
        prepared = [row[0] for row in cursor.fetchall()]
    assert any('FROM "django_session"' in text and "$2" in text for text in prepared), prepared
    assert any('FROM "auth_user"' in text and "$1" in text for text in prepared), prepared
