"""Intent labels: the reply names one tool, or none (:func:`parse_label`)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from conversations.loop.parsing.text import (
    as_text,
    clip,
    offered_list,
    split_thinking,
    thinking_diagnostic,
    unfence_whole,
)

_LABEL_PREFIX = re.compile(
    r"\A\s*(?:the\s+)?(?:tool(?:[ _]?name)?|intent|label|answer|category|class|function|choice)\s*[:=\-]\s*",
    re.I,
)
_LABEL_TRIM = " \t\r\n\"'`*.,;:!?()[]{}<>"
_NONE_REPLIES = frozenset(
    {"none", "no tool", "no_tool", "no tools", "no-tool", "n/a", "na", "null", "nothing", "no"}
)
_NONE_IN_SENTENCE = re.compile(r"(?<![\w/])(?:none|no[ _-]tools?|n/a)(?![\w/])", re.I)


def _whole_word(name: str, flags: int) -> re.Pattern[str]:
    # Tool names may hold "." and "-": "a" must not match inside "a.b" or "a-b", yet a name
    # may end a sentence ("use get_time.").
    return re.compile(rf"(?<![\w.-]){re.escape(name)}(?![\w-])(?!\.\w)", flags)


def _names_mentioned(text: str, names: Sequence[str]) -> list[str]:
    """Offered names that appear in ``text`` as whole words, in order of first appearance."""
    for flags in (0, re.I):
        positions: list[tuple[int, str]] = []
        for name in names:
            match = _whole_word(name, flags).search(text)
            if match is not None:
                positions.append((match.start(), name))
        if positions:
            return [name for _, name in sorted(positions)]
    return []


def _parse_label(text: str, names: Sequence[str]) -> tuple[str | None, list[str]]:
    if not text.strip():
        return None, ["empty reply"]
    visible, thoughts = split_thinking(text)
    diagnostics = thinking_diagnostic(thoughts, 0)
    body = unfence_whole(visible)[0].strip()
    cleaned = _LABEL_PREFIX.sub("", body, count=1).strip(_LABEL_TRIM)
    if cleaned in names:
        if cleaned != body:
            diagnostics.append(f"read {cleaned!r} from {clip(body)!r}")
        return cleaned, diagnostics
    by_case = {name.lower(): name for name in reversed(names)}
    if cleaned.lower() in by_case:
        diagnostics.append(f"matched {clip(cleaned)!r} to {by_case[cleaned.lower()]!r} ignoring case")
        return by_case[cleaned.lower()], diagnostics
    if cleaned.lower() in _NONE_REPLIES:
        if cleaned.lower() != "none" or cleaned != body:
            diagnostics.append(f"read {clip(body)!r} as none")
        return None, diagnostics
    return _label_in_sentence(body, names, diagnostics)


def _label_in_sentence(
    body: str, names: Sequence[str], diagnostics: list[str]
) -> tuple[str | None, list[str]]:
    mentioned = _names_mentioned(body, names)
    if len(mentioned) > 1:
        diagnostics.append(
            f"ambiguous: the reply names {', '.join(mentioned)}; took the first, {mentioned[0]!r}"
        )
        return mentioned[0], diagnostics
    if mentioned:
        diagnostics.append(f"found {mentioned[0]!r} in {clip(body)!r}")
        return mentioned[0], diagnostics
    if _NONE_IN_SENTENCE.search(body):
        diagnostics.append(f"read {clip(body)!r} as none")
        return None, diagnostics
    diagnostics.append(
        f"{clip(body)!r} is not among the offered tools (offered: {offered_list(names)}, or none)"
    )
    return None, diagnostics


def parse_label(text: str | None, *, names: Sequence[str]) -> tuple[str | None, list[str]]:
    """The tool a classification reply names, or ``None`` for "no tool", and diagnostics.

    The reply should be exactly one offered name or ``none``. Tolerated: quotes, backticks,
    trailing punctuation, a "Tool:" prefix, case differences, a name inside a sentence
    (first one wins, several are reported as ambiguous), "no tool"/"N/A" for none. An
    unrecognised reply is ``None`` with a diagnostic listing the offered names. Never raises.
    """
    reply = as_text(text)
    listed = [names] if isinstance(names, str) else names if isinstance(names, Sequence) else []
    offered = [name for name in listed if isinstance(name, str) and name]
    try:
        return _parse_label(reply, offered)
    except Exception as exc:  # noqa: BLE001 — the contract is "never raises"
        return None, [f"internal parser error ({type(exc).__name__}); no label read"]
