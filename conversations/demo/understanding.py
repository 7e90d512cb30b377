"""Request understanding, second half: what the user's question says and which tool fits it.

:func:`read_question` finds the current question and its ``[demo:…]`` markers;
:func:`read_facts` pulls out places, days, numbers, expressions, unit conversions and quoted
text; :func:`best_tool` scores each offered tool by word overlap (with stems and synonym groups)
between the question and the tool's name and the words its description affirms
(:func:`read_negations`). Whether the chosen tool's description fits the question is
:mod:`conversations.demo.fit`'s (the demo model's description rule, docs/evals.md §8).

Pure Python: no Django, no I/O, no randomness.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from conversations.demo.request import Message, Tool

# --- The question and what it says ---------------------------------------------------------

_MARKER = re.compile(r"\[demo:([a-z0-9_-]+)(?:=(\d+(?:\.\d+)?))?\]", re.IGNORECASE)


@dataclass(frozen=True)
class Question:
    text: str  # the last user message, markers removed, whitespace collapsed
    markers: frozenset[str]
    slow_seconds: float
    drip_seconds: float = 0.0


def read_question(messages: Sequence[Message]) -> Question:
    index = last_user_index(messages)
    raw = messages[index].text if index >= 0 else ""
    found = list(_MARKER.finditer(raw))
    slow = [float(match.group(2)) for match in found if match.group(1).lower() == "slow" and match.group(2)]
    drip = [float(match.group(2)) for match in found if match.group(1).lower() == "drip" and match.group(2)]
    return Question(
        text=" ".join(_MARKER.sub(" ", raw).split()),
        markers=frozenset(match.group(1).lower() for match in found),
        slow_seconds=max(slow, default=0.0),
        drip_seconds=max(drip, default=0.0),
    )


def follow_up_text(messages: Sequence[Message], text: str) -> str | None:
    """The previous question asked again with this follow-up's values: "And in Paris
    tomorrow?" after "What will the weather be like in Beijing today?" reads as "What will the
    weather be like in Paris tomorrow?". Its places replace the previous places in order and
    its day the previous day (or is added); None when there is no earlier question or the
    follow-up names no place (after "in", "for" or "at") and no day. Whether the follow-up names a tool of its own is the
    caller's choice (``replies.decide``: only when it names none)."""
    asked = last_user_index(messages)
    earlier = [message.text for message in messages[:asked] if message.role == "user"]
    # Only a place named after "in", "for" or "at" counts here: a follow-up's first capitalised
    # word ("Thanks, that is all.") is no place.
    places = next(
        (
            (first, *_following_places(text, match.end()))
            for match in _PLACE_AFTER_PREPOSITION.finditer(text)
            if (first := _trim_place(match.group(1)))
        ),
        (),
    )
    day = _DAY.search(text)
    if not earlier or not (places or day):
        return None
    previous = " ".join(_MARKER.sub(" ", earlier[-1]).split())
    for old, new in zip(_find_places(previous), places, strict=False):
        previous = previous.replace(old, new, 1)
    if day is not None:
        before = _DAY.search(previous)
        if before is None:
            previous = f"{previous.rstrip(' ?.!')} {day.group(1)}?"
        else:
            previous = previous[: before.start(1)] + day.group(1) + previous[before.end(1) :]
    return previous


def last_user_index(messages: Sequence[Message]) -> int:
    return max((index for index, message in enumerate(messages) if message.role == "user"), default=-1)


_STOPWORDS = frozenset(
    """
    a about above after again all also am an and any are as at be been before being below both
    but by can could current currently did do does doing done during each few for from further
    get gets give had has have having he her here hers him his how i if in into is it its it's
    just let like make me might more most much must my myself need no nor not now of off on once
    only or other our ours out over own please same shall she should show so some such tell than
    that the their theirs them then there these they this those through to too under until up
    us very was we were what what's whats when where which while who whom whose why will with
    would yes you your yours
    """.split()
)

