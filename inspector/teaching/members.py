"""What a model request sent, read from its recorded body without parsing all of it: one
top-level member (:func:`top_level_member`) and the tool_choice (:func:`sent_tool_choice`; why a
request sent none is text of ``notes/rows.yaml``).

Pure Python: no Django.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import cast

from conversations.typealias import JSONValue
from inspector.teaching.loading import notes

_DECODER = json.JSONDecoder()
_SPACES = re.compile(r"[ \t\n\r]*")
# A key found this many times without being the top-level one (nested ones): the body is read whole.
_MEMBER_TRIES = 8
MISSING = object()


def _skip(body: str, at: int) -> int:
    """The first position from ``at`` that is not JSON whitespace."""
    found = _SPACES.match(body, at)
    return found.end() if found is not None else at


def top_level_member(body: str, key: str) -> object:
    """``json.loads(body).get(key, MISSING)`` for the text of a JSON object, reading only the
    member and those after it — a model request's history, most of its hundreds of kB, is not
    read to find a field beside it. Like ``json.loads``, the last of duplicate members wins.

    The quoted key is looked for from the end; an occurrence counts when it starts a member
    (after ``{`` or ``,``), its value reads as JSON and the members after it close the outermost
    object (``_closes_the_object``): a key nested deeper, a value or a piece of a string fails
    one of those. A key written with escapes (``"tool\\u005fchoice"``) is not recognised, and a
    body whose part before the member is not JSON still answers (what a page shows of a request
    it can read); past ``_MEMBER_TRIES`` nested occurrences the body is read whole."""
    needle = json.dumps(key)
    end = len(body)
    for _ in range(_MEMBER_TRIES):
        found = body.rfind(needle, 0, end)
        if found < 0:
            return MISSING
        end = found
        value = _member_value(body, found, found + len(needle))
        if value is not MISSING:
            return value
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return MISSING
    return data.get(key, MISSING) if isinstance(data, dict) else MISSING


def _member_value(body: str, start: int, after_key: int) -> object:
    """The value of the member whose key spans ``body[start:after_key]``, if that is a member of
    the outermost object; else ``MISSING``."""
    before = start - 1
    while before >= 0 and body[before] in " \t\n\r":
        before -= 1
    if before < 0 or body[before] not in "{,":
        return MISSING
    at = _skip(body, after_key)
    if body[at : at + 1] != ":":
        return MISSING
    try:
        value, at = _DECODER.raw_decode(body, _skip(body, at + 1))
    except (ValueError, RecursionError):
        return MISSING
    return value if _closes_the_object(body, at) else MISSING


def _closes_the_object(body: str, at: int) -> bool:
    """Whether ``body[at:]`` is more members of one object, its closing brace, then only
    whitespace: true after a member of the outermost object, false after a nested one (whose own
    closing bracket comes first)."""
    while True:
        at = _skip(body, at)
        mark = body[at : at + 1]
        if mark == "}":
            return _skip(body, at + 1) == len(body)
        if mark != ",":
            return False
        at = _skip(body, at + 1)
        if body[at : at + 1] != '"':
            return False
        try:
            _, at = _DECODER.raw_decode(body, at)  # the key
            at = _skip(body, at)
            if body[at : at + 1] != ":":
                return False
            _, at = _DECODER.raw_decode(body, _skip(body, at + 1))
        except (ValueError, RecursionError):
            return False


def sent_tool_choice(body: str, fmt: str, *, in_words: str | Callable[[], str] = "") -> str:
    """The tool_choice a model request sent, as written on the wire (compact JSON for an object);
    for a request without one, why (docs/wire-formats.md §1, §3, §4, §5). ``in_words`` is the
    tool_choice the request ran under (:func:`turn_tool_choice`), or a function that gives it
    (called only when needed): a request that sends no tools field is a paradigm's, whose
    prompt says that tool_choice in words. Only the members it needs are read
    (``top_level_member``): the request's history beside them is most of the body."""
    if not body.lstrip(" \t\n\r").startswith("{"):
        return ""

    def member(key: str) -> JSONValue:
        found = top_level_member(body, key)
        return None if found is MISSING else cast(JSONValue, found)

    value: JSONValue
    if fmt == "gemini":
        config = top_level_member(body, "toolConfig")
        if config is MISSING:
            config = member("tool_config")
        value = None
        if isinstance(config, dict):
            value = config.get("functionCallingConfig", config.get("function_calling_config"))
    else:
        value = member("tool_choice")
    if value is None:
        has_tools = bool(member("tools"))
        if has_tools:
            return notes().tool_choice["provider_default"]
        words = in_words() if callable(in_words) else in_words
        if words:
            return notes().tool_choice["in_words"].format(in_words=words)
        return notes().tool_choice["no_tools"]
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))
