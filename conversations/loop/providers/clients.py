"""Per-endpoint caches of clients (and transports): bounded, keyed without the API key, and
closing what they drop once nobody uses it.

An ``Endpoint`` carries its API key, so a dictionary keyed by the endpoint itself keeps every key
ever used for the life of the process, and one keyed per endpoint without bound grows with every
new key, model or deadline. Here the key is replaced by a digest salted per process (equal keys
still share a client; the digest is worth nothing outside the process), at most ``size`` entries
are kept (least recently used dropped first), and a dropped client is closed as soon as the last
call using it has finished: a call never sees its client closed under it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Generic, TypeVar

from conversations.loop.providers.base import Endpoint

V = TypeVar("V")

# Drawn once per process: the digests of API keys cannot be compared with anything outside it.
_SALT = os.urandom(32)

# Distinct endpoints a process keeps a client for; more are rare (one per model profile in use).
DEFAULT_SIZE = 32


def endpoint_key(endpoint: Endpoint) -> Endpoint:
    """``endpoint`` with its API key replaced by a per-process digest of it."""
    digest = hmac.new(_SALT, endpoint.api_key.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()
    return dataclasses.replace(endpoint, api_key=f"hmac:{digest}")


@dataclass
class _Entry(Generic[V]):
    value: V
    users: int = 0
    dropped: bool = False


class EndpointCache(Generic[V]):
    """At most ``size`` values by endpoint; ``close`` (if any) is called on each value dropped,
    once it is no longer leased. Thread-safe."""

    def __init__(self, size: int = DEFAULT_SIZE, close: Callable[[V], None] | None = None) -> None:
        self.size = size
        self._close = close
        self._entries: OrderedDict[Endpoint, _Entry[V]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def __contains__(self, endpoint: Endpoint) -> bool:
        with self._lock:
            return endpoint_key(endpoint) in self._entries

    def keys(self) -> list[Endpoint]:
        """The cache's keys (API keys digested), least recently used first."""
        with self._lock:
            return list(self._entries)

    @contextmanager
    def lease(self, endpoint: Endpoint, build: Callable[[Endpoint], V]) -> Iterator[V]:
        """The value for ``endpoint`` (built by ``build`` on a miss), not closed while leased."""
        with self._lock:
            entry = self._entry(endpoint, build)
            entry.users += 1
        try:
            yield entry.value
        finally:
            with self._lock:
                entry.users -= 1
                closing = entry.dropped and entry.users == 0
            if closing and self._close is not None:
                self._close(entry.value)

    def setdefault(self, endpoint: Endpoint, value: V) -> V:
        """The value kept for ``endpoint``, ``value`` if there was none."""
        with self._lock:
            return self._entry(endpoint, lambda _: value).value

    def get(self, endpoint: Endpoint) -> V | None:
        with self._lock:
            entry = self._entries.get(endpoint_key(endpoint))
            if entry is None:
                return None
            self._entries.move_to_end(endpoint_key(endpoint))
            return entry.value

    def _entry(self, endpoint: Endpoint, build: Callable[[Endpoint], V]) -> _Entry[V]:
        """Under the lock: the entry for ``endpoint``, made (dropping the oldest) if missing."""
        key = endpoint_key(endpoint)
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
            return entry
        entry = self._entries[key] = _Entry(build(endpoint))
        while len(self._entries) > self.size:
            _, oldest = self._entries.popitem(last=False)
            oldest.dropped = True
            if oldest.users == 0 and self._close is not None:
                # Nobody uses it: closed now (under the lock; closing a pool only shuts its idle sockets).
                self._close(oldest.value)
        return entry
