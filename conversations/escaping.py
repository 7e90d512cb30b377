"""Values every database stores, and every page, export and HTTP body can carry.

Model and server output is untrusted: it may hold lone surrogates (``"\\ud800"`` in a JSON
string decodes to one), NUL characters, ``NaN``/``Infinity`` (Python's ``json`` reads them,
and ``1e999999`` becomes ``inf``) or JSON nested thousands deep. PostgreSQL refuses NUL in text
and in ``jsonb``, and lone surrogates and non-finite numbers anywhere; SQLite's JSON check
refuses non-finite numbers and nesting past 1000 levels; UTF-8 (every page, export and request
body) cannot encode a lone surrogate at all.

The escaped forms are lossless and recognisable:

* a text that holds a refused character is stored as its JSON string literal (quotes included,
  every refused character written ``\\uXXXX``): ``json.loads`` of the stored text gives back the
  original exactly;
* a non-finite number is stored as the string ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``;
* a value nested deeper than ``MOST_DEPTH`` is stored as its JSON text (a string).

Each function returns what it escaped (a path and why) so the record can say so beside it.
Plain Python: no Django.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from typing import Any, cast

from conversations.typealias import JSONValue

# What no database, page or export can hold as it is.
_REFUSED = re.compile("[\x00\ud800-\udfff]")
# SQLite's JSON functions refuse documents nested deeper than 1000 levels; well short of it, and of
# the recursion any reader of the value (the redactor, templates, ``json``) may use.
MOST_DEPTH = 200


_SURROGATE = re.compile("[\ud800-\udfff]")
# What ``surrogateescape`` makes of a byte that is not UTF-8 (bytes 0x80-0xFF).
_UNDECODABLE_BYTE = re.compile("[\udc80-\udcff]")


def carriable(text: str) -> str:
    """``text`` with every lone surrogate written as its escape ``\\udXXX``: UTF-8 (a page, a
    download, a terminal) can carry it. In a JSON text a surrogate can only sit inside a string,
    where the escape means exactly the same, so a JSON text stays valid and unchanged in meaning;
    on a page the escape is what is shown."""
    if not may_hold_surrogate(text):
        return text
    return _SURROGATE.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


# The JSON escape of a UTF-16 surrogate (a lone one, or half of a pair).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


class CarriableDecoder(json.JSONDecoder):
    """Reads stored JSON so that whatever it holds can be shown, exported and sent: a lone
    surrogate (which SQLite keeps as its escape, from a record older than the escaping, or an
    import) comes back as the text of its escape (``carriable``). Costs one scan of the text."""

    def decode(self, s: str, *args: Any, **kwargs: Any) -> Any:
        value = super().decode(s, *args, **kwargs)
        if _SURROGATE_ESCAPE.search(s) is None:
            return value
        return _carriable_json(value)


def _carriable_json(value: Any) -> Any:
    """``value`` with ``carriable`` applied to every string and key (an explicit stack)."""
    holder = [value]
    stack: list[tuple[list[Any] | dict[str, Any], int | str]] = [(holder, 0)]
    while stack:
        parent, slot = stack.pop()
        item = parent[slot]  # type: ignore[index]
        if isinstance(item, str):
            parent[slot] = carriable(item)  # type: ignore[index]
        elif isinstance(item, list):
            stack.extend((item, index) for index in range(len(item)))
        elif isinstance(item, dict):
            fixed = {carriable(key): child for key, child in item.items()}
            parent[slot] = fixed  # type: ignore[index]
            stack.extend((fixed, key) for key in fixed)
    return holder[0]


def refused_character(text: str) -> str | None:
    """A short description of the first character of ``text`` no database stores, or None."""
    if "\x00" not in text and not may_hold_surrogate(text):
        # The common case, answered in C: every body a turn records passes here (a regex
        # search of each, up to a whole conversation's history, was a twentieth of recording).
        return None
    match = _REFUSED.search(text)
    if match is None:
        return None
    char = match.group()
    kind = "NUL" if char == "\x00" else "lone surrogate"
    described = f"{kind} U+{ord(char):04X} at character {match.start()}"
    if _UNDECODABLE_BYTE.fullmatch(char):
        # How a byte that is not UTF-8 is kept (``surrogateescape``); a JSON ``\udcXX`` escape
        # decodes to the same character, so both are named.
        described += f" (byte 0x{ord(char) - 0xDC00:02X} that is not UTF-8, or its escape)"
    return described


def may_hold_surrogate(text: str) -> bool:
    """False when ``text`` surely holds no surrogate, told in C: an ASCII text at once, any other
    by encoding it (an 11 MB body in ~9 ms, where a regex search of it took ~65)."""
    return not text.isascii() and _has_surrogate(text)


def _has_surrogate(text: str) -> bool:
    """Whether ``text`` holds a surrogate code point (only those make UTF-8 encoding fail)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def undecodable_bytes(text: str) -> str | None:
    """For a text decoded from bytes with ``surrogateescape`` (``conversations.loop.wire.decode_body``):
    how many of those bytes were not UTF-8 and the offset of the first, or None when all were.
    Every streamed reply's raw body is asked, so a body without surrogates is answered at once."""
    if not may_hold_surrogate(text):
        return None
    found = _UNDECODABLE_BYTE.findall(text)
    if not found:
        return None
    first = _UNDECODABLE_BYTE.search(text)
    assert first is not None
    offset = len(text[: first.start()].encode("utf-8", errors="surrogateescape"))
    return (
        f"{len(found)} bytes of the response are not UTF-8 (the first at byte {offset}); the raw "
        "response keeps them, stored escaped (\\udcXX is byte XX)"
    )


