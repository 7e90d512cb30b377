"""Comparing long texts cheaply: what two texts share at their start and end, and what changed.

Used where a text is compared with its predecessor: a spliced prompt with the turn's previous
one (the page's prompt summaries), a model request with the turn's previous request (what
full-text search indexes of it).
"""

from __future__ import annotations

# Characters a searchable word never spans (JSON string quotes, spaces, line ends): an indexed
# span is widened to them, so it never starts or ends inside a word.
_WORD_BOUNDS = (" ", '"', "\n")


def common_prefix_length(a: str, b: str, limit: int | None = None) -> int:
    """How many leading characters ``a`` and ``b`` share, at most ``limit`` (a binary search over
    slice comparisons: each compares in C, and only the part still in doubt)."""
    low, high = 0, min(len(a), len(b)) if limit is None else limit
    while low < high:
        middle = (low + high + 1) // 2
        if a[low:middle] == b[low:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def common_suffix_length(a: str, b: str, limit: int) -> int:
    """How many trailing characters ``a`` and ``b`` share, at most ``limit``."""
    low, high = 0, limit
    end_a, end_b = len(a), len(b)
    while low < high:
        middle = (low + high + 1) // 2
        if a[end_a - middle : end_a - low] == b[end_b - middle : end_b - low]:
            low = middle
        else:
            high = middle - 1
    return low


def changed_span(previous: str, current: str) -> tuple[int, int]:
    """``(start, length)`` of the part of ``current`` that differs from ``previous``: what lies
    between their common beginning and their common end, widened to whole words.

    A model request repeats the previous request of its turn and adds the latest messages in
    the middle (before the tool definitions and settings that close it): the span is those
    messages, and every character of ``current`` outside it is also in ``previous``.
    """
    if previous == current:
        return 0, 0
    limit = min(len(previous), len(current))
    start = common_prefix_length(previous, current, limit)
    end = len(current) - common_suffix_length(previous, current, limit - start)
    start = max(current.rfind(bound, 0, start) for bound in _WORD_BOUNDS) + 1
    ends = [found for bound in _WORD_BOUNDS if (found := current.find(bound, end)) != -1]
    end = min(ends) if ends else len(current)
    return start, end - start
