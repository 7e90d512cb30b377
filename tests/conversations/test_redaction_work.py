"""The built-in e-mail pattern's cost and reach: a megabyte a host, a server or a model sends is
redacted in bounded time whatever its shape, and what the pattern redacts is what the former one
(``OLD_EMAIL``: its local part started at any word boundary) redacted.

The former pattern tried a local part at every word boundary of a run of local-part characters
("a.a.a…", "1-2-3…") and scanned the run to its end each time: time quadratic in the run's
length, minutes for a megabyte. The hostile texts run in a child process under a CPU-time limit,
so the test never measures time itself: the child ends with its output, or is killed.

Where the two differ, the current pattern redacts more, never less (``test_every_character…``):
a local part is taken from the start of its run (the former one kept "+", "-", "." or "%" leading
it after a space, and skipped an address written right after a letter outside ASCII), and
addresses joined by local-part characters or sharing a domain run become one marker."""

from __future__ import annotations

import random
import re
from dataclasses import replace

import pytest

from conversations.redaction import BUILTIN_PATTERNS, Redactor, redactor
from tests.support import within_cpu_limit

OLD_EMAIL = r"\b[A-Za-z0-9._%+\-]+@[A-Za-z0-9.\-]+\.[A-Za-z]{2,}\b"
EMAIL = dict(BUILTIN_PATTERNS)["email"]
MARK = "[REDACTED:email]"


def _with_old_email(redact: Redactor) -> Redactor:
    patterns = tuple(
        (name, re.compile(OLD_EMAIL) if name == "email" else pattern) for name, pattern in redact.patterns
    )
    return replace(redact, patterns=patterns)


ADDRESSES = [
    "ada@example.com",
    "ada.lovelace+inspector@example.co.uk",
    "ADA_LOVELACE@EXAMPLE.ORG",
    "a%b@ex-ample.travel",
    "1@2.io",
    "o'brien@example.com",
    "user.name-tag@sub.domain-x.example.museum",
    "x-@y.zz",
]
NEAR_MISSES = [
    "@",
    "@example.com",
    "ada@",
    "ada@localhost",
    "ada@example.c",
    "ada@example.com1",
    "ada@example.com_x",
    "ada@@example.com",
    "ada @example.com",
    "ада@пример.рф",
    "ada@пример.com",
    "a.a.a.a@",
    "1-2-3-4@x",
]
# Characters before an address that leave where its local part starts as it was: they end in
# neither a local-part character nor a word character (a space, punctuation, a symbol, a bidi
# control). After one, any character does.
BEFORE = [
    "", " ", "\n", "\t", "(", ")", "<", ">", ",", ";", ":", '"', "'", "/", "\\", "!", "?", "=",
    "mailto:", "— ", "😀", "\u202e", "\u202c", "\u200f", "\u200e", "\u2066", "\u2069", "\u00a0",
    "שלום ", "مرحبا ", "日本語 ", "ünïcödé ", '{"to": "',
]  # fmt: skip
AFTER = ["", " ", ".", ",", ">", ")", '"}', "\n", "😀", "\u202c", "ünï", " İstanbul", "مرحبا", "_x", "-", "1"]

ORDINARY = [
    *(before + address + after for address in ADDRESSES for before in BEFORE for after in AFTER),
    *(before + miss + after for miss in NEAR_MISSES for before in BEFORE for after in AFTER[:6]),
    "",
    "no address here, only words.",
    "mail ops@example.com the key sk-proj-Abcdefghijklmnopqrstuvwxyz0123",
    "ada@example.com,bob@example.org; carol@example.net bob@example.org",
    "a@b@c.com",
    "ada@example.com.",
    "ada@example.com's notes",
    "git@github.com:org/repo.git",
    "https://user:secret@host.example.com/path?to=ada@example.com#x",
    "wordada@example.com",
    "ada@example.com\u202edlrow",
    "\u202bada@example.com\u202c and \u2067bob@example.org\u2069",
    "the value was 1-2-3-4-5@example — then a.b.c.d.e@ and f.g@h.ij",
]


def test_ordinary_and_tricky_texts_are_redacted_as_the_former_pattern_redacted_them() -> None:
    redact = redactor()
    old = _with_old_email(redact)

    assert [text for text in ORDINARY if redact.text(text) != old.text(text)] == []
    assert sum(MARK in old.text(text) for text in ORDINARY) > len(ADDRESSES) * len(BEFORE)


