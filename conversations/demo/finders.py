"""Finding a property's value in the question: the slot being filled and the state of one call's
filling (:class:`Slot`, :class:`Fill`), how each kind of property gets its value
(:class:`Filler`), and the finders and fallbacks of the scalar kinds (:data:`SCALAR_FILLERS`):
places and time zones, days, dates and clocks, numbers and the numbers that count, e-mail
addresses, URLs, paths, queries, names, enum options, and examples a schema gives. Which kind a
property is, arrays and objects, and repairing are :mod:`conversations.demo.arguments`.

Pure Python: no Django, no I/O, no randomness (dates relative to "today" read the clock).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

from conversations.demo.understanding import (
    OPERATION_WORDS,
    Facts,
    blank_out,
    matches_of,
    quoted_in,
    tool_name_words,
    unclosed_hidden,
    unit_key,
    word_forms_of,
    words_of,
)
from conversations.typealias import JSONDict, JSONValue

# --- The slot, the fill and the filler ---------------------------------------------------------


@dataclass(frozen=True)
class Slot:
    name: str
    schema: JSONDict
    required: bool
    kind: str
    # Another property of the same object that counts up to this one ("totalThoughts" for
    # "thoughtNumber"), or that this one counts up to.
    partner: str = ""


@dataclass
class Fill:
    """State of filling one call: values such as numbers are used up in property order."""

    facts: Facts
    keyword: str | None
    numbers: Iterator[int | float] = field(init=False)
    quoted: Iterator[str] = field(init=False)
    units_seen: int = 0
    paths_seen: int = 0
    # Values already given in this object, by property name (an ordinal's total reads it).
    given: JSONDict = field(default_factory=dict)
    # Where the numbers a total took stand in the question (no other property takes them).
    claimed: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.numbers = iter(self.facts.numbers)
        self.quoted = iter(self.facts.quoted)


@dataclass(frozen=True)
class Filler:
    """How one kind of property gets its value.

    ``find`` returns None when the question holds nothing for it; a required property then
    gets the schema's ``default``, else ``fallback``. Optional properties are left out.
    ``keywords`` (matched against the property's name, then its description) and ``types``
    (JSON Schema types; empty means any) decide which properties are of this kind.
    """

    keywords: frozenset[str]
    types: frozenset[str]
    find: Callable[[Slot, Fill], JSONValue]
    fallback: Callable[[Slot, Fill], JSONValue]
    # Whether ``fallback`` is only a placeholder (0, "", "UTC"): the schema's examples, or an
    # example its description gives, are better then. Free text from the question is not.
    placeholder: bool = True


def _find_place(slot: Slot, fill: Fill) -> JSONValue:
    return within_enum(slot, fill.facts.places[0]) if fill.facts.places else None


def _find_day_value(slot: Slot, fill: Fill) -> JSONValue:
    return within_enum(slot, fill.facts.day) if fill.facts.day else None


def _find_expression_value(slot: Slot, fill: Fill) -> JSONValue:
    return fill.facts.expression


def _find_unit(slot: Slot, fill: Fill) -> JSONValue:
    conversion = fill.facts.conversion
    words = set(tool_name_words(slot.name))
    if words & {"from", "source", "input", "origin", "original"}:
        wants_source = True
    elif words & {"to", "target", "output", "into", "destination"}:
        wants_source = False
    else:
        wants_source = fill.units_seen == 0
    fill.units_seen += 1
    if conversion is None:
        return None
    unit = conversion.source if wants_source else conversion.target
    options = enum_options(slot.schema)
    if not options:
        return unit
    return next((option for option in options if unit_key(option) == unit_key(unit)), None)


def find_enum(slot: Slot, fill: Fill) -> JSONValue:
    text = fill.facts.text.lower()
    for option in enum_options(slot.schema):
        spellings = (option.lower(), *OPERATION_WORDS.get(option.lower(), ()))
        if any(re.search(rf"(?<!\w){re.escape(spelling)}(?!\w)", text) for spelling in spellings):
            return option
    return None


def _find_number(slot: Slot, fill: Fill) -> JSONValue:
    """The next number of the question, for a required property; an optional one takes only a
    number said next to what it counts ("the first 3 lines" for ``head``, "N lines")."""
    number = next(fill.numbers, None) if slot.required else _counted_number(slot, fill)
    if number is None:
        return None
    if isinstance(number, float) and number.is_integer() and "integer" in types_of(slot.schema):
        number = int(number)
    return bounded(slot, number)


def _counted_number(slot: Slot, fill: Fill) -> int | float | None:
    description = slot.schema.get("description")
    words = [*tool_name_words(slot.name), *(words_of(description) if isinstance(description, str) else [])]
    counted = word_forms_of(word for word in words if word not in _COUNT_WORDS and len(word) > 2)
    for match in re.finditer(r"(?<![\w.])(-?\d+(?:\.\d+)?)\s+([A-Za-z]+)", fill.facts.text):
        if match.start() not in fill.claimed and word_forms_of([match.group(2).lower()]) & counted:
            return float(match.group(1)) if "." in match.group(1) else int(match.group(1))
    return None


def bounded(slot: Slot, number: int | float) -> int | float:
    """``number`` moved inside the schema's ``minimum``/``maximum`` (the nearest bound)."""
    low, high = slot.schema.get("minimum"), slot.schema.get("maximum")
    if isinstance(low, int | float) and not isinstance(low, bool) and number < low:
        number = low
    if isinstance(high, int | float) and not isinstance(high, bool) and number > high:
        number = high
    return number


def _least_number(slot: Slot, fill: Fill) -> JSONValue:
    """A required number the question does not give: 0, or the nearest value the schema allows
    (``totalThoughts`` with ``minimum: 1`` gets 1)."""
    return bounded(slot, 0)


# Cities as IANA time zone names (the examples a time tool's schema asks for): a small, fixed
# table, so the demo stays deterministic and reads no tz database.
_ZONES: dict[str, str] = {
    "london": "Europe/London", "paris": "Europe/Paris", "berlin": "Europe/Berlin",
    "madrid": "Europe/Madrid", "rome": "Europe/Rome", "amsterdam": "Europe/Amsterdam",
    "brussels": "Europe/Brussels", "vienna": "Europe/Vienna", "zurich": "Europe/Zurich",
    "stockholm": "Europe/Stockholm", "oslo": "Europe/Oslo", "copenhagen": "Europe/Copenhagen",
    "helsinki": "Europe/Helsinki", "dublin": "Europe/Dublin", "lisbon": "Europe/Lisbon",
    "athens": "Europe/Athens", "istanbul": "Europe/Istanbul", "moscow": "Europe/Moscow",
    "warsaw": "Europe/Warsaw", "prague": "Europe/Prague", "lyon": "Europe/Paris",
    "tokyo": "Asia/Tokyo", "seoul": "Asia/Seoul", "beijing": "Asia/Shanghai",
    "shanghai": "Asia/Shanghai", "hong kong": "Asia/Hong_Kong", "singapore": "Asia/Singapore",
    "bangkok": "Asia/Bangkok", "jakarta": "Asia/Jakarta", "manila": "Asia/Manila",
    "mumbai": "Asia/Kolkata", "delhi": "Asia/Kolkata", "new delhi": "Asia/Kolkata",
    "dubai": "Asia/Dubai", "karachi": "Asia/Karachi", "tehran": "Asia/Tehran",
    "sydney": "Australia/Sydney", "melbourne": "Australia/Melbourne", "auckland": "Pacific/Auckland",
    "new york": "America/New_York", "boston": "America/New_York", "chicago": "America/Chicago",
    "denver": "America/Denver", "los angeles": "America/Los_Angeles",
    "san francisco": "America/Los_Angeles", "seattle": "America/Los_Angeles",
    "toronto": "America/Toronto", "vancouver": "America/Vancouver",
    "mexico city": "America/Mexico_City", "sao paulo": "America/Sao_Paulo",
    "são paulo": "America/Sao_Paulo", "buenos aires": "America/Argentina/Buenos_Aires",
    "lima": "America/Lima", "bogota": "America/Bogota", "cairo": "Africa/Cairo",
    "lagos": "Africa/Lagos", "nairobi": "Africa/Nairobi", "johannesburg": "Africa/Johannesburg",
    "honolulu": "Pacific/Honolulu", "utc": "UTC", "gmt": "UTC",
}  # fmt: skip
_ZONE_NAME_RE = re.compile(r"\b[A-Z][A-Za-z]+/[A-Za-z_]+(?:/[A-Za-z_]+)?\b")
_CLOCK_RE = re.compile(r"\b(?:[01]?\d|2[0-3]):[0-5]\d\b")


def zone_of(place: str) -> str | None:
    """The IANA time zone of a city the table knows, or None."""
    return _ZONES.get(place.strip().lower())


def _zones_in(text: str) -> list[str]:
    """The time zones a question names, in order: IANA names as written, then known cities."""
    found: list[tuple[int, str]] = [(m.start(), m.group()) for m in _ZONE_NAME_RE.finditer(text)]
    lowered = text.lower()
    for city, zone in _ZONES.items():
        for match in re.finditer(rf"(?<!\w){re.escape(city)}(?!\w)", lowered):
            found.append((match.start(), zone))
    zones: list[str] = []
    for _, zone in sorted(found):
        if zone not in zones:
            zones.append(zone)
    return zones


def _find_zone(slot: Slot, fill: Fill) -> JSONValue:
    zones = _zones_in(fill.facts.text)
    words = set(tool_name_words(slot.name))
    wants_target = bool(words & {"to", "target", "destination", "into", "output"})
    index = 1 if wants_target and len(zones) > 1 else 0
    if wants_target and len(zones) < 2:
        return None
    return within_enum(slot, zones[index]) if zones else None


def _utc(slot: Slot, fill: Fill) -> JSONValue:
    return "UTC"


def _find_clock(slot: Slot, fill: Fill) -> JSONValue:
    match = _CLOCK_RE.search(fill.facts.text)
    return match.group() if match else None


def _find_quoted(slot: Slot, fill: Fill) -> JSONValue:
    return next(fill.quoted, None)


def _nothing(slot: Slot, fill: Fill) -> JSONValue:
    return None


def _first_option(slot: Slot, fill: Fill) -> JSONValue:
    options = enum_options(slot.schema)
    return options[0] if options else ""


def _free_text(slot: Slot, fill: Fill) -> JSONValue:
    """The question after the word that pointed at the tool ("remember that X" gives "X"),
    else the whole question."""
    text = fill.facts.text
    if fill.keyword:
        match = re.search(rf"\b{re.escape(fill.keyword)}\w*", text, re.IGNORECASE)
        if match:
            text = text[match.end() :]
    text = re.sub(r"^(?:[\s:,;\-–—]+|(?:that|to|me|about|please|down)\b)*", "", text)
    return text.strip(" ?.!") or fill.facts.text.strip(" ?.!")


def _today(slot: Slot, fill: Fill) -> JSONValue:
    return "today"


def empty_of_type(slot: Slot, fill: Fill) -> JSONValue:
    types = types_of(slot.schema)
    if "array" in types:
        return []
    if "object" in types:
        return {}
    if types & {"number", "integer"}:
        return 0
    if "boolean" in types:
        return False
    return ""


# --- Formats, paths, names and queries -------------------------------------------------------

# Patterns with a ``skip`` alternative are read with ``matches_of`` (where a run of characters
# fails to match from its first start, it fails from every later one: ``skip`` takes those).
_EMAIL_RE = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+|(?P<skip>[\w.+-]++)")
_URL_RE = re.compile(r"\b(?:https?|file|ftp)://[^\s\"'<>]+")
_UUID_RE = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.IGNORECASE)
_IPV4_RE = re.compile(r"\b(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)\b")
_HOST_RE = re.compile(
    r"\b(?:[a-z0-9-]+\.)+[a-z]{2,}\b|(?P<skip>\b[a-z0-9-]++(?:\.[a-z0-9-]++)*+)", re.IGNORECASE
)
_ISO_DATE_RE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
# Absolute paths (POSIX, ~, Windows) and relative ones with a directory or an extension; ``skip``
# takes a run of name characters that starts none, but its last character (which may start "c:\").
_PATH_RE = re.compile(
    r"(?<![\w/:])(?:~?/[\w.\-/]*|[A-Za-z]:\\[\w.\-\\]*|\.{1,2}/[\w.\-/]*|[\w\-]+(?:/[\w.\-]+)+|[\w\-]+\.[A-Za-z0-9]{1,5}"
    r"|(?P<skip>[\w\-](?:[\w\-](?=[\w\-]))*+))"
)
_GLOB_RE = re.compile(r"(?<!\S)[\w.\-/]*[*?][\w.\-/*?]*")
_NAMED_RE = re.compile(r"\b(?:named|called|titled)\s+[\"'“]?([A-Z][\w'’-]*(?:\s+[A-Z][\w'’-]*)*|[\w.\-/]+)")
_AFTER_FOR_WORDS = ("for", "about", "matching", "containing", "mentioning")
_AFTER_FOR_RE = re.compile(rf"\b(?:{'|'.join(_AFTER_FOR_WORDS)})\s+(.+)$", re.IGNORECASE)
_TYPE_OF_RE = re.compile(r"\btype of (?:the |an? )?(\w+)", re.IGNORECASE)
# An example a parameter's description gives: "e.g. 'Beijing'", "(e.g., 5, 10)", "such as UTC".
# Read through ``unclosed_hidden``; its spaces and marks are taken whole (what follows each is
# neither), as giving some back would retry each split of a long run of spaces.
_DESCRIBED_EXAMPLE_RE = re.compile(
    r"\b(?:e\.g\.|eg\.|for example|such as|like)\s*+,?+\s*+\(?+\s*+(?:['\"“‘]([^'\"”’]+)['\"”’]|(-?\d+(?:\.\d+)?))"
)
_OPENING_QUOTES, _CLOSING_QUOTES = "“‘", "'\"”’"
FILE_WORDS = frozenset("file files path paths directory directories dir folder folders filesystem".split())
_PATH_SLOT_WORDS = frozenset("path paths file files filename filepath dir directory folder".split())
ENDPOINT_NAMES = frozenset("source destination from to src dst target".split())
_EMAIL_DOMAIN_PLACEHOLDER = "user@example.com"


