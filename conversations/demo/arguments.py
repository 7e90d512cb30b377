"""Argument filling: a tool's arguments from the question's facts, guided by its JSON Schema.

Each property becomes a slot of one kind (a format such as email, date, date-time or uri; a
path, place, time zone, day, expression, unit, query, name; an enum, number, boolean, string,
array or object), chosen from its schema's ``format``, its name, its ``enum``, its description
and its type; :data:`_FILLERS` holds the filler of each kind. A value the question gives wins;
else a required property gets the schema's ``default``, then (for kinds whose own fallback is
only a placeholder) its ``examples`` or an example its description gives ("e.g. 'UTC'"), then
the filler's fallback. Numbers stay inside ``minimum``/``maximum``; arrays and objects are
filled from their ``items`` and ``properties``. Only required properties are filled unless a
fact fits an optional one.

Pure Python: no Django, no I/O, no randomness (dates relative to "today" read the clock).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta

from conversations.demo.request import Tool
from conversations.demo.understanding import (
    OPERATION_WORDS,
    Facts,
    read_facts,
    tool_name_words,
    unit_key,
    word_forms_of,
    words_of,
)
from conversations.typealias import JSONDict, JSONValue

# --- Filling arguments -------------------------------------------------------------------


@dataclass(frozen=True)
class _Slot:
    name: str
    schema: JSONDict
    required: bool
    kind: str
    # Another property of the same object that counts up to this one ("totalThoughts" for
    # "thoughtNumber"), or that this one counts up to.
    partner: str = ""


@dataclass
class _Fill:
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
class _Filler:
    """How one kind of property gets its value.

    ``find`` returns None when the question holds nothing for it; a required property then
    gets the schema's ``default``, else ``fallback``. Optional properties are left out.
    ``keywords`` (matched against the property's name, then its description) and ``types``
    (JSON Schema types; empty means any) decide which properties are of this kind.
    """

    keywords: frozenset[str]
    types: frozenset[str]
    find: Callable[[_Slot, _Fill], JSONValue]
    fallback: Callable[[_Slot, _Fill], JSONValue]
    # Whether ``fallback`` is only a placeholder (0, "", "UTC"): the schema's examples, or an
    # example its description gives, are better then. Free text from the question is not.
    placeholder: bool = True


def _find_place(slot: _Slot, fill: _Fill) -> JSONValue:
    return _within_enum(slot, fill.facts.places[0]) if fill.facts.places else None


def _find_day_value(slot: _Slot, fill: _Fill) -> JSONValue:
    return _within_enum(slot, fill.facts.day) if fill.facts.day else None


def _find_expression_value(slot: _Slot, fill: _Fill) -> JSONValue:
    return fill.facts.expression


def _find_unit(slot: _Slot, fill: _Fill) -> JSONValue:
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
    options = _enum(slot.schema)
    if not options:
        return unit
    return next((option for option in options if unit_key(option) == unit_key(unit)), None)


def _find_enum(slot: _Slot, fill: _Fill) -> JSONValue:
    text = fill.facts.text.lower()
    for option in _enum(slot.schema):
        spellings = (option.lower(), *OPERATION_WORDS.get(option.lower(), ()))
        if any(re.search(rf"(?<!\w){re.escape(spelling)}(?!\w)", text) for spelling in spellings):
            return option
    return None


def _find_number(slot: _Slot, fill: _Fill) -> JSONValue:
    """The next number of the question, for a required property; an optional one takes only a
    number said next to what it counts ("the first 3 lines" for ``head``, "N lines")."""
    number = next(fill.numbers, None) if slot.required else _counted_number(slot, fill)
    if number is None:
        return None
    if isinstance(number, float) and number.is_integer() and "integer" in _types(slot.schema):
        number = int(number)
    return _bounded(slot, number)


def _counted_number(slot: _Slot, fill: _Fill) -> int | float | None:
    description = slot.schema.get("description")
    words = [*tool_name_words(slot.name), *(words_of(description) if isinstance(description, str) else [])]
    counted = word_forms_of(word for word in words if word not in _COUNT_WORDS and len(word) > 2)
    for match in re.finditer(r"(?<![\w.])(-?\d+(?:\.\d+)?)\s+([A-Za-z]+)", fill.facts.text):
        if match.start() not in fill.claimed and word_forms_of([match.group(2).lower()]) & counted:
            return float(match.group(1)) if "." in match.group(1) else int(match.group(1))
    return None


def _bounded(slot: _Slot, number: int | float) -> int | float:
    """``number`` moved inside the schema's ``minimum``/``maximum`` (the nearest bound)."""
    low, high = slot.schema.get("minimum"), slot.schema.get("maximum")
    if isinstance(low, int | float) and not isinstance(low, bool) and number < low:
        number = low
    if isinstance(high, int | float) and not isinstance(high, bool) and number > high:
        number = high
    return number


def _least_number(slot: _Slot, fill: _Fill) -> JSONValue:
    """A required number the question does not give: 0, or the nearest value the schema allows
    (``totalThoughts`` with ``minimum: 1`` gets 1)."""
    return _bounded(slot, 0)


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


def _find_zone(slot: _Slot, fill: _Fill) -> JSONValue:
    zones = _zones_in(fill.facts.text)
    words = set(tool_name_words(slot.name))
    wants_target = bool(words & {"to", "target", "destination", "into", "output"})
    index = 1 if wants_target and len(zones) > 1 else 0
    if wants_target and len(zones) < 2:
        return None
    return _within_enum(slot, zones[index]) if zones else None


def _utc(slot: _Slot, fill: _Fill) -> JSONValue:
    return "UTC"


def _find_clock(slot: _Slot, fill: _Fill) -> JSONValue:
    match = _CLOCK_RE.search(fill.facts.text)
    return match.group() if match else None


def _find_quoted(slot: _Slot, fill: _Fill) -> JSONValue:
    return next(fill.quoted, None)


def _nothing(slot: _Slot, fill: _Fill) -> JSONValue:
    return None


def _first_option(slot: _Slot, fill: _Fill) -> JSONValue:
    options = _enum(slot.schema)
    return options[0] if options else ""


def _free_text(slot: _Slot, fill: _Fill) -> JSONValue:
    """The question after the word that pointed at the tool ("remember that X" gives "X"),
    else the whole question."""
    text = fill.facts.text
    if fill.keyword:
        match = re.search(rf"\b{re.escape(fill.keyword)}\w*", text, re.IGNORECASE)
        if match:
            text = text[match.end() :]
    text = re.sub(r"^(?:[\s:,;\-–—]+|(?:that|to|me|about|please|down)\b)*", "", text)
    return text.strip(" ?.!") or fill.facts.text.strip(" ?.!")


def _today(slot: _Slot, fill: _Fill) -> JSONValue:
    return "today"


def _empty_of_type(slot: _Slot, fill: _Fill) -> JSONValue:
    types = _types(slot.schema)
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

_EMAIL_RE = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_URL_RE = re.compile(r"\b(?:https?|file|ftp)://[^\s\"'<>]+")
_UUID_RE = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.IGNORECASE)
_IPV4_RE = re.compile(r"\b(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)\b")
_HOST_RE = re.compile(r"\b(?:[a-z0-9-]+\.)+[a-z]{2,}\b", re.IGNORECASE)
_ISO_DATE_RE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
# Absolute paths (POSIX, ~, Windows) and relative ones with a directory or an extension.
_PATH_RE = re.compile(
    r"(?<![\w/:])(?:~?/[\w.\-/]*|[A-Za-z]:\\[\w.\-\\]*|\.{1,2}/[\w.\-/]*|[\w\-]+(?:/[\w.\-]+)+|[\w\-]+\.[A-Za-z0-9]{1,5})"
)
_GLOB_RE = re.compile(r"(?<!\S)[\w.\-/]*[*?][\w.\-/*?]*")
_NAMED_RE = re.compile(r"\b(?:named|called|titled)\s+[\"'“]?([A-Z][\w'’-]*(?:\s+[A-Z][\w'’-]*)*|[\w.\-/]+)")
_AFTER_FOR_RE = re.compile(r"\b(?:for|about|matching|containing|mentioning)\s+(.+)$", re.IGNORECASE)
_TYPE_OF_RE = re.compile(r"\btype of (?:the |an? )?(\w+)", re.IGNORECASE)
# An example a parameter's description gives: "e.g. 'Beijing'", "(e.g., 5, 10)", "such as UTC".
_DESCRIBED_EXAMPLE_RE = re.compile(
    r"\b(?:e\.g\.|eg\.|for example|such as|like)\s*,?\s*\(?\s*(?:['\"“‘]([^'\"”’]+)['\"”’]|(-?\d+(?:\.\d+)?))"
)
_FILE_WORDS = frozenset("file files path paths directory directories dir folder folders filesystem".split())
_PATH_SLOT_WORDS = frozenset("path paths file files filename filepath dir directory folder".split())
_ENDPOINT_NAMES = frozenset("source destination from to src dst target".split())
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


