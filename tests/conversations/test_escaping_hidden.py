"""Hidden characters (bidi controls, zero-width and other format characters, control characters)
are found and shown as marked escapes; the text itself is never changed."""

from __future__ import annotations

import sys
import unicodedata

from conversations.escaping import (
    HIDDEN,
    hidden_characters,
    hidden_marked,
    hidden_name,
    hidden_revealed,
)

BIDI = "Final answer \u202eevil\u202c done"


def test_every_format_separator_and_control_character_of_this_python_is_hidden() -> None:
    missing = [
        f"U+{code:04X}"
        for code in range(sys.maxunicode + 1)
        if unicodedata.category(chr(code)) in {"Cf", "Zl", "Zp", "Cc"}
        and chr(code) not in "\t\n\r"
        and HIDDEN.fullmatch(chr(code)) is None
    ]
    assert missing == []


def test_bidi_controls_zero_width_fillers_and_controls_are_hidden_but_tab_and_newlines_are_not() -> None:
    for char in [
        "\u202a",
        "\u202e",
        "\u2066",
        "\u2069",
        "\u200b",
        "\u200d",
        "\ufeff",
        "\u3164",
        "\x1b",
        "\x7f",
    ]:
        assert hidden_characters(f"a{char}b"), repr(char)
    assert not hidden_characters("tab\there\nline\r\nend — ünïcode 北京 ✓")


def test_a_reply_with_an_override_is_revealed_as_markers_in_place() -> None:
    html = hidden_revealed(BIDI)
    assert "\u202e" not in html and "\u202c" not in html
    assert 'title="U+202E RIGHT-TO-LEFT OVERRIDE">⟨U+202E⟩</span>evil' in html
    assert html.startswith('Final answer <span class="hidden-char"')


def test_a_control_character_without_a_name_is_named_by_its_code_point() -> None:
    assert hidden_name("\x1b") == "U+001B"
    assert hidden_marked("a\x1bb\u200bc") == "a⟨U+001B⟩b⟨U+200B⟩c"


def test_text_without_hidden_characters_is_returned_unchanged() -> None:
    text = "Beijing &lt;b&gt; 北京"
    assert hidden_revealed(text) == text
    assert hidden_marked(text) == text


def test_the_quick_first_look_finds_exactly_what_hidden_finds_at_every_code_point() -> None:
    # hidden_characters looks with a faster, wider class first and asks HIDDEN only where it
    # stops: that must change no answer, alone or after text the first look stops at.
    differ = [
        f"U+{code:04X}"
        for code in range(sys.maxunicode + 1)
        if hidden_characters(chr(code)) != (HIDDEN.search(chr(code)) is not None)
        or hidden_characters("\U0001f600" + chr(code)) != (HIDDEN.search(chr(code)) is not None)
    ]
    assert differ == []


def test_text_whose_first_look_stops_at_an_emoji_is_still_judged_by_what_follows() -> None:
    assert hidden_characters("weather \U0001f326 in Paris") is False
    assert hidden_characters("weather \U0001f326 in \u202eParis") is True
    assert hidden_revealed("\U0001f326 sunny") == "\U0001f326 sunny"
    assert hidden_marked("\U0001f326 \u200b") == "\U0001f326 ⟨U+200B⟩"