def _weekday_date(today: date, weekday: str) -> date:
    days = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
    ahead = (days.index(weekday) - today.weekday()) % 7
    return today + timedelta(days=ahead)


def _real_date(text: str) -> date | None:
    """The first real calendar date the question names: an ISO date, today, tomorrow,
    yesterday or a weekday (the next one); None when it names none (2026-02-30 is no date)."""
    for match in _ISO_DATE_RE.finditer(text):
        try:
            return date(int(match.group(1)), int(match.group(2)), int(match.group(3)))
        except ValueError:
            continue
    today = datetime.now(UTC).date()
    lowered = text.lower()
    relative = {"today": 0, "tonight": 0, "now": 0, "tomorrow": 1, "yesterday": -1}
    for word, shift in relative.items():
        if re.search(rf"\b{word}\b", lowered):
            return today + timedelta(days=shift)
    for weekday in ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"):
        if re.search(rf"\b{weekday}\b", lowered):
            return _weekday_date(today, weekday)
    return None


def _clock(text: str) -> str | None:
    match = _CLOCK_RE.search(text)
    if match is None:
        return None
    hours, minutes = match.group().split(":")
    return f"{int(hours):02d}:{minutes}"


def _find_date(slot: Slot, fill: Fill) -> JSONValue:
    day = _real_date(fill.facts.text)
    return day.isoformat() if day else None


