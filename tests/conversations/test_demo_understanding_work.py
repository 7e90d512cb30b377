"""The demo model reads a question of any shape in time that grows with its length, and reads
it as the former patterns (``OLD``, copied below) read it.

The former patterns read a run of the characters they accept and then needed a piece that
ends a match ("((((" with no digit after, "a.a.a…" with no "://", a local part with no "@",
"““““" with no ”, runs of spaces between two ``\\s*``): each start inside the run read it to its
end before failing, for time growing with the square of the run (the cube, for the example
pattern's three runs of spaces). A question is capped by the form, but one read back from the
prompt (a tool result holding "<|im_start|>user") is not, and a tool's schema is the server's.
The hostile texts run in a child process under a CPU-time limit, so the test never measures
time itself: the child ends with its output, or is killed.

No match differs from the former patterns' (the tests below compare them on many texts)."""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from conversations.demo import finders, understanding
from conversations.demo.finders import (
    SCALAR_FILLERS,
    Fill,
    Slot,
    described_examples,
    paths_in,
    proper_names,
)
from conversations.demo.request import Message
from conversations.demo.understanding import (
    blank_out,
    follow_up_text,
    matches_of,
    quoted_in,
    read_facts,
)
from tests.support import within_cpu_limit

_OLD_PLACE = r"[A-ZÀ-ÖØ-Þ][\w'’.-]*(?:\s+(?:(?:de|del|da|la|le|am|upon|sur)\s+)?[A-ZÀ-ÖØ-Þ][\w'’.-]*)*"
OLD = {
    "expression": re.compile(r"[-(\d][\d\s.+\-*/^%()]*[\d)]"),
    "quoted": re.compile(r"\"([^\"]+)\"|“([^”]+)”|(?<!\w)'([^']+)'(?!\w)"),
    "conversion": re.compile(
        r"(?<![\w.])(-?\d+(?:\.\d+)?)\s*(?:degrees?\s+)?(°?\s*[A-Za-z]+)"
        r"\s+(?:to|in|into|as)\s+(?:degrees?\s+)?(°?\s*[A-Za-z]+)",
        re.IGNORECASE,
    ),
    "more_places": re.compile(
        rf"\s*(?:,\s*(?:and\s+)?|\s+and\s+|\s*&\s*)(?:(?:in|for|at)\s+)?({_OLD_PLACE})"
    ),
    "paths_and_urls": re.compile(r"(?:\b[a-z][a-z0-9+.-]*://|(?<![\w/])~?/|\b[A-Za-z]:\\)\S*"),
    "email": re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+"),
    "host": re.compile(r"\b(?:[a-z0-9-]+\.)+[a-z]{2,}\b", re.IGNORECASE),
    "path": re.compile(
        r"(?<![\w/:])(?:~?/[\w.\-/]*|[A-Za-z]:\\[\w.\-\\]*|\.{1,2}/[\w.\-/]*|[\w\-]+(?:/[\w.\-]+)+"
        r"|[\w\-]+\.[A-Za-z0-9]{1,5})"
    ),
    "after_for": re.compile(r"\b(?:for|about|matching|containing|mentioning)\s+(.+)$", re.IGNORECASE),
    "described": re.compile(
        r"\b(?:e\.g\.|eg\.|for example|such as|like)\s*,?\s*\(?\s*"
        r"(?:['\"“‘]([^'\"”’]+)['\"”’]|(-?\d+(?:\.\d+)?))"
    ),
}
# The current patterns read with a match filter (``matches_of``), by the name of their former one.
FILTERED = {
    "expression": understanding._EXPRESSION,
    "paths_and_urls": understanding._PATHS_AND_URLS,
    "email": finders._EMAIL_RE,
    "host": finders._HOST_RE,
    "path": finders._PATH_RE,
}


def former_quoted(text: str) -> list[str]:
    return [next(group for group in match.groups() if group) for match in OLD["quoted"].finditer(text)]


