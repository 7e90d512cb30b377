"""``changed_span``: the part of a model request that full-text search indexes, given the turn's
previous request. Whatever the bodies, every character outside the span is also in the previous
body at the same distance from its start or end, and the span never cuts a word."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from conversations.models import SEARCH_SPAN_MOST
from conversations.record.exchanges import request_search_span
from conversations.strings import changed_span

BOUNDS = (" ", '"', "\n")
text = st.text(alphabet=st.sampled_from('ab c"\n{}:,é🙂'), max_size=60)


def _checked(previous: str, current: str) -> tuple[int, int]:
    start, length = changed_span(previous, current)
    end = start + length
    assert 0 <= start <= end <= len(current)
    # Outside the span, current repeats previous: its beginning, and its end.
    assert previous.startswith(current[:start])
    assert previous.endswith(current[end:]) and len(current[:start]) + len(current[end:]) <= len(previous)
    if previous == current:
        assert length == 0  # nothing new to index
        return start, end
    # Never inside a word: each end of the span is an end of the body or a word bound.
    assert start == 0 or current[start - 1] in BOUNDS
    assert end == len(current) or current[end] in BOUNDS
    return start, end


@settings(max_examples=400, deadline=None)
@given(prefix=text, old=text, new=text, suffix=text)
def test_the_span_covers_what_changed_and_nothing_is_cut(
    prefix: str, old: str, new: str, suffix: str
) -> None:
    previous, current = prefix + old + suffix, prefix + new + suffix
    start, end = _checked(previous, current)
    if old != new:
        # What differs is inside the span.
        first = next(
            i for i, (a, b) in enumerate(zip(previous + "\0", current + "\1", strict=False)) if a != b
        )
        assert start <= first


@settings(max_examples=200, deadline=None)
@given(a=text, b=text)
def test_any_two_bodies_give_a_span_within_bounds(a: str, b: str) -> None:
    _checked(a, b)


def test_a_grown_history_is_indexed_for_the_message_it_adds() -> None:
    def body(messages: list[str]) -> str:
        return json.dumps({"messages": [{"role": "user", "content": m} for m in messages], "tools": ["calc"]})

    previous = body(["What is the weather in Lagos?"])
    current = body(["What is the weather in Lagos?", "Sunny and 31 C in Lagos"])
    start, length = changed_span(previous, current)

    span = current[start : start + length]
    assert "Sunny and 31 C in Lagos" in span and "weather" not in span
    assert len(span) < len(current) // 2


def test_identical_bodies_give_an_empty_span_and_unrelated_ones_the_whole_body() -> None:
    assert changed_span("same body", "same body") == (0, 0)
    # A letter taken out of a word: the new word is in the span, whole.
    previous, current = '{"content": "abXcd"}', '{"content": "abcd"}'
    start, length = changed_span(previous, current)
    assert current[start : start + length] == "abcd"
    assert changed_span("alpha", "omega") == (0, 5)


def _request(messages: list[str]) -> str:
    return json.dumps({"messages": [{"role": "user", "content": m} for m in messages], "tools": ["calc"]})


def test_a_request_is_indexed_by_its_span_only_where_the_columns_hold_it_else_from_its_start() -> None:
    previous = _request(["What is the weather in Lagos?"])
    current = _request(["What is the weather in Lagos?", "Sunny and 31 C in Lagos"])
    start, length = changed_span(previous, current)
    assert 0 < start and 0 < length

    assert request_search_span(previous, current) == (start, length)
    # At the columns' ceiling the span is kept; past it (a start or a length the 32-bit columns,
    # read from search_start + 1, cannot hold) none is: the request, stored whole all the same,
    # is indexed from its start, as a turn's first request is.
    assert request_search_span(previous, current, most=max(start, length)) == (start, length)
    assert request_search_span(previous, current, most=start - 1) is None
    assert request_search_span(previous, current, most=length - 1) is None
    # A request that shares nothing with the previous one is indexed whole anyway.
    assert request_search_span("alpha", "omega") is None
    assert SEARCH_SPAN_MOST == 2**31 - 2