def _find_date(slot: _Slot, fill: _Fill) -> JSONValue:
    day = _real_date(fill.facts.text)
    return day.isoformat() if day else None


def _find_date_time(slot: _Slot, fill: _Fill) -> JSONValue:
    """An RFC 3339 date-time: the day and the clock time the question names (either may be
    left out: today, midnight), in UTC; None when it names neither."""
    day, clock = _real_date(fill.facts.text), _clock(fill.facts.text)
    if day is None and clock is None:
        return None
    day = day or datetime.now(UTC).date()
    return f"{day.isoformat()}T{clock or '00:00'}:00Z"


def _now_date(slot: _Slot, fill: _Fill) -> JSONValue:
    return datetime.now(UTC).date().isoformat()


def _now_date_time(slot: _Slot, fill: _Fill) -> JSONValue:
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _find_time_of_day(slot: _Slot, fill: _Fill) -> JSONValue:
    clock = _clock(fill.facts.text)
    return f"{clock}:00" if clock else None


def _midnight(slot: _Slot, fill: _Fill) -> JSONValue:
    return "00:00:00"


def _finder(pattern: re.Pattern[str]) -> Callable[[_Slot, _Fill], JSONValue]:
    def find(slot: _Slot, fill: _Fill) -> JSONValue:
        match = pattern.search(fill.facts.text)
        return match.group().rstrip(".,;:!?)") if match else None

    return find