def former_described(description: str) -> list[Any]:
    found: list[Any] = []
    for match in OLD["described"].finditer(description):
        quoted, number = match.group(1), match.group(2)
        found.append(quoted if quoted is not None else float(number) if "." in number else int(number))
    return found


def texts(pieces: list[str], count: int, seed: int, most: int = 16) -> Iterator[str]:
    chance = random.Random(seed)
    for _ in range(count):
        yield "".join(chance.choices(pieces, k=chance.randint(0, most)))


Shape = tuple[tuple[int, int], tuple[str | None, ...]]


def spans(found: Iterator[re.Match[str]]) -> list[Shape]:
    return [(match.span(), match.groups()) for match in found]


def shape(match: re.Match[str] | None) -> Shape | None:
    return (match.span(), match.groups()) if match else None


# --- The same matches ------------------------------------------------------------------------

PIECES = {
    "expression": [
        "1", "23", "4.5", " ", "  ", "\t", "(", ")", "-", "+", "*", "/", "^", "%", ".", "x", "a", "=", "?",
        "\n", "é", "(1", "2)", "- ", "٣",
    ],
    "paths_and_urls": [
        "a", "z", "ab", "1", "+", ".", "-", ":", "://", "//", "/", "~", "\\", ":\\", "C", "c", " ", "\n",
        "http", "é", "_", "X", "日",
    ],
    "email": [
        "a", "1", "_", ".", "+", "-", "@", " ", "é", "com", ",", "日", "%", "\u202e", "a@b.cd", "@x.io", ".c",
    ],
    "host": [
        "a", "ab", "COM", "1", "-", ".", " ", "_", "é", "ı", "co", "/", ":", "@", "K", "ex.com", ".io", "..",
    ],
    "path": [
        "a", "1", "_", "-", ".", "..", "/", ":", "\\", "~", "C", "c:", " ", "é", "txt", "*", "@", "日", "\n",
    ],
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(FILTERED))
def test_each_filtered_pattern_finds_the_former_matches(name: str) -> None:
    pattern, old = FILTERED[name], OLD[name]
    # Each piece alone and with each other one, then random mixes.
    pieces = PIECES[name]
    cases = [*pieces, *(a + b for a in pieces for b in pieces), *texts(pieces, 4000, seed=len(name))]

    for text in cases:
        assert [match.span() for match in matches_of(pattern, text)] == [
            match.span() for match in old.finditer(text)
        ], text
        assert blank_out(pattern, text) == old.sub(" ", text), text


def test_quoted_texts_are_the_former_ones() -> None:
    pieces = ['"', "“", "”", "'", "’", "‘", "a", "b c", " ", "x'y", "\u202e", "é", "\0", "\n", "it's"]
    cases = [*pieces, *(a + b for a in pieces for b in pieces), *texts(pieces, 6000, seed=1, most=20)]

    for text in cases:
        assert quoted_in(text) == former_quoted(text), text


def test_conversions_are_the_former_ones() -> None:
    pieces = [
        "1", "-2", "3.5", " ", "  ", "\t", "degrees ", "degree", "°", "° ", "km", "Miles", "to", "in",
        "into", "as", "F", "c", ".", "x", "é", "\n", "10 km", " to ", "  in\t", " degrees ", "°C", "5 ",
    ]  # fmt: skip
    # Conversions piece by piece, each piece one of a few spellings, near-misses among them.
    spaces = ["", " ", "  ", "\t", " \n "]
    parts = [
        ["1", "-2", "3.5", "x1", ".5"], spaces, ["", "degrees", "degree", "°"], spaces, ["km", "F", "°C", ""],
        spaces, ["to", "in", "into", "AS", "at"], spaces, ["", "degrees", "°"], spaces, ["miles", "C", "", "1"],
    ]  # fmt: skip
    chance = random.Random(2)
    built = ["".join(chance.choice(options) for options in parts) for _ in range(6000)]

    for text in [*texts(pieces, 6000, seed=2, most=14), *built]:
        now = understanding._CONVERSION.finditer(text)
        assert spans(now) == spans(OLD["conversion"].finditer(text)), text


