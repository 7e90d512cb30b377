"""Proxy keys: made, checked and revoked here; stored only as their SHA-256.

A key is ``tci_`` and 43 characters of ``secrets.token_urlsafe(32)`` (256 random bits): a hash
of it cannot be reversed or guessed, so a plain SHA-256 (no salt, no slow hash) is enough and
lets a request find its key by one indexed lookup. The lookup compares hashes in the database;
the row found is compared again with ``hmac.compare_digest``, so the answer does not depend on
how much of a wrong key matched.

The LLM proxy's routes look a key up on every model call; ``RECENT`` keeps a key that
authenticated for ``KEY_CACHE_SECONDS`` in the process that looked it up, so a busy host costs
one look-up every few seconds rather than one per call. That is the bound on revocation: a key
revoked in one process (or a user made inactive) is refused by the process that revoked it at
once, and by every other process at most ``KEY_CACHE_SECONDS`` later. Unknown keys are never
kept (a guess costs a look-up each time, as before).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from django.contrib.auth.base_user import AbstractBaseUser
from django.utils import timezone

from conversations.proxy.models import ProxyKey
from conversations.record.connections import handed_back

KEY_PREFIX = "tci_"
# What a page shows of a key: the prefix and the first random characters.
SHOWN_CHARS = 12
# last_used_at is written at most this often per key (not on every model call of a busy host).
LAST_USED_RESOLUTION_SECONDS = 60
# How long a process goes on accepting a key it found valid without asking the database again:
# the most a revocation in another process takes to reach this one (docs/proxy-llm.md).
KEY_CACHE_SECONDS = 5.0
# The most keys a process keeps (the least recently used go first).
KEY_CACHE_SIZE = 1024


def key_hash(raw_key: str) -> str:
    return hashlib.sha256(raw_key.encode("utf-8", "surrogatepass")).hexdigest()


def create_key(
    user: AbstractBaseUser,
    *,
    name: str = "",
    openai_upstream: str = "",
    anthropic_upstream: str = "",
    gemini_upstream: str = "",
) -> tuple[ProxyKey, str]:
    """Make a key for ``user``; returns its row and the raw key, which is shown once and never
    stored."""
    raw = KEY_PREFIX + secrets.token_urlsafe(32)
    key = ProxyKey.objects.create(
        user_id=user.pk,
        name=name[:80],
        prefix=raw[:SHOWN_CHARS],
        key_hash=key_hash(raw),
        openai_upstream=openai_upstream,
        anthropic_upstream=anthropic_upstream,
        gemini_upstream=gemini_upstream,
    )
    return key, raw


def well_formed(raw_key: str) -> bool:
    return raw_key.startswith(KEY_PREFIX) and len(raw_key) <= 200


def authenticate(raw_key: str) -> ProxyKey | None:
    """The key ``raw_key`` is, with its user; None when it is unknown or revoked (the route
    answers 401). Notes when it was last used (at most once a minute).

    A database connection it had to open is handed back before it returns
    (``conversations.record.connections.handed_back``): a proxy looks keys up from threads that
    then wait on a stream for minutes.
    """
    if not well_formed(raw_key):
        return None
    with handed_back():
        return _authenticate(raw_key)


def _authenticate(raw_key: str) -> ProxyKey | None:
    digest = key_hash(raw_key)
    key = ProxyKey.objects.select_related("user", "profile").filter(key_hash=digest).first()
    if key is None or not hmac.compare_digest(key.key_hash, digest) or key.revoked:
        return None
    if not key.user.is_active:
        return None
    now = timezone.now()
    if key.last_used_at is None or (now - key.last_used_at).total_seconds() >= LAST_USED_RESOLUTION_SECONDS:
        ProxyKey.objects.filter(pk=key.pk).update(last_used_at=now)
        key.last_used_at = now
    return key


def revoke(key: ProxyKey) -> None:
    """Revoke ``key`` for good: from now on it authenticates nothing (its sessions stay)."""
    RECENT.forget(key.key_hash)
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        ProxyKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(revoked_at=key.revoked_at)


class KeyCache:
    """Keys that authenticated lately in this process, by hash, each for ``seconds`` after its
    look-up; at most ``size`` of them. Safe to use from the event loop and threads alike."""

    def __init__(self, *, seconds: float, size: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self.size = size
        self.clock = clock
        self._keys: OrderedDict[str, tuple[float, ProxyKey]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, raw_key: str) -> ProxyKey | None:
        """The key ``raw_key`` is if it authenticated less than ``seconds`` ago, else None."""
        if not well_formed(raw_key):
            return None
        digest = key_hash(raw_key)
        with self._lock:
            found = self._keys.get(digest)
            if found is None:
                return None
            if self.clock() - found[0] >= self.seconds:
                del self._keys[digest]
                return None
            self._keys.move_to_end(digest)
        return found[1]

    def put(self, key: ProxyKey) -> None:
        with self._lock:
            self._keys[key.key_hash] = (self.clock(), key)
            self._keys.move_to_end(key.key_hash)
            while len(self._keys) > self.size:
                self._keys.popitem(last=False)

    def forget(self, digest: str) -> None:
        with self._lock:
            self._keys.pop(digest, None)

    def authenticate(self, raw_key: str) -> ProxyKey | None:
        """As ``authenticate``, answered from the cache while the key is fresh in it."""
        key = self.get(raw_key)
        if key is None:
            key = authenticate(raw_key)
            if key is not None:
                self.put(key)
        return key


RECENT = KeyCache(seconds=KEY_CACHE_SECONDS, size=KEY_CACHE_SIZE)