def escaped_text(text: str) -> str:
    """``text`` as its JSON string literal, every refused character written ``\\uXXXX``
    (``json.loads`` gives ``text`` back)."""
    literal = json.dumps(text, ensure_ascii=False)
    # json writes NUL as \\u0000 already; it leaves lone surrogates as they are.
    return _REFUSED.sub(lambda match: f"\\u{ord(match.group()):04x}", literal)


def storable_text(text: str) -> tuple[str, str | None]:
    """``text`` as it can be stored: itself, or its escaped form and why it was escaped."""
    problem = refused_character(text)
    if problem is None:
        return text, None
    return escaped_text(text), f"{problem}: stored as a JSON string literal"


def storable_json(value: JSONValue, *, path: str = "") -> tuple[JSONValue, list[str]]:
    """``value`` with every part no database stores replaced by its escaped form.

    Returns the value (the same object when nothing needed escaping) and one note per escaped
    part, naming its path. Never raises, however deep or odd the value (iterative walk).
    """
    if _plainly_storable(value):
        return value, []
    notes: list[str] = []
    result = _walk(value, path or "$", notes)
    return (value if not notes else result), notes


def _short(path: str) -> str:
    return path if len(path) <= 120 else f"{path[:60]}…{path[-59:]}"


def _plainly_storable(value: JSONValue) -> bool:
    """Whether ``value`` needs no escaping, found at C speed (the common case)."""
    if isinstance(value, str):
        return refused_character(value) is None
    if value is None or isinstance(value, bool | int):
        return True
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, check_circular=False)
    except (ValueError, TypeError, RecursionError):
        return False
    if _has_surrogate(text):
        return False
    # json writes NUL as \\u0000 (a false alarm, when the text itself holds that sequence, only
    # costs the careful walk).
    return "\\u0000" not in text and not _too_deep(value)