def test_places_joined_to_a_place_are_the_former_ones() -> None:
    pieces = [
        " ", "  ", "\t", ",", "and", "&", "in", "for", "at", "Paris", "New", "York", "de", "la", "sur",
        "Saint-Étienne", "x", "\n", "Öl", ".", "'", ", and ", " and ", " & ", ", ", " de ", " in ",
    ]  # fmt: skip

    for text in texts(pieces, 1500, seed=3, most=12):
        for position in range(len(text) + 1):
            now = understanding._MORE_PLACES.match(text, position)
            assert shape(now) == shape(OLD["more_places"].match(text, position)), (text, position)


def test_what_follows_for_is_the_former_match() -> None:
    pieces = [
        "for", "about", "matching", "containing", "mentioning", "FOR", " ", "\n", "x", "\t", "a b", ".",
        "forx", "\u2028", "\r",
    ]  # fmt: skip
    cases = [*pieces, *(a + b for a in pieces for b in pieces), *texts(pieces, 6000, seed=4)]

    for text in cases:
        assert shape(finders._after_for(text)) == shape(OLD["after_for"].search(text)), text


def test_examples_a_description_gives_are_the_former_ones() -> None:
    pieces = [
        "e.g.", "eg.", "for example", "such as", "like", " ", "  ", ",", "(", "'", '"', "“", "”", "‘", "’", "5",
        "-1.5", "x", "\0", "Beijing", "\n",
    ]  # fmt: skip

    for text in texts(pieces, 6000, seed=5):
        assert described_examples({"description": text}) == former_described(text), text


QUESTIONS = [
    "What will the weather be like in Beijing today?",
    "And in Paris tomorrow?",
    "What is (3 + 4) * 2?",
    "Calculate -5 + 3 and then ((1+2)*3)-4, please",
    "what's 2 x 3 or 12 divided by 4 or 5 minus 2 times 3?",
    "-(2+3) ^ 2 % 7, 1 - -1, 3.5 * 2 - 1",
    "( 1 + 2 ) ) ( and (((1 and --1+1 and 1+",
    "On 2024-01-01 plus 3 days",
    "Remember \"buy milk\" and “call Ada” and 'water the plants'",
    "don't say 'it's fine', say ‘fine’ or “nested “x” y”",
    '“unclosed quote and "another',
    "Note “a” and “b”, then “c",
    "Convert 10 km to miles",
    "What is 100 degrees F in C? And -40 °C to °F, 5.5 kg into lb, 3 feet as meters",
    "20 degrees celsius to fahrenheit, 1 usd to eur",
    "Weather in Rio de Janeiro and São Paulo",
    "forecast for New York, for Boston and at Chicago & Denver on Monday",
    "in Saint-Étienne, and Lyon & Nice; in Frankfurt am Main; in Stratford upon Avon",
    "Is it raining at the Eiffel Tower?",
    "weather in paris",
    "in  Paris ,  and   Lyon  &  Nice",
    "Email ada@example.com about it, and cc ada.lovelace+x@sub.example.co.uk.",
    "ping example.com or api.example.org:8080, not 192.168.0.1",
    "read /tmp/list/a.txt, open ~/notes.md and ./b/c then ../up",
    "copy C:\\Users\\a.txt to D:\\b and file.tar.gz to a/b/c",
    "see https://example.com/x?y=1 and git@github.com:org/repo.git",
    "search for “quarterly report” in docs/2024",
    "find files matching *.py about tests",
    "save a note named Shopping List called “Groceries”",
    "weather in \u202eParis\u202c tomorrow",
    "مرحبا, what is the weather in Dubai?",
    "日本語: weather in Tokyo and Ōsaka",
    "İstanbul or ünïcödé 'q' at \u2066Berlin\u2069",
    "a.b.c.d@ and 1-2-3-4@x and x@a-b-c",
    "(((((((( ““““ a.a.a.a.a a-a-a-a -----",
    "",
]