def _find_date_time(slot: Slot, fill: Fill) -> JSONValue:
    """An RFC 3339 date-time: the day and the clock time the question names (either may be
    left out: today, midnight), in UTC; None when it names neither."""
    day, clock = _real_date(fill.facts.text), _clock(fill.facts.text)
    if day is None and clock is None:
        return None
    day = day or datetime.now(UTC).date()
    return f"{day.isoformat()}T{clock or '00:00'}:00Z"


def _now_date(slot: Slot, fill: Fill) -> JSONValue:
    return datetime.now(UTC).date().isoformat()


def _now_date_time(slot: Slot, fill: Fill) -> JSONValue:
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _find_time_of_day(slot: Slot, fill: Fill) -> JSONValue:
    clock = _clock(fill.facts.text)
    return f"{clock}:00" if clock else None


def _midnight(slot: Slot, fill: Fill) -> JSONValue:
    return "00:00:00"


def _finder(pattern: re.Pattern[str]) -> Callable[[Slot, Fill], JSONValue]:
    def find(slot: Slot, fill: Fill) -> JSONValue:
        match = next(matches_of(pattern, fill.facts.text), None)
        return match.group().rstrip(".,;:!?)") if match else None

    return find


def _constant(value: str) -> Callable[[Slot, Fill], JSONValue]:
    def fallback(slot: Slot, fill: Fill) -> JSONValue:
        return value

    return fallback


