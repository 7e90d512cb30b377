"""Throttling of password attempts (the login page and ``POST /api/token``).

Failed attempts are counted per username and per client address in fixed windows of
``LOGIN_THROTTLE_WINDOW_SECONDS``, in the cache every web process shares (Redis in the scaled
deployment). Once either count reaches its limit, every attempt for that username or from that
address — right password or not — is refused until the window ends, so guessing costs a
window per ``LOGIN_THROTTLE_FAILURES`` tries.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Mapping

from django.conf import settings
from django.core.cache import cache


class LoginThrottled(Exception):
    """Too many failed attempts; ``retry_after`` seconds until the window ends."""

    def __init__(self, *, retry_after: int) -> None:
        super().__init__(f"Too many failed sign-in attempts. Try again in {retry_after} seconds.")
        self.retry_after = retry_after


def client_address(meta: Mapping[str, object]) -> str:
    """The client's address: ``CLIENT_IP_HEADER``'s first entry behind a proxy, else REMOTE_ADDR."""
    header = settings.CLIENT_IP_HEADER
    if header:
        forwarded = meta.get("HTTP_" + header.upper().replace("-", "_"))
        if isinstance(forwarded, str) and forwarded.split(",", 1)[0].strip():
            return forwarded.split(",", 1)[0].strip()
    return str(meta.get("REMOTE_ADDR") or "unknown")


def _window() -> tuple[int, int]:
    """This window's number and the seconds left in it."""
    length = settings.LOGIN_THROTTLE_WINDOW_SECONDS
    now = time.time()
    number = int(now // length)
    return number, max(1, math.ceil((number + 1) * length - now))


def _keys(*, username: str, address: str, window: int) -> list[tuple[str, int]]:
    """The two counters an attempt touches, each with its limit (hashed: usernames are user input)."""

    def digest(value: str) -> str:
        return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()

    return [
        (
            f"login-failures:user:{digest(username.strip().lower())}:{window}",
            settings.LOGIN_THROTTLE_FAILURES,
        ),
        (f"login-failures:address:{digest(address)}:{window}", settings.LOGIN_THROTTLE_ADDRESS_FAILURES),
    ]


def login_throttle_check(*, username: str, address: str) -> None:
    """Call before checking a password.

    Raises:
        LoginThrottled: this username or this address used up its failed attempts in this window.
    """
    window, remaining = _window()
    keys = _keys(username=username, address=address, window=window)
    counts = cache.get_many([key for key, _ in keys])
    if any(counts.get(key, 0) >= limit for key, limit in keys):
        raise LoginThrottled(retry_after=remaining)


def login_failure_record(*, username: str, address: str) -> None:
    """Count one failed attempt against the username and the address (atomic in every backend)."""
    window, _ = _window()
    for key, _limit in _keys(username=username, address=address, window=window):
        cache.add(key, 0, timeout=settings.LOGIN_THROTTLE_WINDOW_SECONDS + 1)
        try:
            cache.incr(key)
        except ValueError:
            # Expired between add and incr (the window just ended): count it in a fresh one.
            cache.add(key, 1, timeout=settings.LOGIN_THROTTLE_WINDOW_SECONDS + 1)