# Words that stand for the same topic when matching a question against tool names.
_SYNONYM_GROUPS: tuple[frozenset[str], ...] = (
    frozenset(
        "weather forecast forecasts temperature temperatures rain raining rainy snow snowing sunny "
        "wind windy climate umbrella humid humidity hot cold sky skies cloud clouds cloudy storm "
        "storms sunshine".split()
    ),
    frozenset(
        "calculate calculator calculation calc compute math maths arithmetic evaluate expression "
        "plus minus times multiply multiplied divide divided sum subtract product".split()
    ),
    frozenset("convert conversion converter unit units".split()),
    frozenset("note notes remember memo memorize jot save store reminder".split()),
    frozenset("time clock timezone hour hours".split()),
    frozenset("search find lookup look query".split()),
    frozenset("echo repeat say".split()),
)
_GROUPS_OF: dict[str, frozenset[int]] = {
    word: frozenset(index for index, group in enumerate(_SYNONYM_GROUPS) if word in group)
    for group in _SYNONYM_GROUPS
    for word in group
}


def synonym_groups_of(word: str) -> frozenset[int]:
    """The synonym groups a word (or word form) belongs to, by index; empty for most words."""
    return _GROUPS_OF.get(word, frozenset())


_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_MONTHS = frozenset(
    "january february march april may june july august september october november december".split()
)
_DAY_WORDS = frozenset(("today", "tonight", "tomorrow", "yesterday", *_WEEKDAYS))

# Unit spellings by canonical key, to read "10 km to miles" and match enum values.
_UNIT_ALIASES: dict[str, tuple[str, ...]] = {
    "km": ("km", "kms", "kilometer", "kilometers", "kilometre", "kilometres"),
    "mi": ("mi", "mile", "miles"),
    "m": ("m", "meter", "meters", "metre", "metres"),
    "cm": ("cm", "centimeter", "centimeters", "centimetre", "centimetres"),
    "ft": ("ft", "foot", "feet"),
    "in": ("inch", "inches"),
    "kg": ("kg", "kgs", "kilogram", "kilograms", "kilo", "kilos"),
    "g": ("g", "gram", "grams"),
    "lb": ("lb", "lbs", "pound", "pounds"),
    "c": ("c", "celsius", "centigrade"),
    "f": ("f", "fahrenheit"),
    "k": ("kelvin",),
    "l": ("l", "liter", "liters", "litre", "litres"),
    "gal": ("gal", "gallon", "gallons"),
    "usd": ("usd",),
    "eur": ("eur",),
    "gbp": ("gbp",),
    "jpy": ("jpy",),
    "cny": ("cny",),
}
_UNIT_KEY: dict[str, str] = {alias: key for key, aliases in _UNIT_ALIASES.items() for alias in aliases}

# How a question may name each arithmetic operation an enum might offer.
OPERATION_WORDS: dict[str, tuple[str, ...]] = {
    "add": ("add", "plus", "sum", "+"),
    "subtract": ("subtract", "minus", "-"),
    "multiply": ("multiply", "multiplied", "times", "*"),
    "divide": ("divide", "divided", "/"),
}