def paths_in(text: str) -> list[str]:
    """File system paths the question names, in order (URLs and e-mail addresses are not)."""
    hidden = blank_out(_EMAIL_RE, _URL_RE.sub(" ", text))
    found = [match.group().rstrip(".,;:!?)") for match in matches_of(_PATH_RE, hidden)]
    return [path for path in dict.fromkeys(found) if path and not _NUMBERISH.fullmatch(path)]


_NUMBERISH = re.compile(r"[\d.\-/]+")


def _find_path(slot: Slot, fill: Fill) -> JSONValue:
    """The path the property stands for: a destination or target takes the second path named,
    any other the first (then the next, for a tool that takes two)."""
    paths = paths_in(fill.facts.text)
    words = set(tool_name_words(slot.name))
    if words & {"destination", "to", "target", "dst", "new"}:
        index = 1
    elif words & {"source", "from", "src", "old"}:
        index = 0
    else:
        index = fill.paths_seen
        fill.paths_seen += 1
    if index < len(paths):
        return paths[index]
    return paths[0] if paths and index == 0 else None


def _current_directory(slot: Slot, fill: Fill) -> JSONValue:
    return "."


def _find_query(slot: Slot, fill: Fill) -> JSONValue:
    """What to search for: quoted text, a glob for a pattern, else what follows "for"/"about"."""
    quoted = next(fill.quoted, None)
    if quoted:
        return quoted
    if "pattern" in tool_name_words(slot.name):
        glob = _GLOB_RE.search(fill.facts.text)
        if glob:
            return glob.group()
    match = _after_for(fill.facts.text)
    return match.group(1).strip(" ?.!\"'") or None if match else None