def _constant(value: str) -> Callable[[_Slot, _Fill], JSONValue]:
    def fallback(slot: _Slot, fill: _Fill) -> JSONValue:
        return value

    return fallback


def paths_in(text: str) -> list[str]:
    """File system paths the question names, in order (URLs and e-mail addresses are not)."""
    hidden = _EMAIL_RE.sub(" ", _URL_RE.sub(" ", text))
    found = [match.group().rstrip(".,;:!?)") for match in _PATH_RE.finditer(hidden)]
    return [path for path in dict.fromkeys(found) if path and not _NUMBERISH.fullmatch(path)]


_NUMBERISH = re.compile(r"[\d.\-/]+")


def _find_path(slot: _Slot, fill: _Fill) -> JSONValue:
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


def _current_directory(slot: _Slot, fill: _Fill) -> JSONValue:
    return "."


def _find_query(slot: _Slot, fill: _Fill) -> JSONValue:
    """What to search for: quoted text, a glob for a pattern, else what follows "for"/"about"."""
    quoted = next(fill.quoted, None)
    if quoted:
        return quoted
    if "pattern" in tool_name_words(slot.name):
        glob = _GLOB_RE.search(fill.facts.text)
        if glob:
            return glob.group()
    match = _AFTER_FOR_RE.search(fill.facts.text)
    return match.group(1).strip(" ?.!\"'") or None if match else None


def proper_names(text: str) -> list[str]:
    """Names the question gives: after "named"/"called", quoted, then capitalised words that
    do not start a sentence (runs of them kept together)."""
    names = [match.group(1) for match in _NAMED_RE.finditer(text)]
    names += [next(group for group in match.groups() if group) for match in _QUOTED_RE.finditer(text)]
    for match in re.finditer(r"(?<![.!?]\s)(?<!^)\b([A-Z][\w'’-]*(?:\s+[A-Z][\w'’-]*)*)", text):
        words = [word for word in match.group(1).split() if word.lower() not in _NOT_NAMES]
        if words:
            names.append(" ".join(words))
    return list(dict.fromkeys(name.strip() for name in names if name.strip()))


_QUOTED_RE = re.compile(r"\"([^\"]+)\"|“([^”]+)”|(?<!\w)'([^']+)'(?!\w)")
_NOT_NAMES = frozenset("i the a an and or what who when where which how is are".split())


def _find_name(slot: _Slot, fill: _Fill) -> JSONValue:
    names = proper_names(fill.facts.text)
    return names[0] if names else None


