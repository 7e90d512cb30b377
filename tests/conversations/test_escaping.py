"""What no database stores (NUL, lone surrogates), found in any text, however it is built."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from conversations.escaping import carriable, refused_character, storable_text, undecodable_bytes
from conversations.loop.wire import decode_body

# The plain definitions the fast checks must agree with.
REFUSED = re.compile("[\x00\ud800-\udfff]")
SURROGATE = re.compile("[\ud800-\udfff]")
UNDECODABLE_BYTE = re.compile("[\udc80-\udcff]")

# Text of every kind: ASCII, other code points, and the characters refused (surrogates need
# their own category: hypothesis leaves them out of text by default).
ANY_TEXT = st.lists(
    st.one_of(
        st.characters(codec="ascii"),
        st.characters(min_codepoint=0x80, max_codepoint=0x10FFFF, exclude_categories=["Cs"]),
        st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),
        st.just("\x00"),
    ),
    max_size=60,
).map("".join)


@given(ANY_TEXT)
def test_a_refused_character_is_found_exactly_when_there_is_one(text: str) -> None:
    found = refused_character(text)
    match = REFUSED.search(text)

    assert (found is None) == (match is None)
    if match is not None:
        assert found is not None and f"at character {match.start()}" in found


def test_each_kind_of_refused_character_is_named_wherever_it_is() -> None:
    assert refused_character("plain ascii") is None
    assert refused_character("ünïcödé ✓ 🙂") is None
    assert refused_character("ab\x00") == "NUL U+0000 at character 2"
    assert refused_character("é\ud800") == "lone surrogate U+D800 at character 1"
    assert refused_character("x\udcff") == (
        "lone surrogate U+DCFF at character 1 (byte 0xFF that is not UTF-8, or its escape)"
    )
    text, problem = storable_text("🙂\udfff")
    assert problem is not None and "\udfff" not in text


# Bodies as they come off the wire: bytes that are UTF-8 (ASCII or not) and bytes that are not.
ANY_BODY = st.lists(
    st.one_of(st.binary(max_size=8), st.text(max_size=8).map(lambda text: text.encode("utf-8"))),
    max_size=20,
).map(b"".join)


@given(ANY_BODY)
def test_undecodable_bytes_are_counted_exactly_when_there_are_some(data: bytes) -> None:
    """A reply's body is scanned for the bytes that were not UTF-8 on every read: whatever the
    shortcut for a body without any, the count and the first byte's offset are the plain ones."""
    text = decode_body(data)
    found = undecodable_bytes(text)
    every = UNDECODABLE_BYTE.findall(text)

    assert (found is None) == (not every)
    if every:
        first = UNDECODABLE_BYTE.search(text)
        assert first is not None
        offset = len(text[: first.start()].encode("utf-8", errors="surrogateescape"))
        assert (
            found is not None and found.startswith(f"{len(every)} bytes ") and f"at byte {offset})" in found
        )


@given(ANY_TEXT)
def test_carriable_text_writes_each_lone_surrogate_as_its_escape_and_nothing_else(text: str) -> None:
    expected = SURROGATE.sub(lambda match: f"\\u{ord(match.group()):04x}", text)

    assert carriable(text) == expected
    if SURROGATE.search(text) is None:
        assert carriable(text) is text


def test_a_long_body_with_one_undecodable_byte_at_its_end_is_still_named() -> None:
    body = "é" + "data: {}\n\n" * 100_000 + "\udcff"

    assert undecodable_bytes(body) == (
        "1 bytes of the response are not UTF-8 (the first at byte 1000002); the raw response keeps "
        "them, stored escaped (\\udcXX is byte XX)"
    )
    assert carriable(body).endswith("\\udcff")
