"""Proxy keys (``conversations.proxy.keys``): a look-up leaves no database connection behind in
the thread that made it, and the process's recent keys answer for at most ``KEY_CACHE_SECONDS``
— a key revoked elsewhere is refused once that bound has passed, at once where it was revoked."""

from __future__ import annotations

import threading

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db import connection
from django.utils import timezone

from conversations.proxy import keys
from conversations.proxy.keys import KeyCache, authenticate, create_key, revoke
from conversations.proxy.models import ProxyKey

pytestmark = pytest.mark.django_db(transaction=True)


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def alice() -> User:
    return get_user_model().objects.create_user("alice")


def _in_a_thread(raw: str) -> tuple[ProxyKey | None, bool, bool]:
    """(the key found, whether the thread had a connection before, whether it has one after) of
    a look-up in a thread of its own, as the proxy's look-ups run."""
    seen: list[tuple[ProxyKey | None, bool, bool]] = []

    def look_up() -> None:
        before = connection.connection is not None
        found = authenticate(raw)
        seen.append((found, before, connection.connection is not None))

    thread = threading.Thread(target=look_up)
    thread.start()
    thread.join(30)
    return seen[0]


def test_a_look_up_closes_the_connection_it_opened_in_its_thread(alice: User) -> None:
    key, raw = create_key(alice, openai_upstream="http://127.0.0.1:9/v1")

    found, had_one, left_open = _in_a_thread(raw)

    assert found == key and found.user == alice
    assert not had_one and not left_open


def test_a_look_up_leaves_a_connection_its_thread_already_held(alice: User) -> None:
    key, raw = create_key(alice)
    assert ProxyKey.objects.filter(pk=key.pk).exists()  # this thread's connection is open
    held = connection.connection

    assert authenticate(raw) == key

    assert connection.connection is held


def test_a_key_revoked_in_another_process_is_refused_once_the_cache_bound_has_passed(alice: User) -> None:
    clock = Clock()
    cache = KeyCache(seconds=5.0, size=16, clock=clock)
    key, raw = create_key(alice)
    assert cache.authenticate(raw) == key
    # Another web process revokes it: this one's cache does not hear of it.
    ProxyKey.objects.filter(pk=key.pk).update(revoked_at=timezone.now())

    clock.now += 4.9
    assert cache.authenticate(raw) == key
    clock.now += 0.1
    assert cache.authenticate(raw) is None


def test_a_key_revoked_in_this_process_is_refused_at_once(alice: User) -> None:
    key, raw = create_key(alice)
    assert keys.RECENT.authenticate(raw) == key

    revoke(key)

    assert keys.RECENT.authenticate(raw) is None


def test_unknown_keys_are_never_kept_and_the_cache_holds_at_most_its_size(alice: User) -> None:
    cache = KeyCache(seconds=60.0, size=2, clock=Clock())
    made = [create_key(alice, name=str(n)) for n in range(3)]

    assert cache.authenticate("tci_" + "x" * 43) is None
    for _, raw in made:
        cache.authenticate(raw)

    assert cache.get(made[0][1]) is None  # the least recently used went first
    assert [cache.get(raw) for _, raw in made[1:]] == [key for key, _ in made[1:]]
    assert cache.get("tci_" + "x" * 43) is None