def _type_of(slot: _Slot, fill: _Fill) -> JSONValue:
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
        for match in _DESCRIBED_EXAMPLE_RE.finditer(description):
            quoted, number = match.group(1), match.group(2)
            found.append(quoted if quoted is not None else float(number) if "." in number else int(number))
    return found


def _fits(schema: JSONDict, value: JSONValue) -> bool:
    """Whether ``value`` has a type the schema allows and is one of its enum (if it has one)."""
    types = _types(schema)
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


def _declared_example(slot: _Slot) -> JSONValue:
    """The first of the schema's ``examples`` that fits it (not one its description gives)."""
    examples = slot.schema.get("examples")
    fitting = (
        [example for example in examples if _fits(slot.schema, example)] if isinstance(examples, list) else []
    )
    return fitting[0] if fitting else None


def _example(slot: _Slot) -> JSONValue:
    """The first example of the slot's schema that fits it (a number moved inside its bounds)."""
    for example in described_examples(slot.schema):
        if _fits(slot.schema, example):
            if isinstance(example, int | float) and not isinstance(example, bool):
                return _bounded(slot, example)
            return example
    return None


# --- Arrays and objects ----------------------------------------------------------------------


def _items_slot(slot: _Slot) -> _Slot:
    """The slot an array's items would be, named after the array ("paths" → a path)."""
    items = slot.schema.get("items")
    schema = dict(items) if isinstance(items, dict) else {}
    if "description" not in schema and isinstance(slot.schema.get("description"), str):
        schema["description"] = slot.schema["description"]
    name = re.sub(r"(?i)(?<=[a-z])s$", "", slot.name)
    return _Slot(name, schema, True, _kind(name, schema, frozenset()))


def _find_array(slot: _Slot, fill: _Fill) -> JSONValue:
    """Items the question gives for the array: every path, name or place for arrays of those;
    one filled object for an array of objects; None when it gives none."""
    item = _items_slot(slot)
    many: dict[str, Callable[[str], list[str]]] = {
        "path": paths_in,
        "name": proper_names,
        "place": lambda text: list(fill.facts.places),
    }
    if item.kind in many:
        values = many[item.kind](fill.facts.text)
        return _sized(slot, list(values)) if values else None
    if item.kind == "object":
        value = _find_object(item, fill)
        return [value] if value else None
    if item.kind in ("string", "query"):
        return None
    value = _FILLERS[item.kind].find(item, fill)
    return [value] if value is not None else None


def _array_fallback(slot: _Slot, fill: _Fill) -> JSONValue:
    """A required array the question gives nothing for: one item (free text, or a filled object)
    when it must have items or holds text, else empty."""
    item = _items_slot(slot)
    minimum = slot.schema.get("minItems")
    needs_item = isinstance(minimum, int) and minimum > 0
    if item.kind == "object":
        return [_filled_object(item, fill)]
    if item.kind in ("string", "query") or needs_item:
        value = _value_for(item, fill)
        return [value] if value is not None else []
    return []


def _sized(slot: _Slot, values: list[JSONValue]) -> list[JSONValue]:
    maximum = slot.schema.get("maxItems")
    return values[:maximum] if isinstance(maximum, int) and maximum >= 1 else values


def _find_object(slot: _Slot, fill: _Fill) -> JSONValue:
    if not isinstance(slot.schema.get("properties"), dict):
        return None
    return _filled_object(slot, fill)


def _filled_object(slot: _Slot, fill: _Fill) -> JSONDict:
    inner = _Fill(fill.facts, fill.keyword)
    return _fill_arguments(_slots_of(slot.schema, frozenset()), inner)


# --- Numbers that count ----------------------------------------------------------------------


def _ordinal_value(slot: _Slot, fill: _Fill) -> JSONValue:
    """The first of a count ("thoughtNumber" beside "totalThoughts"): its lowest value."""
    low = slot.schema.get("minimum")
    return _bounded(slot, low if isinstance(low, int | float) and not isinstance(low, bool) else 1)


def _find_total(slot: _Slot, fill: _Fill) -> JSONValue:
    """A total ("totalThoughts") the question states next to what it counts ("in 3 thoughts")."""
    counted = {word for word in tool_name_words(slot.name) if word not in _COUNT_WORDS}
    for match in re.finditer(r"(?<![\w.])(\d+)\s+([A-Za-z]+)", fill.facts.text):
        if word_forms_of([match.group(2).lower()]) & word_forms_of(counted):
            fill.claimed.add(match.start())
            return _at_least_partner(slot, fill, int(match.group(1)))
    return None


