"""What no database stores (NUL, lone surrogates), found in any text, however it is built."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from conversations.escaping import refused_character, storable_text

# The plain definition the fast check must agree with.
REFUSED = re.compile("[\x00\ud800-\udfff]")

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
