"""The allocator tuning every process of the app applies at import (``inspector.memory``)."""

from __future__ import annotations

import platform

from inspector.memory import keep_big_allocations_mapped


def test_the_mmap_threshold_is_fixed_on_glibc() -> None:
    assert keep_big_allocations_mapped() is (platform.libc_ver()[0] == "glibc")