def _total_fallback(slot: _Slot, fill: _Fill) -> JSONValue:
    example = _example(slot)
    number = example if isinstance(example, int | float) and not isinstance(example, bool) else 1
    return _at_least_partner(slot, fill, number)


def _at_least_partner(slot: _Slot, fill: _Fill, number: int | float) -> JSONValue:
    partner = fill.given.get(slot.partner)
    if isinstance(partner, int | float) and not isinstance(partner, bool) and number < partner:
        number = partner
    return _bounded(slot, number)


def _continues(slot: _Slot, fill: _Fill) -> JSONValue:
    """A required "is another step needed" flag beside a count: whether the count goes on."""
    ordinals = [value for name, value in fill.given.items() if _is_ordinal_name(name)]
    totals = [value for name, value in fill.given.items() if _is_total_name(name)]
    if ordinals and totals and all(isinstance(v, int | float) for v in (*ordinals, *totals)):
        return bool(ordinals[0] < totals[0])  # type: ignore[operator]
    default = slot.schema.get("default")
    return default if isinstance(default, bool) else False


_COUNT_WORDS = frozenset("total number count num max estimated".split())
_ORDINAL_WORDS = frozenset("number index position current".split())
_TOTAL_WORDS = frozenset("total count".split())


def _is_ordinal_name(name: str) -> bool:
    words = set(tool_name_words(name))
    return bool(words & _ORDINAL_WORDS) and not words & _TOTAL_WORDS and len(words) > 1


def _is_total_name(name: str) -> bool:
    words = set(tool_name_words(name))
    return bool(words & _TOTAL_WORDS) and len(words) > 1


def _count_partners(properties: dict[str, JSONValue]) -> dict[str, str]:
    """Ordinal and total properties that count the same thing, each mapped to the other."""
    partners: dict[str, str] = {}
    for ordinal in filter(_is_ordinal_name, properties):
        ordinal_words = word_forms_of(tool_name_words(ordinal)) - _COUNT_WORDS - _ORDINAL_WORDS
        for total in filter(_is_total_name, properties):
            if ordinal_words & word_forms_of(tool_name_words(total)):
                partners[ordinal], partners[total] = total, ordinal
    return partners


