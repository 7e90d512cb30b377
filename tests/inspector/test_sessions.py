"""Who sent a request: Django's ``cached_db`` sessions (``SESSION_ENGINE``, on the cache of
``settings.CACHES``: local memory embedded, Redis with ``REDIS_URL``) and Django's
``ModelBackend`` — a session only until it expires, a user only while they may sign in."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.auth.models import User
from django.contrib.sessions.backends.cached_db import SessionStore
from django.contrib.sessions.models import Session
from django.core.cache import caches
from django.test import Client
from django.utils import timezone

pytestmark = pytest.mark.django_db(transaction=True)

MODEL_BACKEND = "django.contrib.auth.backends.ModelBackend"


def _signed_in(user: User) -> Client:
    """A client whose session cookie names ``user`` signed in by Django's ``ModelBackend``."""
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = MODEL_BACKEND
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.save()
    client = Client(HTTP_HOST="127.0.0.1")
    client.cookies[settings.SESSION_COOKIE_NAME] = session.session_key or ""
    return client


def test_sessions_are_djangos_cached_database_sessions_and_sign_in_is_djangos_model_backend() -> None:
    assert settings.SESSION_ENGINE == "django.contrib.sessions.backends.cached_db"
    assert settings.AUTHENTICATION_BACKENDS == [MODEL_BACKEND]
    expected = (
        "django.core.cache.backends.redis.RedisCache"
        if settings.REDIS_URL
        else ("django.core.cache.backends.locmem.LocMemCache")
    )
    assert settings.CACHES[settings.SESSION_CACHE_ALIAS]["BACKEND"] == expected


def test_a_session_is_kept_in_the_database_and_read_back_when_the_cache_lost_it() -> None:
    session = SessionStore()
    session["colour"] = "dark"
    session.save()
    key = session.session_key

    assert Session.objects.filter(session_key=key).exists()
    caches[settings.SESSION_CACHE_ALIAS].delete(SessionStore(key).cache_key)
    assert SessionStore(key).load() == {"colour": "dark"}


def test_an_expired_session_is_empty_and_an_unknown_one_too() -> None:
    session = SessionStore()
    session["colour"] = "dark"
    session.set_expiry(timezone.now() - timedelta(seconds=1))
    session.save()
    expired = SessionStore(session.session_key)
    assert expired.load() == {}
    unknown = SessionStore("x" * 32)
    assert unknown.load() == {} and unknown.session_key is None


def test_signing_in_through_the_form_is_remembered_by_the_session() -> None:
    User.objects.create_user("alice", password="not-secret-at-all")
    client = Client(HTTP_HOST="127.0.0.1")
    assert client.get("/").status_code == 302  # not signed in yet
    response = client.post("/accounts/login/", {"username": "alice", "password": "not-secret-at-all"})
    assert response.status_code == 302
    assert client.session[BACKEND_SESSION_KEY] == MODEL_BACKEND
    assert client.get("/").status_code == 200


def test_a_wrong_password_is_refused_and_signs_no_one_in() -> None:
    User.objects.create_user("alice", password="not-secret-at-all")
    client = Client(HTTP_HOST="127.0.0.1")
    response = client.post("/accounts/login/", {"username": "alice", "password": "wrong-password"})
    assert response.status_code == 200 and SESSION_KEY not in client.session
    assert client.get("/").status_code == 302


def test_an_inactive_deleted_or_repassworded_user_is_signed_out() -> None:
    inactive, deleted, changed, kept = (
        User.objects.create_user(name, password="pw-not-secret") for name in "abcd"
    )
    clients = [_signed_in(user) for user in (inactive, deleted, changed)]
    still = _signed_in(kept)
    for client in (*clients, still):  # each session read once: now in the cache too
        assert client.get("/").status_code == 200
    User.objects.filter(pk=inactive.pk).update(is_active=False)
    deleted.delete()
    changed.set_password("another-one")
    changed.save()

    for client in clients:
        response = client.get("/")
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    assert still.get("/").status_code == 200


def test_signing_out_ends_the_session_for_every_later_request() -> None:
    user = User.objects.create_user("alice", password="pw-not-secret")
    client = _signed_in(user)
    key = client.cookies[settings.SESSION_COOKIE_NAME].value
    assert client.get("/").status_code == 200

    client.post("/accounts/logout/")

    stolen = Client(HTTP_HOST="127.0.0.1")
    stolen.cookies[settings.SESSION_COOKIE_NAME] = key
    assert stolen.get("/").status_code == 302
    assert not Session.objects.filter(session_key=key).exists()
