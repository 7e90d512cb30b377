"""A note's text as HTML: the small part of Markdown the notes use, rendered after escaping.

A note is one line of YAML written by us, but it is shown inside pages that also show hostile
payloads, so the rule is simple and cannot leak markup: the whole text is HTML-escaped first,
and only then are three inline forms turned into tags — ```code``` to ``<code>``, ``**strong**``
to ``<strong>``, ``*emphasis*`` to ``<em>``. Nothing else is Markdown here (no links, no raw
HTML, no blocks): a ``<script>`` in a note is shown as text. Asterisks that open or close nothing
(``2 * 3``) stay as they are.

Pure Python: no Django (the template filter marks the result safe).
"""

from __future__ import annotations

import html
import re

# Inside backticks nothing else is read: code first, kept aside, then emphasis on the rest.
_CODE = re.compile(r"`([^`\n]+)`")
# A delimiter run must touch its text on the inside (CommonMark's flanking rule, in short), so
# "2 * 3 * 4" is not emphasis while "*select*" is.
_STRONG = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*")
_EMPHASIS = re.compile(r"(?<![*\w])\*(?=[^\s*])(.+?)(?<=[^\s*])\*(?![*\w])")
_SLOT = "\x00{}\x00"


def note_html(text: str) -> str:
    """``text`` escaped, with its ```code```, ``**strong**`` and ``*emphasis*`` as tags."""
    kept: list[str] = []

    def keep(match: re.Match[str]) -> str:
        kept.append(f"<code>{match.group(1)}</code>")
        return _SLOT.format(len(kept) - 1)

    # NUL cannot come from the escaped text's own slots: it is dropped before anything is read.
    escaped = html.escape(text.replace("\x00", ""), quote=True)
    marked = _CODE.sub(keep, escaped)
    marked = _STRONG.sub(r"<strong>\1</strong>", marked)
    marked = _EMPHASIS.sub(r"<em>\1</em>", marked)
    return re.sub("\x00(\\d+)\x00", lambda match: kept[int(match.group(1))], marked)
