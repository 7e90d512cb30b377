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
    if isinstance(number, float) and number.is_integer() and "integer" in _types(slot.schema):
        return int(number)
    return number


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
            "timezone area locality".split()
        ),
        _STRING,
        _find_place,
        _empty_of_type,
    ),
    "day": _Filler(frozenset("day date when weekday".split()), _STRING, _find_day_value, _today),
    "expression": _Filler(
        frozenset("expression expr formula equation calculation".split()),
        _STRING,
        _find_expression_value,
        _free_text,
    ),
    "unit": _Filler(frozenset("unit units currency".split()), _STRING, _find_unit, _first_option),
    "enum": _Filler(frozenset(), frozenset(), _find_enum, _first_option),
    "number": _Filler(frozenset(), frozenset({"number", "integer"}), _find_number, _empty_of_type),
    "boolean": _Filler(frozenset(), frozenset({"boolean"}), _nothing, _empty_of_type),
    "string": _Filler(frozenset(), _STRING, _find_quoted, _free_text),
    "other": _Filler(frozenset(), frozenset(), _nothing, _empty_of_type),
}
_KEYWORD_KINDS = ("place", "day", "expression", "unit")
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
    if not place_slots:
        return [arguments]
    return [arguments] + [
        {**arguments, **{name: place for name in place_slots}} for place in facts.places[1:]
    ]