_STRING = frozenset({"string"})
_FILLERS: dict[str, _Filler] = {
    "email": _Filler(frozenset({"email"}), _STRING, _finder(_EMAIL_RE), _constant(_EMAIL_DOMAIN_PLACEHOLDER)),
    "date-time": _Filler(frozenset({"datetime", "timestamp"}), _STRING, _find_date_time, _now_date_time),
    "date": _Filler(frozenset(), _STRING, _find_date, _now_date),
    "time-of-day": _Filler(frozenset(), _STRING, _find_time_of_day, _midnight),
    "uri": _Filler(
        frozenset("url uri link href website homepage".split()),
        _STRING,
        _finder(_URL_RE),
        _constant("https://example.com/"),
    ),
    "uuid": _Filler(frozenset({"uuid"}), _STRING, _finder(_UUID_RE), _constant(str(uuid.UUID(int=0)))),
    "ipv4": _Filler(frozenset({"ip", "ipv4"}), _STRING, _finder(_IPV4_RE), _constant("127.0.0.1")),
    "hostname": _Filler(frozenset({"hostname", "host"}), _STRING, _finder(_HOST_RE), _constant("localhost")),
    "path": _Filler(_PATH_SLOT_WORDS, _STRING, _find_path, _current_directory),
    "place": _Filler(
        frozenset(
            "city cities location place town country region address destination where village "
            "area locality".split()
        ),
        _STRING,
        _find_place,
        _empty_of_type,
    ),
    # UTC is what a time tool means when no zone is given (mcp-server-time says so), no placeholder.
    "timezone": _Filler(frozenset("timezone tz zone".split()), _STRING, _find_zone, _utc, placeholder=False),
    "clock": _Filler(frozenset({"time"}), _STRING, _find_clock, _free_text, placeholder=False),
    "day": _Filler(frozenset("day date when weekday".split()), _STRING, _find_day_value, _today),
    "expression": _Filler(
        frozenset("expression expr formula equation calculation".split()),
        _STRING,
        _find_expression_value,
        _free_text,
        placeholder=False,
    ),
    "unit": _Filler(frozenset("unit units currency".split()), _STRING, _find_unit, _first_option),
    "query": _Filler(
        frozenset("query search q term keyword keywords pattern".split()),
        _STRING,
        _find_query,
        _free_text,
        placeholder=False,
    ),
    "name": _Filler(frozenset({"name", "names"}), _STRING, _find_name, _free_text, placeholder=False),
    "type": _Filler(frozenset({"type"}), _STRING, _nothing, _type_of),
    "ordinal": _Filler(frozenset(), frozenset({"number", "integer"}), _ordinal_value, _ordinal_value),
    "total": _Filler(frozenset(), frozenset({"number", "integer"}), _find_total, _total_fallback),
    "continues": _Filler(frozenset(), frozenset({"boolean"}), _nothing, _continues),
    "enum": _Filler(frozenset(), frozenset(), _find_enum, _first_option),
    "number": _Filler(frozenset(), frozenset({"number", "integer"}), _find_number, _least_number),
    "boolean": _Filler(frozenset(), frozenset({"boolean"}), _nothing, _empty_of_type),
    "array": _Filler(frozenset(), frozenset({"array"}), _find_array, _array_fallback),
    "object": _Filler(frozenset(), frozenset({"object"}), _find_object, _empty_of_type),
    "string": _Filler(frozenset(), _STRING, _find_quoted, _free_text, placeholder=False),
    "other": _Filler(frozenset(), frozenset(), _nothing, _empty_of_type),
}
# Kinds a string property's ``format`` decides outright.
_FORMAT_KINDS = {
    "email": "email",
    "idn-email": "email",
    "date-time": "date-time",
    "date": "date",
    "time": "time-of-day",
    "uri": "uri",
    "url": "uri",
    "iri": "uri",
    "uri-reference": "uri",
    "iri-reference": "uri",
    "uuid": "uuid",
    "ipv4": "ipv4",
    "hostname": "hostname",
    "idn-hostname": "hostname",
}
_KEYWORD_KINDS = (
    "timezone",
    "email",
    "uri",
    "path",
    "place",
    "clock",
    "day",
    "expression",
    "unit",
    "date-time",
    "query",
    "uuid",
    "ipv4",
    "hostname",
    "name",
    "type",
)
_TYPE_KINDS = ("number", "boolean", "array", "object", "string")
# Bare names that mean a unit in a converter's schema ("from": "km", "to": "mi").
_UNIT_NAMES = frozenset({"from", "to", "source", "target"})


def _slots(tool: Tool) -> list[_Slot]:
    return _slots_of(
        tool.parameters, word_forms_of([*tool_name_words(tool.name), *words_of(tool.description)])
    )


def _slots_of(schema: JSONDict, tool_words: frozenset[str]) -> list[_Slot]:
    """The slots of an object schema's properties; ``tool_words`` (the tool's name and
    description) tell a file tool's "source" and "destination" to be paths."""
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return []
    required = _required_of(schema)
    partners = _count_partners(properties)
    counted = bool(partners)
    slots: list[_Slot] = []
    for name, property_schema in properties.items():
        property_schema = property_schema if isinstance(property_schema, dict) else {}
        kind = _kind(name, property_schema, tool_words)
        if name in partners:
            kind = "ordinal" if _is_ordinal_name(name) else "total"
        elif counted and kind == "boolean" and set(tool_name_words(name)) & {"next", "more", "continue"}:
            kind = "continues"
        slots.append(_Slot(name, property_schema, name in required, kind, partners.get(name, "")))
    return slots