def readings(text: str) -> dict[str, Any]:
    """What the demo reads from ``text`` through the public functions."""
    facts = read_facts(text)
    earlier = [Message("user", QUESTIONS[0]), Message("user", text)]
    found = {
        kind: SCALAR_FILLERS[kind].find(Slot(kind, {"type": "string"}, True, kind), Fill(facts, None))
        for kind in ("expression", "unit", "place", "path", "query", "name", "string", "email", "hostname")
    }
    return {
        "facts": facts,
        "follow_up": follow_up_text(earlier, text),
        "paths": paths_in(text),
        "names": proper_names(text),
        "described": described_examples({"description": text}),
        **found,
    }


def _former_finder(pattern: re.Pattern[str]) -> Any:
    def find(slot: Slot, fill: Fill) -> Any:
        match = pattern.search(fill.facts.text)
        return match.group().rstrip(".,;:!?)") if match else None

    return find


def _read_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """The modules as they read before: the former patterns, read without a filter."""
    for name in ("expression", "conversion", "more_places", "paths_and_urls"):
        monkeypatch.setattr(understanding, f"_{name.upper()}", OLD[name])
    for name, attribute in (("email", "_EMAIL_RE"), ("host", "_HOST_RE"), ("path", "_PATH_RE")):
        monkeypatch.setattr(finders, attribute, OLD[name])
    monkeypatch.setattr(finders, "_DESCRIBED_EXAMPLE_RE", OLD["described"])
    monkeypatch.setattr(finders, "unclosed_hidden", lambda text, openers, closers: text)
    monkeypatch.setattr(finders, "_after_for", OLD["after_for"].search)
    monkeypatch.setattr(understanding, "quoted_in", former_quoted)
    monkeypatch.setattr(finders, "quoted_in", former_quoted)
    for kind, name in (("email", "email"), ("hostname", "host")):
        monkeypatch.setitem(
            SCALAR_FILLERS, kind, replace(SCALAR_FILLERS[kind], find=_former_finder(OLD[name]))
        )


def test_questions_read_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    chance = random.Random(6)
    mixes = [" ".join(chance.choices(QUESTIONS, k=chance.randint(2, 4))) for _ in range(300)]
    cases = [*QUESTIONS, *mixes]
    now = [readings(text) for text in cases]

    _read_as_before(monkeypatch)
    before = [readings(text) for text in cases]

    assert [case for case, new, old in zip(cases, now, before, strict=True) if new != old] == []
    assert read_facts(QUESTIONS[2]).expression == "(3 + 4) * 2"


def test_ordinary_questions_give_what_they_gave() -> None:
    assert read_facts("What is (3 + 4) * 2?").expression == "(3 + 4) * 2"
    assert read_facts("Calculate -5 + 3").expression == "-5 + 3"
    assert read_facts('Remember "buy milk" and “call Ada”').quoted == ("buy milk", "call Ada")
    assert read_facts("“unclosed then 'closed'").quoted == ("closed",)
    assert read_facts("Convert 10 km to miles").conversion == understanding._Conversion(10, "km", "miles")
    assert read_facts("in Rio de Janeiro, and Lyon & Nice").places == ("Rio de Janeiro", "Lyon", "Nice")
    assert read_facts("read https://example.com/docs/readme later").words == ("read", "later")
    assert paths_in("mail ada@example.com the file a.txt in ~/notes") == ["a.txt", "~/notes"]
    assert proper_names("save “Groceries” for Ada Lovelace") == ["Groceries", "Ada Lovelace"]
    assert described_examples({"description": "A zone, e.g. 'Asia/Tokyo' or like (5)"}) == ["Asia/Tokyo", 5]


# --- Bounded work on hostile text --------------------------------------------------------------

