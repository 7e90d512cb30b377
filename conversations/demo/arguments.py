"""Argument filling: a tool's arguments from the question's facts, guided by its JSON Schema.

Each property becomes a slot of one kind (a format such as email, date, date-time or uri; a
path, place, time zone, day, expression, unit, query, name; an enum, number, boolean, string,
array or object), chosen from its schema's ``format``, its name, its ``enum``, its description
and its type; :data:`_FILLERS` holds the filler of each kind (those of the scalar kinds, and the
slot and fill types, are :mod:`conversations.demo.finders`). A value the question gives wins;
else a required property gets the schema's ``default``, then (for kinds whose own fallback is
only a placeholder) its ``examples`` or an example its description gives ("e.g. 'UTC'"), then
the filler's fallback. Numbers stay inside ``minimum``/``maximum``; arrays and objects are
filled from their ``items`` and ``properties``. Only required properties are filled unless a
fact fits an optional one.

Pure Python: no Django, no I/O, no randomness (dates relative to "today" read the clock).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import replace

from conversations.demo.finders import (
    ENDPOINT_NAMES,
    FILE_WORDS,
    SCALAR_FILLERS,
    STRING,
    Fill,
    Filler,
    Slot,
    bounded,
    count_partners,
    declared_example,
    described_examples,
    empty_of_type,
    enum_options,
    example_for,
    find_enum,
    fits,
    is_ordinal_name,
    paths_in,
    proper_names,
    types_of,
    within_enum,
    zone_of,
)
from conversations.demo.request import Tool
from conversations.demo.understanding import (
    Facts,
    read_facts,
    tool_name_words,
    word_forms_of,
    words_of,
)
from conversations.typealias import JSONDict, JSONValue

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


# --- Arrays and objects ----------------------------------------------------------------------


def _items_slot(slot: Slot) -> Slot:
    """The slot an array's items would be, named after the array ("paths" → a path)."""
    items = slot.schema.get("items")
    schema = dict(items) if isinstance(items, dict) else {}
    if "description" not in schema and isinstance(slot.schema.get("description"), str):
        schema["description"] = slot.schema["description"]
    name = re.sub(r"(?i)(?<=[a-z])s$", "", slot.name)
    return Slot(name, schema, True, _kind(name, schema, frozenset()))


def _find_array(slot: Slot, fill: Fill) -> JSONValue:
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


def _array_fallback(slot: Slot, fill: Fill) -> JSONValue:
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


def _sized(slot: Slot, values: list[JSONValue]) -> list[JSONValue]:
    maximum = slot.schema.get("maxItems")
    return values[:maximum] if isinstance(maximum, int) and maximum >= 1 else values


def _find_object(slot: Slot, fill: Fill) -> JSONValue:
    if not isinstance(slot.schema.get("properties"), dict):
        return None
    return _filled_object(slot, fill)


def _filled_object(slot: Slot, fill: Fill) -> JSONDict:
    inner = Fill(fill.facts, fill.keyword)
    return _fill_arguments(_slots_of(slot.schema, frozenset()), inner)


# The filler of each kind: the scalar kinds' and those of arrays and objects, which fill their
# items and properties as a call's.
_FILLERS: dict[str, Filler] = {
    **SCALAR_FILLERS,
    "array": Filler(frozenset(), frozenset({"array"}), _find_array, _array_fallback),
    "object": Filler(frozenset(), frozenset({"object"}), _find_object, empty_of_type),
}


def _slots(tool: Tool) -> list[Slot]:
    return _slots_of(
        tool.parameters, word_forms_of([*tool_name_words(tool.name), *words_of(tool.description)])
    )