def _kind(name: str, schema: JSONDict, tool_words: frozenset[str]) -> str:
    """Which filler serves a property: its ``format``, then a keyword in its name, then an enum,
    then a keyword in its description, then its type."""
    types = _types(schema)
    declared = schema.get("format")
    if isinstance(declared, str) and declared in _FORMAT_KINDS and not types - _STRING:
        return _FORMAT_KINDS[declared]
    name_words = word_forms_of(tool_name_words(name))
    description = schema.get("description")
    description_words = word_forms_of(words_of(description)) if isinstance(description, str) else frozenset()
    if (
        name.lower() in _ENDPOINT_NAMES
        and tool_words & _FILE_WORDS
        and not types - _STRING
        and not _enum(schema)
    ):
        return "path"
    by_name = _keyword_kind(name_words, types)
    if by_name:
        return by_name
    if name.lower() in _UNIT_NAMES and not types - _STRING:
        return "unit"
    if _enum(schema):
        return "enum"
    by_description = _keyword_kind(description_words - _VAGUE_DESCRIPTION_WORDS, types)
    if by_description and by_description not in _NAME_ONLY_KINDS:
        return by_description
    return next(
        (kind for kind in _TYPE_KINDS if types & _FILLERS[kind].types), "string" if not types else "other"
    )


# Words too common in descriptions to say what a property holds ("the name of the entity").
_VAGUE_DESCRIPTION_WORDS = frozenset("name names type file files path".split())
# Kinds read from a property's name only.
_NAME_ONLY_KINDS = frozenset({"name", "type", "query", "hostname", "uuid", "ipv4"})


def _keyword_kind(words: frozenset[str], types: frozenset[str]) -> str | None:
    for kind in _KEYWORD_KINDS:
        filler = _FILLERS[kind]
        if filler.keywords & words and (not types or types & filler.types):
            return kind
    return None


def _types(schema: JSONDict) -> frozenset[str]:
    declared = schema.get("type")
    if isinstance(declared, str):
        return frozenset({declared})
    if isinstance(declared, list):
        return frozenset(item for item in declared if isinstance(item, str) and item != "null")
    return frozenset()


def _enum(schema: JSONDict) -> list[str]:
    options = schema.get("enum")
    return [option for option in options if isinstance(option, str)] if isinstance(options, list) else []


def _within_enum(slot: _Slot, value: str) -> str | None:
    options = _enum(slot.schema)
    if not options:
        return value
    return next((option for option in options if option.lower() == value.lower()), None)


def required_names(tool: Tool) -> list[str]:
    return _required_of(tool.parameters)


def _required_of(schema: JSONDict) -> list[str]:
    required = schema.get("required")
    return [name for name in required if isinstance(name, str)] if isinstance(required, list) else []


def _value_for(slot: _Slot, fill: _Fill) -> JSONValue:
    """The slot's value: what the question gives, else (required) the schema's default, then an
    example when the filler's own fallback is a placeholder, then that fallback."""
    filler = _FILLERS[slot.kind]
    value = filler.find(slot, fill)
    if value is None and slot.kind != "enum" and _enum(slot.schema):
        value = _find_enum(slot, fill)
    if value is not None or not slot.required:
        return value
    if "default" in slot.schema and slot.schema["default"] is not None:
        return slot.schema["default"]
    if slot.kind not in ("total", "continues"):
        # The schema's own examples beat any fallback; a description's only a placeholder.
        example = _example(slot) if filler.placeholder else _declared_example(slot)
        if example is not None:
            return example
    value = filler.fallback(slot, fill)
    options = _enum(slot.schema)
    return options[0] if options and value not in options else value


_FILL_ORDER = {"ordinal": 0, "total": 2, "continues": 3, "number": 4}


def _fill_arguments(slots: Sequence[_Slot], fill: _Fill) -> JSONDict:
    arguments: JSONDict = {}
    # An ordinal before its total (no less than it), a total before the loose numbers (which do
    # not take the number it counted), numbers last in their own order.
    ordered = sorted(slots, key=lambda slot: _FILL_ORDER.get(slot.kind, 1))
    for slot in ordered:
        value = _value_for(slot, fill)
        if value is None:
            continue
        arguments[slot.name] = value
        fill.given[slot.name] = value
    return {slot.name: arguments[slot.name] for slot in slots if slot.name in arguments}


def candidate_argument_sets(tool: Tool, facts: Facts, keyword: str | None) -> list[JSONDict]:
    """Arguments for one call, or one call per place when the question names several places
    ("in Beijing and Shanghai") and the tool takes a place."""
    slots = _slots(tool)
    arguments = _fill_arguments(slots, _Fill(facts, keyword))
    if len(facts.places) < 2:
        return [arguments]
    place_slots = [
        slot.name for slot in slots if slot.kind == "place" and arguments.get(slot.name) == facts.places[0]
    ]
    # A lone time zone of the first place ("time in New York and Paris"): one call per place too.
    zone_slots = [
        slot.name
        for slot in slots
        if slot.kind == "timezone" and arguments.get(slot.name) == zone_of(facts.places[0])
    ]
    if len(zone_slots) != 1:
        zone_slots = []
    if not place_slots and not zone_slots:
        return [arguments]
    sets = [arguments]
    for place in facts.places[1:]:
        zone = zone_of(place)
        sets.append(
            {
                **arguments,
                **{name: place for name in place_slots},
                **{name: zone for name in zone_slots if zone is not None},
            }
        )
    return sets