def _after_for(text: str) -> re.Match[str] | None:
    """:data:`_AFTER_FOR_RE`'s match. Its "$" ends a match at the text's end (or a last line
    break), so a word before the last line starts one only across the white space that reaches
    that line: the search starts there, not at each such word of each earlier line to read it
    to its line's end (time growing with the square of the text)."""
    last_line = text.rfind("\n", 0, len(text) - 1) + 1
    reach = len(text[:last_line].rstrip()) - max(map(len, _AFTER_FOR_WORDS))
    return _AFTER_FOR_RE.search(text, max(reach, 0))


def proper_names(text: str) -> list[str]:
    """Names the question gives: after "named"/"called", quoted, then capitalised words that
    do not start a sentence (runs of them kept together)."""
    names = [match.group(1) for match in _NAMED_RE.finditer(text)]
    names += quoted_in(text)
    for match in re.finditer(r"(?<![.!?]\s)(?<!^)\b([A-Z][\w'’-]*(?:\s+[A-Z][\w'’-]*)*)", text):
        words = [word for word in match.group(1).split() if word.lower() not in _NOT_NAMES]
        if words:
            names.append(" ".join(words))
    return list(dict.fromkeys(name.strip() for name in names if name.strip()))


_NOT_NAMES = frozenset("i the a an and or what who when where which how is are".split())


def _find_name(slot: Slot, fill: Fill) -> JSONValue:
    names = proper_names(fill.facts.text)
    return names[0] if names else None


def _type_of(slot: Slot, fill: Fill) -> JSONValue:
    """A type property's value: the noun its description qualifies ("The type of the entity")."""
    description = slot.schema.get("description")
    match = _TYPE_OF_RE.search(description) if isinstance(description, str) else None
    return match.group(1).lower() if match else "thing"


def described_examples(schema: JSONDict) -> list[JSONValue]:
    """The examples a property's schema gives: its ``examples``, then those its description
    names ("e.g. 'Asia/Tokyo'", "(e.g., 5, 10)")."""
    found: list[JSONValue] = []
    examples = schema.get("examples")
    if isinstance(examples, list):
        found.extend(examples)
    description = schema.get("description")
    if isinstance(description, str):
        hidden = unclosed_hidden(description, _OPENING_QUOTES, _CLOSING_QUOTES)
        for match in _DESCRIBED_EXAMPLE_RE.finditer(hidden):
            quoted, number = match.group(1), match.group(2)
            found.append(quoted if quoted is not None else float(number) if "." in number else int(number))
    return found