# ~1 MB texts of the shapes that took the former patterns time growing with the square (or cube)
# of their length, each read as the modules read it, and what must come out. A few have many
# matches, which must cost no more.
HOSTILE = [
    pytest.param("len(list(matches_of(u._EXPRESSION, text)))", '"(" * 1_000_000', "0", id="expression ((("),
    pytest.param("len(list(matches_of(u._EXPRESSION, text)))", '"( " * 500_000', "0", id="expression ( ( ("),
    pytest.param(
        "len(list(matches_of(u._EXPRESSION, text)))", '"1" + " -" * 500_000', "0", id="expression 1 - -"
    ),
    pytest.param(
        "len(list(matches_of(u._EXPRESSION, text)))", '"(1+2)? " * 125_000', "125000", id="expressions"
    ),
    pytest.param("len(quoted_in(text))", '"“" * 1_000_000', "0", id="quoted “““"),
    pytest.param("len(quoted_in(text))", '"“\'" * 500_000', "250000", id="quoted “'“'"),
    pytest.param("len(quoted_in(text))", '"“a” " * 250_000', "250000", id="many quoted"),
    pytest.param("len(f.proper_names(text))", '"“" * 1_000_000', "0", id="names “““"),
    pytest.param(
        "len(list(u._CONVERSION.finditer(text)))", '"1" + " " * 1_000_000 + "!"', "0", id="conversion spaces"
    ),
    pytest.param(
        "len(list(u._CONVERSION.finditer(text)))",
        '"1 km to" + " " * 1_000_000 + "!"',
        "0",
        id="conversion to",
    ),
    pytest.param(
        "u._following_places(text, 8)", '"in Paris" + " " * 1_000_000 + "x"', "[]", id="more places"
    ),
    pytest.param("blank_out(u._PATHS_AND_URLS, text) == text", '"a." * 500_000', "True", id="urls a.a."),
    pytest.param("blank_out(u._PATHS_AND_URLS, text) == text", '"a-" * 500_000', "True", id="urls a-a-"),
    pytest.param("len(list(matches_of(f._EMAIL_RE, text)))", '"a" * 1_000_000', "0", id="email aaa"),
    pytest.param("len(list(matches_of(f._EMAIL_RE, text)))", '"a." * 500_000', "0", id="email a.a."),
    pytest.param("len(list(matches_of(f._EMAIL_RE, text)))", '"x@" + "a-" * 500_000', "0", id="email domain"),
    pytest.param("len(list(matches_of(f._EMAIL_RE, text)))", '"a@b.cd " * 125_000', "125000", id="emails"),
    pytest.param("len(list(matches_of(f._HOST_RE, text)))", '"a." * 500_000', "0", id="host a.a."),
    pytest.param("len(list(matches_of(f._HOST_RE, text)))", '"1-" * 500_000', "0", id="host 1-1-"),
    pytest.param("len(list(matches_of(f._PATH_RE, text)))", '"a-" * 500_000', "0", id="path a-a-"),
    pytest.param("len(list(matches_of(f._PATH_RE, text)))", '"-" * 1_000_000', "0", id="path ---"),
    pytest.param("f._after_for(text).group(1)", '"for " * 250_000 + "\\nx"', "'x'", id="after for"),
    pytest.param("f.described_examples({'description': text})", '"like “" * 166_666', "[]", id="described “"),
    pytest.param(
        "f.described_examples({'description': text})",
        '"like" + " " * 1_000_000 + "!"',
        "[]",
        id="described spaces",
    ),
]
# CPU seconds the child may spend: the current code needs under 0.16 s for any one text, the
# interpreter's start included; the former one more than 20 s for each without many matches (by
# the square of the length, from 8 minutes for "“'“'…" to hours for "a.a.…" as a host).
CPU_SECONDS = 20

CHILD = """
import sys
from conversations.demo import finders as f, understanding as u
from conversations.demo.understanding import blank_out, matches_of, quoted_in
text = eval(sys.argv[2])
print(repr(eval(sys.argv[1])))
"""


@pytest.mark.parametrize(("reading", "expression", "result"), HOSTILE)
def test_a_hostile_megabyte_is_read_within_a_cpu_time_limit(
    reading: str, expression: str, result: str
) -> None:
    printed = within_cpu_limit(CHILD, reading, expression, seconds=CPU_SECONDS)

    assert printed.strip() == result
