"""The proxy keys page: a user's own keys, the raw key shown once, revoking; CSRF on every form;
another user's key is not there (404)."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client

from conversations.proxy.keys import authenticate, key_hash
from conversations.proxy.models import ProxyKey

pytestmark = pytest.mark.django_db


def _client(user: User, *, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client


def test_a_new_key_is_shown_once_stored_hashed_and_works_until_revoked() -> None:
    alice = User.objects.create_user("alice")
    client = _client(alice)

    made = client.post(
        "/proxy-keys/new", {"name": "laptop", "openai_upstream": "http://127.0.0.1:9/v1"}
    ).content.decode()

    raw = re.search(r"<code>(tci_[A-Za-z0-9_\-]{43})</code>", made)
    assert raw is not None
    key = ProxyKey.objects.get(user=alice)
    assert key.key_hash == key_hash(raw.group(1)) and raw.group(1) not in str(ProxyKey.objects.values().get())
    assert authenticate(raw.group(1)) == key
    listed = client.get("/proxy-keys/").content.decode()
    assert key.prefix in listed and raw.group(1) not in listed and "http://127.0.0.1:9/v1" in listed
    assert "Proxy keys" in client.get("/").content.decode()

    client.post(f"/proxy-keys/{key.prefix}/revoke")

    assert authenticate(raw.group(1)) is None
    key.refresh_from_db()
    assert key.revoked_at is not None


def test_another_users_key_is_neither_listed_nor_revocable() -> None:
    alice = User.objects.create_user("alice")
    bob = User.objects.create_user("bob", is_staff=True)
    _client(alice).post("/proxy-keys/new", {"name": "alice-laptop"})
    key = ProxyKey.objects.get(user=alice)

    assert "alice-laptop" not in _client(bob).get("/proxy-keys/").content.decode()
    assert _client(bob).post(f"/proxy-keys/{key.prefix}/revoke").status_code == 404
    key.refresh_from_db()
    assert key.revoked_at is None


def test_every_form_of_the_page_needs_the_csrf_token() -> None:
    alice = User.objects.create_user("alice")
    _client(alice).post("/proxy-keys/new", {"name": "laptop"})
    key = ProxyKey.objects.get(user=alice)
    client = _client(alice, csrf=True)

    assert client.post("/proxy-keys/new", {"name": "x"}).status_code == 403
    assert client.post(f"/proxy-keys/{key.prefix}/revoke").status_code == 403
    assert ProxyKey.objects.filter(user=alice).count() == 1 and ProxyKey.objects.get().revoked_at is None
    page = client.get("/proxy-keys/").content.decode()
    assert page.count('name="csrfmiddlewaretoken"') >= 2