def _too_deep(value: JSONValue) -> bool:
    """Whether ``value`` nests deeper than ``MOST_DEPTH`` (visits containers only, not scalars)."""
    stack: list[tuple[JSONValue, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MOST_DEPTH:
            return True
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def _number(value: float, where: str, notes: list[str]) -> JSONValue:
    if math.isfinite(value):
        return value
    text = "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    notes.append(f"{_short(where)}: the number {text} (not JSON) stored as the string {text!r}")
    return text


def _deep(value: JSONValue, where: str, notes: list[str]) -> str:
    notes.append(f"{_short(where)}: nested deeper than {MOST_DEPTH} levels, stored as its JSON text")
    return _json_text(value)


def _json_text(value: JSONValue) -> str:
    """The JSON text of ``value`` (ASCII, so nothing in it is refused), however deep: written
    with an explicit stack, as ``json`` would recurse."""
    out: list[str] = []
    # Either a value still to write, or a piece of punctuation (a str wrapped in a tuple).
    stack: list[object] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, tuple):
            out.append(item[0])
        elif isinstance(item, dict):
            stack.append(("}",))
            for position, (key, child) in enumerate(reversed(list(item.items()))):
                stack.append(child)
                stack.append((json.dumps(str(key)) + ":",))
                if position < len(item) - 1:
                    stack.append((",",))
            stack.append(("{",))
        elif isinstance(item, list | tuple):
            stack.append(("]",))
            for position, child in enumerate(reversed(item)):
                stack.append(child)
                if position < len(item) - 1:
                    stack.append((",",))
            stack.append(("[",))
        else:
            try:
                out.append(json.dumps(item))
            except (TypeError, ValueError):
                out.append(json.dumps(str(item)))
    return "".join(out)


def _walk(value: JSONValue, root: str, notes: list[str]) -> JSONValue:
    """The escaped copy of ``value`` (an explicit stack: no recursion limit applies)."""
    holder: list[JSONValue] = [None]
    # (value, where to put its copy, key or index there, path, depth)
    stack: list[tuple[object, list[JSONValue] | dict[str, JSONValue], int | str, str, int]] = [
        (value, holder, 0, root, 0)
    ]
    while stack:
        item, parent, slot, where, depth = stack.pop()
        copy: JSONValue
        if isinstance(item, str):
            copy, problem = storable_text(item)
            if problem:
                notes.append(f"{_short(where)}: {problem}")
        elif isinstance(item, bool) or item is None or isinstance(item, int):
            copy = item
        elif isinstance(item, float):
            copy = _number(item, where, notes)
        elif isinstance(item, list | tuple | dict) and depth >= MOST_DEPTH:
            copy = _deep(cast(JSONValue, item), where, notes)
        elif isinstance(item, list | tuple):
            items: list[JSONValue] = [None] * len(item)
            copy = items
            for index in range(len(item) - 1, -1, -1):
                stack.append((item[index], items, index, f"{where}[{index}]", depth + 1))
        elif isinstance(item, dict):
            fields: dict[str, JSONValue] = {}
            copy = fields
            for key, child in item.items():
                name, problem = storable_text(str(key))
                if problem:
                    notes.append(f"{_short(where)}: key {problem}")
                fields[name] = None
                stack.append((child, fields, name, f"{where}.{name}", depth + 1))
        else:
            copy = str(item)
            notes.append(f"{_short(where)}: a {type(item).__name__} (not JSON) stored as its text")
        if isinstance(parent, list):
            parent[cast(int, slot)] = copy
        else:
            parent[cast(str, slot)] = copy
    return holder[0]


# Characters that change how text reads without being seen: bidirectional controls
# (U+202A-U+202E, U+2066-U+2069), zero-width and other format characters (category Cf), line and
# paragraph separators (Zl, Zp), the Hangul fillers that render blank, and control characters
# (Cc) other than tab, line feed and carriage return (whitespace a page shows as such). Unicode
# 14's table; ``tests/conversations/test_escaping.py`` holds it to the running Python's.
_HIDDEN_RANGES = (
    (0x0000, 0x0008), (0x000B, 0x000C), (0x000E, 0x001F), (0x007F, 0x009F), (0x00AD, 0x00AD),
    (0x0600, 0x0605), (0x061C, 0x061C), (0x06DD, 0x06DD), (0x070F, 0x070F), (0x0890, 0x0891),
    (0x08E2, 0x08E2), (0x115F, 0x1160), (0x180E, 0x180E), (0x200B, 0x200F), (0x2028, 0x202E),
    (0x2060, 0x2064), (0x2066, 0x206F), (0x3164, 0x3164), (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0),
    (0xFFF9, 0xFFFB), (0x110BD, 0x110BD), (0x110CD, 0x110CD), (0x13430, 0x13438),
    (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A), (0xE0001, 0xE0001), (0xE0020, 0xE007F),
)  # fmt: skip
HIDDEN = re.compile("[" + "".join(f"\\U{low:08x}-\\U{high:08x}" for low, high in _HIDDEN_RANGES) + "]")
# A first look that finds every text HIDDEN finds, and more: the ranges below U+10000 as they are,
# everything above as one range. Python's matcher tests a class of many ranges above U+FFFF
# several times slower than one that stays below it (a page of 100 kB: about 0.5 ms against 2.3),
# and nearly every text has no character above U+FFFF; only where the first look stops is HIDDEN
# asked.
_MAYBE_HIDDEN = re.compile(
    "["
    + "".join(f"\\u{low:04x}-\\u{high:04x}" for low, high in _HIDDEN_RANGES if high <= 0xFFFF)
    + "\\U00010000-\\U0010ffff]"
)
HIDDEN_NOTE = "This text contains invisible or bidirectional characters, each shown as ⟨U+XXXX⟩."


def hidden_characters(text: str) -> bool:
    """Whether ``text`` holds a character that changes how it reads without being seen
    (``HIDDEN``): a bidi control, a zero-width or other format character, a blank filler, a
    control character other than tab and line breaks."""
    first = _MAYBE_HIDDEN.search(text)
    return first is not None and HIDDEN.search(text, first.start()) is not None


def hidden_name(char: str) -> str:
    """``U+202E RIGHT-TO-LEFT OVERRIDE``: what a marked character is (its code point alone when
    Unicode gives it no name, as for control characters)."""
    name = unicodedata.name(char, "")
    return f"U+{ord(char):04X} {name}".rstrip()


def hidden_revealed(html: str) -> str:
    """Escaped HTML (text that ``django.utils.html.escape`` or Pygments wrote) with every hidden
    character replaced by a visible marker, ``⟨U+202E⟩``, in a ``span.hidden-char`` whose title
    names it: the reader sees where it is and what it is, and it no longer acts (a bidi override
    reorders nothing). Only the page changes; the stored text and raw downloads keep it.

    Escaped HTML holds hidden characters only in text (never in its tags), so the span can go
    where the character was; the marker's own characters are visible ones."""
    return HIDDEN.sub(_marker, html) if hidden_characters(html) else html


def hidden_marked(text: str) -> str:
    """``text`` with every hidden character written ``⟨U+XXXX⟩``, for where no markup can go (a
    page's ``<title>``, an attribute)."""
    if not hidden_characters(text):
        return text
    return HIDDEN.sub(lambda match: f"⟨U+{ord(match.group()):04X}⟩", text)


def _marker(match: re.Match[str]) -> str:
    char = match.group()
    return f'<span class="hidden-char" title="{hidden_name(char)}">⟨U+{ord(char):04X}⟩</span>'