def fits(schema: JSONDict, value: JSONValue) -> bool:
    """Whether ``value`` has a type the schema allows and is one of its enum (if it has one)."""
    types = types_of(schema)
    kinds = {
        "string": isinstance(value, str),
        "integer": isinstance(value, int) and not isinstance(value, bool),
        "number": isinstance(value, int | float) and not isinstance(value, bool),
        "boolean": isinstance(value, bool),
        "array": isinstance(value, list),
        "object": isinstance(value, dict),
    }
    if types and not any(kinds.get(kind, False) for kind in types):
        return False
    options = schema.get("enum")
    return not isinstance(options, list) or value in options


def declared_example(slot: Slot) -> JSONValue:
    """The first of the schema's ``examples`` that fits it (not one its description gives)."""
    examples = slot.schema.get("examples")
    fitting = (
        [example for example in examples if fits(slot.schema, example)] if isinstance(examples, list) else []
    )
    return fitting[0] if fitting else None


def example_for(slot: Slot) -> JSONValue:
    """The first example of the slot's schema that fits it (a number moved inside its bounds)."""
    for example in described_examples(slot.schema):
        if fits(slot.schema, example):
            if isinstance(example, int | float) and not isinstance(example, bool):
                return bounded(slot, example)
            return example
    return None


# --- Numbers that count ----------------------------------------------------------------------


def _ordinal_value(slot: Slot, fill: Fill) -> JSONValue:
    """The first of a count ("thoughtNumber" beside "totalThoughts"): its lowest value."""
    low = slot.schema.get("minimum")
    return bounded(slot, low if isinstance(low, int | float) and not isinstance(low, bool) else 1)


def _find_total(slot: Slot, fill: Fill) -> JSONValue:
    """A total ("totalThoughts") the question states next to what it counts ("in 3 thoughts")."""
    counted = {word for word in tool_name_words(slot.name) if word not in _COUNT_WORDS}
    for match in re.finditer(r"(?<![\w.])(\d+)\s+([A-Za-z]+)", fill.facts.text):
        if word_forms_of([match.group(2).lower()]) & word_forms_of(counted):
            fill.claimed.add(match.start())
            return _at_least_partner(slot, fill, int(match.group(1)))
    return None


def _total_fallback(slot: Slot, fill: Fill) -> JSONValue:
    example = example_for(slot)
    number = example if isinstance(example, int | float) and not isinstance(example, bool) else 1
    return _at_least_partner(slot, fill, number)


def _at_least_partner(slot: Slot, fill: Fill, number: int | float) -> JSONValue:
    partner = fill.given.get(slot.partner)
    if isinstance(partner, int | float) and not isinstance(partner, bool) and number < partner:
        number = partner
    return bounded(slot, number)


def _continues(slot: Slot, fill: Fill) -> JSONValue:
    """A required "is another step needed" flag beside a count: whether the count goes on."""
    ordinals = [value for name, value in fill.given.items() if is_ordinal_name(name)]
    totals = [value for name, value in fill.given.items() if _is_total_name(name)]
    if ordinals and totals and all(isinstance(v, int | float) for v in (*ordinals, *totals)):
        return bool(ordinals[0] < totals[0])  # type: ignore[operator]
    default = slot.schema.get("default")
    return default if isinstance(default, bool) else False


_COUNT_WORDS = frozenset("total number count num max estimated".split())
_ORDINAL_WORDS = frozenset("number index position current".split())
_TOTAL_WORDS = frozenset("total count".split())


def is_ordinal_name(name: str) -> bool:
    words = set(tool_name_words(name))
    return bool(words & _ORDINAL_WORDS) and not words & _TOTAL_WORDS and len(words) > 1


def _is_total_name(name: str) -> bool:
    words = set(tool_name_words(name))
    return bool(words & _TOTAL_WORDS) and len(words) > 1


def count_partners(properties: dict[str, JSONValue]) -> dict[str, str]:
    """Ordinal and total properties that count the same thing, each mapped to the other."""
    partners: dict[str, str] = {}
    for ordinal in filter(is_ordinal_name, properties):
        ordinal_words = word_forms_of(tool_name_words(ordinal)) - _COUNT_WORDS - _ORDINAL_WORDS
        for total in filter(_is_total_name, properties):
            if ordinal_words & word_forms_of(tool_name_words(total)):
                partners[ordinal], partners[total] = total, ordinal
    return partners