_WORD = re.compile(r"[A-Za-z][A-Za-z'’]*")
_ISO_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
_DAY = re.compile(r"\b(\d{4}-\d{2}-\d{2}|" + "|".join(sorted(_DAY_WORDS)) + r")\b", re.IGNORECASE)
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?")
# Read by :func:`quoted_in`, which hides each “ that no ” follows.
_QUOTED = re.compile(r"\"([^\"]+)\"|“([^”]+)”|(?<!\w)'([^']+)'(?!\w)")
_WORD_OPERATORS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\bmultiplied by\b", re.IGNORECASE), "*"),
    (re.compile(r"\bdivided by\b", re.IGNORECASE), "/"),
    (re.compile(r"\btimes\b", re.IGNORECASE), "*"),
    (re.compile(r"\bplus\b", re.IGNORECASE), "+"),
    (re.compile(r"\bminus\b", re.IGNORECASE), "-"),
    (re.compile(r"(?<=\d)\s*[x×]\s*(?=\d)"), " * "),
    (re.compile("÷"), "/"),
)
# ``skip`` (:func:`matches_of`): the rest of a run in which no digit or ")" follows the start.
_EXPRESSION = re.compile(r"[-(\d][\d\s.+\-*/^%()]*[\d)]|(?P<skip>[-(\d][\d\s.+\-*/^%()]*+)")
_HAS_OPERATOR = re.compile(r"[\d)]\s*[+*/^%]\s*[-\d(]|[\d)]\s+-\s+[-\d(]")
# Runs of white space are taken whole (``*+``, ``++``): what follows each is no white space, so
# giving some back never helps, and would retry each split of a long run.
_CONVERSION = re.compile(
    r"(?<![\w.])(-?\d+(?:\.\d+)?)\s*+(?:degrees?\s++)?(°?\s*+[A-Za-z]+)"
    r"\s++(?:to|in|into|as)\s++(?:degrees?\s++)?(°?\s*+[A-Za-z]+)",
    re.IGNORECASE,
)
_CAPITALISED = r"[A-ZÀ-ÖØ-Þ][\w'’.-]*"
_PLACE = rf"{_CAPITALISED}(?:\s+(?:(?:de|del|da|la|le|am|upon|sur)\s+)?{_CAPITALISED})*"
_PLACE_AFTER_PREPOSITION = re.compile(rf"\b(?:in|for|at)\s+({_PLACE})")
_PLACE_ANYWHERE = re.compile(_PLACE)
_LOWERCASE_PLACE = re.compile(r"\b(?:in|for|at)\s+([a-z][a-z'-]+)")
_MORE_PLACES = re.compile(rf"(?:\s*+,\s*+(?:and\s++)?|\s++and\s++|\s*+&\s*+)(?:(?:in|for|at)\s++)?({_PLACE})")


@dataclass(frozen=True)
class _Conversion:
    amount: int | float
    source: str
    target: str


@dataclass(frozen=True)
class Facts:
    """What the question says, read once: the words that point at a tool, and the values that
    can fill arguments."""

    text: str
    words: tuple[str, ...]  # content words in order, distinct, lowercase
    intents: tuple[str, ...]  # topic words implied by a pattern rather than said
    places: tuple[str, ...]
    day: str | None
    numbers: tuple[int | float, ...]
    expression: str | None
    conversion: _Conversion | None
    quoted: tuple[str, ...]


# Paths and URLs: their words name folders, not what the question asks for ("/tmp/list/a.txt").
# ``skip`` (:func:`matches_of`): a run of scheme characters that ends in no "://", but its last
# character (which may start a drive, "c:\").
_PATHS_AND_URLS = re.compile(
    r"(?:\b[a-z][a-z0-9+.-]*://|(?<![\w/])~?/|\b[A-Za-z]:\\)\S*"
    r"|(?P<skip>\b[a-z](?:[a-z0-9+.-](?=[a-z0-9+.-]))*+)"
)


def read_facts(text: str) -> Facts:
    undated = _ISO_DATE.sub(" ", text)
    wordy = blank_out(_PATHS_AND_URLS, text)
    expression = _find_expression(undated)
    conversion = _find_conversion(undated)
    intents = (("calculate",) if expression else ()) + (("convert",) if conversion else ())
    return Facts(
        text=text,
        words=tuple(dict.fromkeys(word for word in words_of(wordy) if word not in _STOPWORDS)),
        intents=intents,
        places=_find_places(text),
        day=_find_day(text),
        numbers=tuple(_to_number(match.group()) for match in _NUMBER.finditer(undated)),
        expression=expression,
        conversion=conversion,
        quoted=tuple(quoted_in(text)),
    )


def matches_of(pattern: re.Pattern[str], text: str) -> Iterator[re.Match[str]]:
    """The pattern's matches in ``text``, those of its ``skip`` alternative left out.

    A pattern that reads a run of characters before the piece that ends a match ("((((" with no
    digit after, "a.a.a…" with no "://", a local part with no "@") fails at each start inside the
    run only after reading the run to its end: time growing with the square of the run. Its
    ``(?P<skip>…)`` alternative, tried where the rest fail, takes the part of the run where no
    match can start, so each character is read a few times at most; the matches left are the
    ones the pattern without it finds."""
    return (match for match in pattern.finditer(text) if match.lastgroup != "skip")


