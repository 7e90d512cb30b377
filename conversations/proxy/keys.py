"""Proxy keys: made, checked and revoked here; stored only as their SHA-256.

A key is ``tci_`` and 43 characters of ``secrets.token_urlsafe(32)`` (256 random bits): a hash
of it cannot be reversed or guessed, so a plain SHA-256 (no salt, no slow hash) is enough and
lets a request find its key by one indexed lookup. The lookup compares hashes in the database;
the row found is compared again with ``hmac.compare_digest``, so the answer does not depend on
how much of a wrong key matched.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from django.contrib.auth.base_user import AbstractBaseUser
from django.utils import timezone

from conversations.proxy.models import ProxyKey

KEY_PREFIX = "tci_"
# What a page shows of a key: the prefix and the first random characters.
SHOWN_CHARS = 12
# last_used_at is written at most this often per key (not on every model call of a busy host).
LAST_USED_RESOLUTION_SECONDS = 60


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


def authenticate(raw_key: str) -> ProxyKey | None:
    """The key ``raw_key`` is, with its user; None when it is unknown or revoked (the route
    answers 401). Notes when it was last used (at most once a minute)."""
    if not raw_key.startswith(KEY_PREFIX) or len(raw_key) > 200:
        return None
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
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        ProxyKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(revoked_at=key.revoked_at)