def test_addresses_among_words_and_separators_are_redacted_as_before() -> None:
    """Random texts: addresses, near-misses and words, each piece set apart by a separator that
    is neither a local-part nor a word character."""
    redact = redactor()
    old = _with_old_email(redact)
    separators = [" ", "\n", ", ", "; ", "(", ") ", "<", "> ", '"', "'", "/", "—", "😀", "\u202e", "\u200f"]
    words = ["word", "sk-", "bearer", "日本語", "ünï", "a.b", "x-y", "%", "+1"]
    chance = random.Random(37)
    texts = [
        "".join(
            chance.choice(separators) + chance.choice(ADDRESSES + NEAR_MISSES + words)
            for _ in range(chance.randint(1, 10))
        )
        for _ in range(2000)
    ]

    assert [redact.text(text) for text in texts] == [old.text(text) for text in texts]


def _redacted_characters(pattern: str, text: str) -> set[int]:
    return {index for found in re.finditer(pattern, text) for index in range(*found.span())}


def test_every_character_the_former_pattern_redacted_is_still_redacted() -> None:
    """Random texts of addresses, near-misses, local-part characters and characters outside
    ASCII run together: where the patterns differ, the current one redacts more."""
    pieces = [
        *ADDRESSES, *NEAR_MISSES, "a", "1", "_", ".", "-", "+", "%", "@", "é", "日", "ß", "😀", " ", "\u202e",
    ]  # fmt: skip
    chance = random.Random(38)
    texts = ["".join(chance.choices(pieces, k=chance.randint(1, 14))) for _ in range(4000)]

    for text in texts:
        assert _redacted_characters(OLD_EMAIL, text) <= _redacted_characters(EMAIL, text), text


@pytest.mark.parametrize(
    ("text", "former", "now"),
    [
        # A local part's leading "+", "-", "." or "%" after a space or punctuation: redacted too.
        ("(+ada@example.com)", f"(+{MARK})", f"({MARK})"),
        ("see: ...ada@example.com", f"see: ...{MARK}", f"see: {MARK}"),
        # An address written right after a letter outside ASCII (Chinese, Japanese text) was
        # not redacted at all, or only from its first "." on.
        ("请联系ada@example.com", "请联系ada@example.com", f"请联系{MARK}"),
        ("éada.lovelace@example.com", f"éada{MARK}", f"é{MARK}"),
        # Two addresses joined by a local-part character: one marker.
        ("ada@example.com-bob@example.org", f"{MARK}{MARK}", MARK),
    ],
)
def test_where_the_patterns_differ_the_current_one_redacts_more(text: str, former: str, now: str) -> None:
    redact = redactor()

    assert (_with_old_email(redact).text(text), redact.text(text)) == (former, now)


# ~1 MB texts of the shapes that took the former pattern quadratic time (each with an "@", the
# e-mail pattern's screen) and a few with many matches, and how each must come out.
HOSTILE = [
    pytest.param('"a." * 500_000 + "@"', 1_000_001, 0, id="dots then @"),
    pytest.param('"@ " + "1-" * 500_000', 1_000_002, 0, id="@ then dashes"),
    pytest.param('"x@" + "a-" * 500_000', 1_000_002, 0, id="domain without a top level"),
    pytest.param('"x@" + "a." * 500_000', 1_000_002, 0, id="dotted domain"),
    pytest.param('"a.b-c%d+e_" * 100_000 + "@"', 1_000_001, 0, id="mixed run then @"),
    pytest.param('"1-" * 500_000 + " ada@example.com"', 1_000_001 + len(MARK), 1, id="run then an address"),
    pytest.param('"a." * 500_000 + "a@example.com"', len(MARK), 1, id="run as a local part"),
    pytest.param('"a@" * 500_000', 1_000_000, 0, id="many @"),
    pytest.param('"a@b.cd " * 125_000', 125_000 * (len(MARK) + 1), 125_000, id="many addresses"),
    pytest.param('"a@b.cd-" * 125_000', len(MARK) + 1, 1, id="joined addresses"),
    pytest.param('"x@" + "b.cd@" * 200_000', len(MARK) + 1, 1, id="domains joined by @"),
]
# CPU seconds the child may spend: the current pattern needs under 0.07 s for any one text, the
# interpreter's start included; the former one minutes for each of the first seven.
CPU_SECONDS = 10

CHILD = f"""
import sys
from conversations.redaction import redactor
text = redactor().text(eval(sys.argv[1]))
print(len(text), text.count({MARK!r}))
"""


@pytest.mark.parametrize(("expression", "length", "markers"), HOSTILE)
def test_a_hostile_megabyte_is_redacted_within_a_cpu_time_limit(
    expression: str, length: int, markers: int
) -> None:
    printed = within_cpu_limit(CHILD, expression, seconds=CPU_SECONDS)

    assert printed.split() == [str(length), str(markers)]
