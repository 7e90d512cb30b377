"""Big payloads leave no resident memory behind (glibc's allocator, tuned once per process).

A 10 MB tool result is copied several times on its way through a turn (the JSON-RPC line, the
parsed message, the model request, the stored row). glibc serves allocations of 128 KiB and
more with their own ``mmap`` and gives them back to the system when freed — but each time it
frees one it raises that threshold (up to 32 MiB), so from the first big payload on, copies of
this size come from the heap arenas, and a heap keeps its freed memory resident: hundreds of
MB after one big turn, never returned. Fixing the threshold (which also turns that adjustment
off) keeps every allocation of ``MMAP_THRESHOLD_BYTES`` or more on its own mapping.

See mallopt(3), "M_MMAP_THRESHOLD". Elsewhere than glibc this does nothing.

A database connection keeps its buffers too: libpq grows a connection's input and output buffers
to the largest message it has carried and never shrinks them, so a pooled connection that wrote
or read a 10 MB record holds tens of MB for as long as it lives. A connection that carried a
record of ``BIG_RECORD_CHARS`` or more is closed instead of going back to the pool
(:func:`discard_connection`); the pool opens a fresh one in its place.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import weakref
from typing import Any

logger = logging.getLogger(__name__)

# A record this long (characters of a body) makes the connection that carried it not worth
# keeping: its buffers would stay at least this size.
BIG_RECORD_CHARS = 1024 * 1024

# mallopt(3) parameter number of M_MMAP_THRESHOLD in glibc's <malloc.h>.
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 1024 * 1024


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") else None


def keep_big_allocations_mapped() -> bool:
    """Fix glibc's mmap threshold at ``MMAP_THRESHOLD_BYTES``; whether it could be set."""
    libc = _libc()
    if libc is None:
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))


# Connections closed on purpose before going back to the pool (the pool says it discards them).
_discarded: weakref.WeakSet[Any] = weakref.WeakSet()


def discard_connection(connection: Any) -> None:
    """Close ``connection``'s (a Django connection's) underlying database connection, so that a
    pool drops it instead of lending it again; outside a transaction only (inside one, nothing).

    Without a pool the connection is simply closed; Django opens a new one when next needed."""
    if connection.in_atomic_block:
        return
    raw = connection.connection
    if raw is not None and connection.settings_dict["OPTIONS"].get("pool"):
        _discarded.add(raw)
        raw.close()  # returned closed: psycopg_pool drops it and opens a replacement
    connection.close()


class DiscardedConnectionFilter(logging.Filter):
    """Drops psycopg_pool's warning about a closed connection given back to it when this process
    closed it on purpose (:func:`discard_connection`): that is no fault to warn an operator of.
    Every other warning of the pool passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        return not (record.msg == "discarding closed connection: %s" and args and args[0] in _discarded)