def _slots_of(schema: JSONDict, tool_words: frozenset[str]) -> list[Slot]:
    """The slots of an object schema's properties; ``tool_words`` (the tool's name and
    description) tell a file tool's "source" and "destination" to be paths."""
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return []
    required = _required_of(schema)
    partners = count_partners(properties)
    counted = bool(partners)
    slots: list[Slot] = []
    for name, property_schema in properties.items():
        property_schema = property_schema if isinstance(property_schema, dict) else {}
        kind = _kind(name, property_schema, tool_words)
        if name in partners:
            kind = "ordinal" if is_ordinal_name(name) else "total"
        elif counted and kind == "boolean" and set(tool_name_words(name)) & {"next", "more", "continue"}:
            kind = "continues"
        slots.append(Slot(name, property_schema, name in required, kind, partners.get(name, "")))
    return slots


def _kind(name: str, schema: JSONDict, tool_words: frozenset[str]) -> str:
    """Which filler serves a property: its ``format``, then a keyword in its name, then an enum,
    then a keyword in its description, then its type."""
    types = types_of(schema)
    declared = schema.get("format")
    if isinstance(declared, str) and declared in _FORMAT_KINDS and not types - STRING:
        return _FORMAT_KINDS[declared]
    name_words = word_forms_of(tool_name_words(name))
    description = schema.get("description")
    description_words = word_forms_of(words_of(description)) if isinstance(description, str) else frozenset()
    if (
        name.lower() in ENDPOINT_NAMES
        and tool_words & FILE_WORDS
        and not types - STRING
        and not enum_options(schema)
    ):
        return "path"
    by_name = _keyword_kind(name_words, types)
    if by_name:
        return by_name
    if name.lower() in _UNIT_NAMES and not types - STRING:
        return "unit"
    if enum_options(schema):
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


def required_names(tool: Tool) -> list[str]:
    return _required_of(tool.parameters)


def _required_of(schema: JSONDict) -> list[str]:
    required = schema.get("required")
    return [name for name in required if isinstance(name, str)] if isinstance(required, list) else []


def _value_for(slot: Slot, fill: Fill) -> JSONValue:
    """The slot's value: what the question gives, else (required) the schema's default, then an
    example when the filler's own fallback is a placeholder, then that fallback."""
    filler = _FILLERS[slot.kind]
    value = filler.find(slot, fill)
    if value is None and slot.kind != "enum" and enum_options(slot.schema):
        value = find_enum(slot, fill)
    if value is not None or not slot.required:
        return value
    if "default" in slot.schema and slot.schema["default"] is not None:
        return slot.schema["default"]
    if slot.kind not in ("total", "continues"):
        # The schema's own examples beat any fallback; a description's only a placeholder.
        example = example_for(slot) if filler.placeholder else declared_example(slot)
        if example is not None:
            return example
    value = filler.fallback(slot, fill)
    options = enum_options(slot.schema)
    return options[0] if options and value not in options else value


_FILL_ORDER = {"ordinal": 0, "total": 2, "continues": 3, "number": 4}


def _fill_arguments(slots: Sequence[Slot], fill: Fill) -> JSONDict:
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
    arguments = _fill_arguments(slots, Fill(facts, keyword))
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


def _repaired_value(slot: Slot, value: JSONValue, fill: Fill) -> JSONValue:
    """A value the schema accepts in place of ``value``, which the error named: never ``value``
    itself when another is known (repeating a rejected value repeats the error)."""
    types = types_of(slot.schema)
    options = enum_options(slot.schema)
    if options:
        if value not in options:
            return within_enum(slot, str(value)) or options[0]
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
            return bounded(slot, number)
    if "string" in types and not isinstance(value, str) and value is not None:
        return str(value)
    return _another_value(slot, value, fill)


def _another_value(slot: Slot, value: JSONValue, fill: Fill) -> JSONValue:
    """The schema's default, an example, or the filler's fallback: the first that is not
    ``value``; ``value`` when there is none."""
    filler = _FILLERS[slot.kind]
    candidates: list[JSONValue] = []
    if "default" in slot.schema:
        candidates.append(slot.schema["default"])
    candidates.extend(example for example in described_examples(slot.schema) if fits(slot.schema, example))
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
    fill = Fill(facts or read_facts(""), None)
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
