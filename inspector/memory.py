"""Big payloads leave no resident memory behind (glibc's allocator, tuned once per process).

A 10 MB tool result is copied several times on its way through a turn (the JSON-RPC line, the
parsed message, the model request, the stored row). glibc serves allocations of 128 KiB and
more with their own ``mmap`` and gives them back to the system when freed — but each time it
frees one it raises that threshold (up to 32 MiB), so from the first big payload on, copies of
this size come from the heap arenas, and a heap keeps its freed memory resident: hundreds of
MB after one big turn, never returned. Fixing the threshold (which also turns that adjustment
off) keeps every allocation of ``MMAP_THRESHOLD_BYTES`` or more on its own mapping.

See mallopt(3), "M_MMAP_THRESHOLD". Elsewhere than glibc this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

logger = logging.getLogger(__name__)

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