# --- Repairing after a validation error -------------------------------------------------------


def _named(name: str, value: JSONValue, error: str) -> bool:
    """Whether the error names the property, or quotes the value it was sent."""
    if re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", error):
        return True
    return (
        isinstance(value, str)
        and bool(value)
        and re.search(rf"(?<!\w){re.escape(value)}(?!\w)", error) is not None
    )


def _named_as_missing(name: str, error: str) -> bool:
    """Whether the error names the property only as missing ("'day' is a required property"):
    a value that was sent is then no reason to change it."""
    quoted = rf"['\"“]?{re.escape(name)}['\"”]?"
    missing = rf"{quoted} is a required property|missing (?:required )?(?:argument|field|property|parameter)s?:?\s*{quoted}"
    mentions = len(re.findall(rf"(?<![\w.]){re.escape(name)}(?!\w)", error))
    return mentions > 0 and len(re.findall(missing, error, re.IGNORECASE)) >= mentions


def _repaired_value(slot: _Slot, value: JSONValue, fill: _Fill) -> JSONValue:
    """A value the schema accepts in place of ``value``, which the error named: never ``value``
    itself when another is known (repeating a rejected value repeats the error)."""
    types = _types(slot.schema)
    options = _enum(slot.schema)
    if options:
        if value not in options:
            return _within_enum(slot, str(value)) or options[0]
        others = [option for option in options if option != value]
        return others[0] if others else value
    if slot.kind == "timezone" and isinstance(value, str):
        zone = zone_of(value.rpartition("/")[2].replace("_", " ")) if "/" in value else zone_of(value)
        return zone if zone and zone != value else ("UTC" if value != "UTC" else value)
    if types & {"number", "integer"}:
        number = value
        if isinstance(number, str):
            try:
                number = float(number)
            except ValueError:
                number = 0
        if isinstance(number, int | float) and not isinstance(number, bool):
            if "integer" in types and not isinstance(number, int):
                number = round(number)
            return _bounded(slot, number)
    if "string" in types and not isinstance(value, str) and value is not None:
        return str(value)
    return _another_value(slot, value, fill)


def _another_value(slot: _Slot, value: JSONValue, fill: _Fill) -> JSONValue:
    """The schema's default, an example, or the filler's fallback: the first that is not
    ``value``; ``value`` when there is none."""
    filler = _FILLERS[slot.kind]
    candidates: list[JSONValue] = []
    if "default" in slot.schema:
        candidates.append(slot.schema["default"])
    candidates.extend(example for example in described_examples(slot.schema) if _fits(slot.schema, example))
    candidates.append(filler.fallback(slot, fill))
    return next(
        (candidate for candidate in candidates if candidate is not None and candidate != value), value
    )


def repaired_arguments(
    tool: Tool, arguments: JSONDict, error: str, facts: Facts | None = None
) -> JSONDict | None:
    """``arguments`` with each field the error names replaced by a value its schema accepts
    (a city made an IANA zone, a number moved inside its bounds, another enum option, a
    required field filled from the question's ``facts``, a rejected value swapped for the
    schema's default or an example); None when the error names no field that can be changed."""
    fill = _Fill(facts or read_facts(""), None)
    repaired = dict(arguments)
    for slot in _slots(tool):
        if slot.name not in arguments:
            if _named(slot.name, None, error):
                # Left out, the server used its default: named in the error, that was refused.
                default = slot.schema.get("default")
                repaired[slot.name] = (
                    _repaired_value(slot, default, fill)
                    if default is not None and not slot.required
                    else _value_for(replace(slot, required=True), fill)
                )
            continue
        value = arguments[slot.name]
        if _named(slot.name, value, error) and not _named_as_missing(slot.name, error):
            repaired[slot.name] = _repaired_value(slot, value, fill)
    return repaired if repaired != arguments else None