def blank_out(pattern: re.Pattern[str], text: str) -> str:
    """``text`` with each of the pattern's matches (:func:`matches_of`) replaced by a space."""
    return pattern.sub(lambda match: match.group() if match.lastgroup == "skip" else " ", text)


def unclosed_hidden(text: str, openers: str, closers: str) -> str:
    """``text`` with each of ``openers`` that none of ``closers`` follows replaced by NUL (no
    quote, word or space character; one character for one, so spans stay): it could open no
    quote, yet a pattern would read on to the end of the text from each, for time growing with
    the square of the text."""
    end = max(text.rfind(closer) for closer in closers) + 1
    tail = text[end:]
    for opener in openers:
        tail = tail.replace(opener, "\0")
    return text[:end] + tail


def quoted_in(text: str) -> list[str]:
    """The texts between double quotes, curly double quotes or single quotes, in order."""
    hidden = unclosed_hidden(text, "“", "”")
    return [text[slice(*match.span(match.lastindex or 0))] for match in _QUOTED.finditer(hidden)]


def words_of(text: str) -> list[str]:
    """Lowercase words, possessives and stray apostrophes removed."""
    words = (match.group().lower().replace("’", "'") for match in _WORD.finditer(text))
    return [word.removesuffix("'s").strip("'") for word in words]


