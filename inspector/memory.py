"""Big payloads leave no resident memory behind (glibc's allocator, tuned once per process).

A 10 MB tool result is copied several times on its way through a turn (the JSON-RPC line, the
parsed message, the model request, the stored row). glibc serves allocations of 128 KiB and
more with their own ``mmap`` and gives them back to the system when freed — but each time it
frees one it raises that threshold (up to 32 MiB), so from the first big payload on, copies of
this size come from the heap arenas, and a heap keeps its freed memory resident: hundreds of
MB after one big turn, never returned. Fixing the threshold (which also turns that adjustment
off) keeps every allocation of ``MMAP_THRESHOLD_BYTES`` or more on its own mapping.

See mallopt(3), "M_MMAP_THRESHOLD". Elsewhere than glibc this does nothing.

A process that has grown by ``RELEASE_GROWTH_BYTES`` since it last looked gives back what it
no longer uses (``release_if_grown``, checked after each page is delivered, each turn that
changes and each worker task): a full garbage collection first — the rows a page read sit in
reference cycles (a prefetched step and its children point at each other), with every exchange
body they hold, and only a collection of the oldest generation frees them, which a process with
Django's many long-lived objects seldom starts on its own — then ``malloc_trim(0)``, which
returns the free pages of every glibc arena to the system. Measured in
``bench/p10_big_payload.py`` (docs/performance.md, P10).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import os
import threading

logger = logging.getLogger(__name__)

# mallopt(3) parameter number of M_MMAP_THRESHOLD in glibc's <malloc.h>.
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 1024 * 1024
# Growth of the resident set since the last release that makes the next check release.
RELEASE_GROWTH_BYTES = 32 * 1024 * 1024

_baseline = 0
_release_lock = threading.Lock()


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


def resident_bytes() -> int:
    """This process's resident set size (Linux ``/proc/self/statm``; 0 elsewhere)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def release_if_grown() -> bool:
    """When the process has grown by ``RELEASE_GROWTH_BYTES`` since the last release (or since
    the first call): collect every generation and give the allocator's free pages back
    (``malloc_trim``); whether it did. Cheap otherwise: one read of ``/proc/self/statm``."""
    global _baseline
    now = resident_bytes()
    if now == 0:
        return False
    with _release_lock:
        if _baseline == 0 or now < _baseline:
            _baseline = now
            return False
        if now - _baseline < RELEASE_GROWTH_BYTES:
            return False
        gc.collect()
        trim()
        _baseline = resident_bytes()
    return True


def freeze_what_started() -> None:
    """Move every object alive now out of the collector's generations for good (``gc.freeze``):
    what a process holds once it has started (modules, settings, URL patterns, tokenizers) is
    never garbage, and no later collection walks it again. Called when a process has started
    (``inspector.asgi``, the warm start); what was made before is collected first."""
    gc.collect()
    gc.freeze()


def trim() -> bool:
    """``malloc_trim(0)``: glibc returns the free memory of all its arenas; whether it could
    (False elsewhere than glibc, or when nothing was returned)."""
    libc = _libc()
    if libc is None or not hasattr(libc, "malloc_trim"):
        return False
    return bool(libc.malloc_trim(0))
