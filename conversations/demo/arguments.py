"""Argument filling: a tool's arguments from the question's facts, guided by its JSON Schema.

Each property becomes a slot of one kind (place, day, expression, unit, enum, number, boolean,
string…), chosen from its name and schema; :data:`_FILLERS` holds the filler of each kind. Only
required properties are filled unless a fact fits an optional one.

Pure Python: no Django, no I/O, no randomness.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

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


@dataclass
class _Fill:
    """State of filling one call: values such as numbers are used up in property order."""

    facts: Facts
    keyword: str | None
    numbers: Iterator[int | float] = field(init=False)
    quoted: Iterator[str] = field(init=False)
    units_seen: int = 0

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
    number = next(fill.numbers, None)
    if number is None:
        return None
    if isinstance(number, float) and number.is_integer() and "integer" in _types(slot.schema):
        number = int(number)
    return _bounded(slot, number)


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


_STRING = frozenset({"string"})
_FILLERS: dict[str, _Filler] = {
    "place": _Filler(
        frozenset(
            "city cities location place town country region address destination where village "
            "area locality".split()
        ),
        _STRING,
        _find_place,
        _empty_of_type,
    ),
    "timezone": _Filler(frozenset("timezone tz zone".split()), _STRING, _find_zone, _utc),
    "clock": _Filler(frozenset({"time"}), _STRING, _find_clock, _free_text),
    "day": _Filler(frozenset("day date when weekday".split()), _STRING, _find_day_value, _today),
    "expression": _Filler(
        frozenset("expression expr formula equation calculation".split()),
        _STRING,
        _find_expression_value,
        _free_text,
    ),
    "unit": _Filler(frozenset("unit units currency".split()), _STRING, _find_unit, _first_option),
    "enum": _Filler(frozenset(), frozenset(), _find_enum, _first_option),
    "number": _Filler(frozenset(), frozenset({"number", "integer"}), _find_number, _least_number),
    "boolean": _Filler(frozenset(), frozenset({"boolean"}), _nothing, _empty_of_type),
    "string": _Filler(frozenset(), _STRING, _find_quoted, _free_text),
    "other": _Filler(frozenset(), frozenset(), _nothing, _empty_of_type),
}
_KEYWORD_KINDS = ("timezone", "place", "clock", "day", "expression", "unit")
_TYPE_KINDS = ("number", "boolean", "string")
# Bare names that mean a unit in a converter's schema ("from": "km", "to": "mi").
_UNIT_NAMES = frozenset({"from", "to", "source", "target"})


def _slots(tool: Tool) -> list[_Slot]:
    properties = tool.parameters.get("properties")
    if not isinstance(properties, dict):
        return []
    required = required_names(tool)
    slots: list[_Slot] = []
    for name, schema in properties.items():
        schema = schema if isinstance(schema, dict) else {}
        slots.append(_Slot(name, schema, name in required, _kind(name, schema)))
    return slots


def _kind(name: str, schema: JSONDict) -> str:
    """Which filler serves a property: a keyword in its name wins, then an enum, then a keyword
    in its description, then its type."""
    types = _types(schema)
    name_words = word_forms_of(tool_name_words(name))
    description = schema.get("description")
    description_words = word_forms_of(words_of(description)) if isinstance(description, str) else frozenset()
    by_name = _keyword_kind(name_words, types)
    if by_name:
        return by_name
    if name.lower() in _UNIT_NAMES and not types - _STRING:
        return "unit"
    if _enum(schema):
        return "enum"
    by_description = _keyword_kind(description_words, types)
    if by_description:
        return by_description
    return next(
        (kind for kind in _TYPE_KINDS if types & _FILLERS[kind].types), "string" if not types else "other"
    )


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
    required = tool.parameters.get("required")
    return [name for name in required if isinstance(name, str)] if isinstance(required, list) else []


def _fill_arguments(slots: Sequence[_Slot], fill: _Fill) -> JSONDict:
    arguments: JSONDict = {}
    for slot in slots:
        filler = _FILLERS[slot.kind]
        value = filler.find(slot, fill)
        if value is None:
            if not slot.required:
                continue
            value = slot.schema["default"] if "default" in slot.schema else filler.fallback(slot, fill)
        arguments[slot.name] = value
    return arguments


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


def _repaired_value(slot: _Slot, value: JSONValue) -> JSONValue:
    """A value the schema accepts in place of ``value``, or ``value`` when nothing better is known."""
    types = _types(slot.schema)
    options = _enum(slot.schema)
    if options and value not in options:
        return _within_enum(slot, str(value)) or options[0]
    if slot.kind == "timezone" and isinstance(value, str) and not _ZONE_NAME_RE.fullmatch(value):
        return zone_of(value) or "UTC"
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
    return value


def repaired_arguments(tool: Tool, arguments: JSONDict, error: str) -> JSONDict | None:
    """``arguments`` with each field the error names replaced by a value its schema accepts
    (a city made an IANA zone, a number moved inside its bounds, an enum's option, a required
    field filled); None when the error names no field that can be changed."""
    repaired = dict(arguments)
    for slot in _slots(tool):
        if slot.name not in arguments:
            if slot.required and _named(slot.name, None, error):
                filler = _FILLERS[slot.kind]
                repaired[slot.name] = (
                    slot.schema["default"]
                    if "default" in slot.schema
                    else filler.fallback(slot, _Fill(read_facts(""), None))
                )
            continue
        value = arguments[slot.name]
        if _named(slot.name, value, error):
            repaired[slot.name] = _repaired_value(slot, value)
    return repaired if repaired != arguments else None