# --- What a schema allows ------------------------------------------------------------------


def types_of(schema: JSONDict) -> frozenset[str]:
    declared = schema.get("type")
    if isinstance(declared, str):
        return frozenset({declared})
    if isinstance(declared, list):
        return frozenset(item for item in declared if isinstance(item, str) and item != "null")
    return frozenset()


def enum_options(schema: JSONDict) -> list[str]:
    options = schema.get("enum")
    return [option for option in options if isinstance(option, str)] if isinstance(options, list) else []


def within_enum(slot: Slot, value: str) -> str | None:
    options = enum_options(slot.schema)
    if not options:
        return value
    return next((option for option in options if option.lower() == value.lower()), None)


# --- The scalar kinds' fillers --------------------------------------------------------------

STRING = frozenset({"string"})
# The fillers of the kinds whose value is one scalar; arrays and objects are
# :mod:`conversations.demo.arguments`' (they fill their items and properties as a call's).
SCALAR_FILLERS: dict[str, Filler] = {
    "email": Filler(frozenset({"email"}), STRING, _finder(_EMAIL_RE), _constant(_EMAIL_DOMAIN_PLACEHOLDER)),
    "date-time": Filler(frozenset({"datetime", "timestamp"}), STRING, _find_date_time, _now_date_time),
    "date": Filler(frozenset(), STRING, _find_date, _now_date),
    "time-of-day": Filler(frozenset(), STRING, _find_time_of_day, _midnight),
    "uri": Filler(
        frozenset("url uri link href website homepage".split()),
        STRING,
        _finder(_URL_RE),
        _constant("https://example.com/"),
    ),
    "uuid": Filler(frozenset({"uuid"}), STRING, _finder(_UUID_RE), _constant(str(uuid.UUID(int=0)))),
    "ipv4": Filler(frozenset({"ip", "ipv4"}), STRING, _finder(_IPV4_RE), _constant("127.0.0.1")),
    "hostname": Filler(frozenset({"hostname", "host"}), STRING, _finder(_HOST_RE), _constant("localhost")),
    "path": Filler(_PATH_SLOT_WORDS, STRING, _find_path, _current_directory),
    "place": Filler(
        frozenset(
            "city cities location place town country region address destination where village "
            "area locality".split()
        ),
        STRING,
        _find_place,
        empty_of_type,
    ),
    # UTC is what a time tool means when no zone is given (mcp-server-time says so), no placeholder.
    "timezone": Filler(frozenset("timezone tz zone".split()), STRING, _find_zone, _utc, placeholder=False),
    "clock": Filler(frozenset({"time"}), STRING, _find_clock, _free_text, placeholder=False),
    "day": Filler(frozenset("day date when weekday".split()), STRING, _find_day_value, _today),
    "expression": Filler(
        frozenset("expression expr formula equation calculation".split()),
        STRING,
        _find_expression_value,
        _free_text,
        placeholder=False,
    ),
    "unit": Filler(frozenset("unit units currency".split()), STRING, _find_unit, _first_option),
    "query": Filler(
        frozenset("query search q term keyword keywords pattern".split()),
        STRING,
        _find_query,
        _free_text,
        placeholder=False,
    ),
    "name": Filler(frozenset({"name", "names"}), STRING, _find_name, _free_text, placeholder=False),
    "type": Filler(frozenset({"type"}), STRING, _nothing, _type_of),
    "ordinal": Filler(frozenset(), frozenset({"number", "integer"}), _ordinal_value, _ordinal_value),
    "total": Filler(frozenset(), frozenset({"number", "integer"}), _find_total, _total_fallback),
    "continues": Filler(frozenset(), frozenset({"boolean"}), _nothing, _continues),
    "enum": Filler(frozenset(), frozenset(), find_enum, _first_option),
    "number": Filler(frozenset(), frozenset({"number", "integer"}), _find_number, _least_number),
    "boolean": Filler(frozenset(), frozenset({"boolean"}), _nothing, empty_of_type),
    "string": Filler(frozenset(), STRING, _find_quoted, _free_text, placeholder=False),
    "other": Filler(frozenset(), frozenset(), _nothing, empty_of_type),
}