def tool_name_words(name: str) -> list[str]:
    """Words of an identifier: split on ``_``, ``-``, ``.`` and camelCase, lowercased."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", " ", name)
    return [word.lower() for word in re.split(r"[^A-Za-z0-9]+", spaced) if word and not word.isdigit()]


def _stem(word: str) -> str:
    # Synonym words stay whole so that "times" (multiply) never becomes "time" (clock).
    if word in _GROUPS_OF:
        return word
    for suffix, replacement in (("ies", "y"), ("ing", ""), ("s", "")):
        if word.endswith(suffix) and not word.endswith("ss") and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)] + replacement
    return word


def word_forms_of(words: Iterable[str]) -> frozenset[str]:
    return frozenset(form for word in words for form in (word, _stem(word)))


def _find_day(text: str) -> str | None:
    match = _DAY.search(text)
    if match is None:
        return None
    day = match.group(1).lower()
    return "today" if day == "tonight" else day


def _find_expression(text: str) -> str | None:
    for pattern, symbol in _WORD_OPERATORS:
        text = pattern.sub(symbol, text)
    candidates = [
        match.group() for match in matches_of(_EXPRESSION, text) if _HAS_OPERATOR.search(match.group())
    ]
    if not candidates:
        return None
    return " ".join(max(candidates, key=len).split())


def _find_conversion(text: str) -> _Conversion | None:
    for match in _CONVERSION.finditer(text):
        source, target = (_unit_word(match.group(group)) for group in (2, 3))
        if unit_key(source) or unit_key(target):
            return _Conversion(_to_number(match.group(1)), source, target)
    return None


def _unit_word(raw: str) -> str:
    return raw.replace("°", "").strip()


def unit_key(word: str) -> str | None:
    return _UNIT_KEY.get(word.lower())


def _to_number(raw: str) -> int | float:
    return float(raw) if "." in raw else int(raw)


def _find_places(text: str) -> tuple[str, ...]:
    """Place names: capitalised words after "in"/"for"/"at" (with any joined by "and"), else a
    lowercase word after those, else the first capitalised word that is no common word."""
    for match in _PLACE_AFTER_PREPOSITION.finditer(text):
        first = _trim_place(match.group(1))
        if first:
            return (first, *_following_places(text, match.end()))
    for match in _LOWERCASE_PLACE.finditer(text):
        word = match.group(1)
        if _is_place_word(word):
            return (word.title(),)
    for match in _PLACE_ANYWHERE.finditer(text):
        place = _trim_place(match.group())
        if place:
            return (place,)
    return ()


def _following_places(text: str, position: int) -> list[str]:
    places: list[str] = []
    while (match := _MORE_PLACES.match(text, position)) is not None:
        place = _trim_place(match.group(1))
        if not place:
            break
        places.append(place)
        position = match.end()
    return places


def _trim_place(candidate: str) -> str:
    """The leading words of ``candidate`` up to the first that cannot be part of a place."""
    kept: list[str] = []
    for word in candidate.split():
        cleaned = word.rstrip(".'’-")
        if not _is_place_word(cleaned.lower()):
            break
        kept.append(cleaned)
    return " ".join(kept)


def _is_place_word(word: str) -> bool:
    return bool(word) and not (
        word in _STOPWORDS
        or word in _DAY_WORDS
        or word in _MONTHS
        or word in _UNIT_KEY
        or word in _GROUPS_OF
        or word.isdigit()
    )


# --- Choosing a tool ---------------------------------------------------------------------


@dataclass(frozen=True)
class _Terms:
    forms: frozenset[str]
    groups: frozenset[int]

    @classmethod
    def of(cls, words: Iterable[str]) -> _Terms:
        forms = word_forms_of(words)
        return cls(forms, frozenset(group for form in forms for group in _GROUPS_OF.get(form, ())))


@dataclass(frozen=True)
class _Match:
    tool: Tool
    score: int
    keyword: str | None  # the first question word that pointed at the tool


def best_tool(tools: Sequence[Tool], facts: Facts) -> _Match:
    """The highest-scoring tool; the earliest offered wins a tie, so the choice is stable."""
    best = score_tool(tools[0], facts)
    for tool in tools[1:]:
        match = score_tool(tool, facts)
        if match.score > best.score:
            best = match
    return best


def score_tool(tool: Tool, facts: Facts) -> _Match:
    """Points per question word: 3 when it names the tool, 2 when a synonym does, 1 when the
    description mentions it or a synonym (not in a negation: "never pass a city" names no city)."""
    name = _Terms.of(word for word in tool_name_words(tool.name) if word not in _STOPWORDS)
    description = _Terms.of(word for word in affirmed_words(tool.description) if word not in _STOPWORDS)
    total = 0
    keyword: str | None = None
    for word in dict.fromkeys((*facts.words, *facts.intents)):
        said = _Terms.of([word])
        if said.forms & name.forms:
            points = 3
        elif said.groups & name.groups:
            points = 2
        elif said.forms & description.forms or said.groups & description.groups:
            points = 1
        else:
            points = 0
        if points and keyword is None and word in facts.words:
            keyword = word
        total += points
    return _Match(tool, total, keyword)


_CLAUSE_END = re.compile(r"[.:;!?\n]+")
_NEGATIONS = frozenset("not no never neither nor without cannot none nothing".split())
_CONTRASTS = frozenset("but only instead except rather".split())


def read_negations(text: str) -> tuple[list[str], list[str]]:
    """The words of ``text`` (as :func:`words_of`) split into affirmed and refused ones. A
    negation ("not", "never", "neither", "nor", "without", "cannot", "…n't") refuses the rest of
    its clause (a clause ends at ``.``, ``:``, ``;``, ``!``, ``?`` or a line end), up to a
    contrast ("but", "only", "instead", "except", "rather")."""
    affirmed: list[str] = []
    refused: list[str] = []
    for clause in _CLAUSE_END.split(text):
        negated = False
        for token in _WORD.findall(clause):
            lowered = token.lower().replace("’", "'")
            if lowered in _NEGATIONS or lowered.endswith("n't"):
                negated = True
            elif lowered in _CONTRASTS:
                negated = False
            else:
                (refused if negated else affirmed).extend(words_of(token))
    return affirmed, refused


def affirmed_words(text: str) -> list[str]:
    """The words of ``text`` no negation covers (:func:`read_negations`)."""
    return read_negations(text)[0]


def tool_named(name: str, tools: Sequence[Tool]) -> Tool:
    """The tool called ``name``, else the offered tool whose name is closest to it."""
    by_name = {tool.name: tool for tool in tools}
    if name in by_name:
        return by_name[name]
    closest = difflib.get_close_matches(name, list(by_name), n=1, cutoff=0.0)
    return by_name[closest[0]] if closest else tools[0]
