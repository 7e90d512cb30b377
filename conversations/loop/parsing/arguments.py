"""Arguments: JSON loaded strictly or repaired, and values read against the tool's JSON Schema.

Loading (:func:`load_json`) tries strict JSON, then json_repair. Coercion
(:func:`coerce_arguments`) reads each raw value as the type its schema allows — following local
``$ref``, unions and enums — and says what it read as what.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import json_repair

from conversations.loop.parsing.text import clip, unfence_whole
from conversations.typealias import JSONDict, JSONValue


@dataclass(frozen=True)
class Loaded:
    value: JSONValue
    repaired: bool


def _reject_constant(name: str) -> None:
    # NaN and Infinity are not JSON; json.loads accepts them by default.
    raise ValueError(f"{name} is not JSON")


def _json_value(obj: object) -> JSONValue:
    """A decoder's output narrowed to ``JSONValue``.

    Raises:
        TypeError: for anything JSON cannot carry (non-finite floats, tuples, …).
    """
    if obj is None or isinstance(obj, str | bool | int):
        return obj
    if isinstance(obj, float):
        if not math.isfinite(obj):
            raise TypeError("non-finite number")
        return obj
    if isinstance(obj, list):
        return [_json_value(item) for item in obj]
    if isinstance(obj, dict):
        return {str(key): _json_value(item) for key, item in obj.items()}
    raise TypeError(type(obj).__name__)


def load_strict(text: str) -> JSONValue | None:
    """``text`` as strict JSON, or ``None`` (also for the literal ``null``: callers want containers)."""
    try:
        return _json_value(json.loads(text, parse_constant=_reject_constant))
    except (ValueError, TypeError, RecursionError):
        return None


def load_json(text: str) -> Loaded | None:
    """``text`` as JSON, repairing it with json_repair when strict parsing fails."""
    strict = load_strict(text)
    return Loaded(strict, repaired=False) if strict is not None else repair(text)


def repair(text: str) -> Loaded | None:
    """``text`` repaired into JSON by json_repair, or ``None`` if nothing usable comes out."""
    try:
        repaired = json_repair.repair_json(text, return_objects=True, skip_json_loads=True)
    except Exception:  # noqa: BLE001 — a third-party parser on model output: any failure means "unrepairable"
        return None
    try:
        return Loaded(_json_value(repaired), repaired=True)
    except (TypeError, RecursionError):
        return None


# ---------------------------------------------------------------------------------------------
# Schema reading and argument coercion
# ---------------------------------------------------------------------------------------------

_MAX_SCHEMA_DEPTH = 8
_INTEGER = re.compile(r"[+-]?[0-9]+")
_LOOSE_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_TRUE_WORDS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}


def _resolve(node: JSONValue, root: JSONDict, depth: int = 0) -> JSONValue:
    """``node`` with a local ``$ref`` (``#/$defs/X``) followed; anything else unchanged."""
    if depth > _MAX_SCHEMA_DEPTH or not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if not isinstance(ref, str) or not ref.startswith("#"):
        return node
    target: JSONValue = root
    for part in ref[1:].split("/"):
        if not part:
            continue
        key = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(target, dict) or key not in target:
            return node
        target = target[key]
    return _resolve(target, root, depth + 1)


def json_type(value: JSONValue) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _branches(node: JSONDict) -> list[JSONValue]:
    found: list[JSONValue] = []
    for key in ("anyOf", "oneOf", "allOf"):
        branches = node.get(key)
        if isinstance(branches, list):
            found.extend(branches)
    return found


def types_of(node: JSONValue, root: JSONDict, depth: int = 0) -> frozenset[str] | None:
    """The JSON types a property schema allows; ``None`` when it does not constrain them."""
    node = _resolve(node, root)
    if depth > _MAX_SCHEMA_DEPTH or not isinstance(node, dict):
        return None
    declared = node.get("type")
    if isinstance(declared, str):
        return frozenset({declared})
    if isinstance(declared, list):
        named = frozenset(item for item in declared if isinstance(item, str))
        return named or None
    branches = _branches(node)
    if branches:
        union: set[str] = set()
        for branch in branches:
            types = types_of(branch, root, depth + 1)
            if types is None:
                return None
            union |= types
        return frozenset(union)
    return _implied_types(node)


def _implied_types(node: JSONDict) -> frozenset[str] | None:
    """Types implied by keywords when ``type`` is absent."""
    values = node.get("enum")
    if isinstance(values, list) and values:
        return frozenset(json_type(item) for item in values)
    if "const" in node:
        return frozenset({json_type(node["const"])})
    if "properties" in node:
        return frozenset({"object"})
    if "items" in node:
        return frozenset({"array"})
    return None


def _enum_of(node: JSONValue, root: JSONDict, depth: int = 0) -> list[JSONValue] | None:
    """The allowed values, if the schema lists them (null branches aside); else ``None``."""
    node = _resolve(node, root)
    if depth > _MAX_SCHEMA_DEPTH or not isinstance(node, dict):
        return None
    values = node.get("enum")
    if isinstance(values, list):
        return list(values)
    if "const" in node:
        return [node["const"]]
    branches = _branches(node)
    if not branches:
        return None
    allowed: list[JSONValue] = []
    for branch in branches:
        if types_of(branch, root, depth + 1) == frozenset({"null"}):
            allowed.append(None)
            continue
        listed = _enum_of(branch, root, depth + 1)
        if listed is None:
            return None
        allowed.extend(listed)
    return allowed


def property_schema(schema: JSONDict, name: str) -> tuple[JSONValue, bool]:
    """The schema for one parameter, and whether the tool's schema knows the parameter."""
    properties = schema.get("properties")
    if isinstance(properties, dict) and name in properties:
        return properties[name], True
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        return extra, True
    return None, False


@dataclass(frozen=True)
class _Read:
    """A value read from text; ``note`` says what was loose about the text, if anything."""

    value: JSONValue
    note: str | None = None


def _read_integer(text: str) -> _Read | None:
    if _INTEGER.fullmatch(text):
        try:
            number = int(text)
        except ValueError:  # more digits than Python will convert
            return None
        return _Read(number, None if str(number) == text else f"read {text!r} as {number}")
    if _LOOSE_NUMBER.fullmatch(text):
        real = float(text)
        if math.isfinite(real) and real.is_integer():
            return _Read(int(real), f"read {text!r} as integer {int(real)}")
    return None


def _read_number(text: str) -> _Read | None:
    if not _LOOSE_NUMBER.fullmatch(text):
        return None
    whole = _read_integer(text) if _INTEGER.fullmatch(text) else None
    if whole is not None:
        return whole
    real = float(text)
    if not math.isfinite(real):
        return None
    note = None if _JSON_NUMBER.fullmatch(text) else f"read {text!r} as {real!r}"
    return _Read(real, note)


def _read_boolean(text: str) -> _Read | None:
    lowered = text.lower()
    if lowered not in _TRUE_WORDS:
        return None
    value = _TRUE_WORDS[lowered]
    canonical = "true" if value else "false"
    return _Read(value, None if text == canonical else f"read {text!r} as {canonical}")


def _read_structured(text: str, kind: type[list[JSONValue]] | type[dict[str, JSONValue]]) -> _Read | None:
    text = unfence_whole(text)[0].strip()
    # Only text that opens like the container is worth repairing: json_repair would
    # otherwise dig a bracket out of prose.
    if not text.startswith("[" if kind is list else "{"):
        return None
    loaded = load_json(text)
    if loaded is None or not isinstance(loaded.value, kind):
        return None
    noun = "array" if kind is list else "object"
    return _Read(loaded.value, f"repaired the JSON {noun}" if loaded.repaired else None)


def _read_array(text: str) -> _Read | None:
    return _read_structured(text, list)


def _read_object(text: str) -> _Read | None:
    return _read_structured(text, dict)


# Tried in this order; strings are handled before, so "007" stays "007" for a string schema.
_READERS: tuple[tuple[str, Callable[[str], _Read | None]], ...] = (
    ("integer", _read_integer),
    ("number", _read_number),
    ("boolean", _read_boolean),
    ("array", _read_array),
    ("object", _read_object),
)


def _unquote(text: str) -> tuple[str, str | None]:
    """``text`` without JSON string quotes a model put around a non-string value."""
    if len(text) >= 2 and text[0] == text[-1] == '"':
        inner = load_strict(text)
        if isinstance(inner, str):
            return inner.strip(), f"removed the quotes around {clip(text)!r}"
    return text, None


def _coerce_to_types(raw: str, types: frozenset[str]) -> tuple[JSONValue, list[str]]:
    """``raw`` as the first allowed type it reads cleanly as; notes are unprefixed."""
    text = raw.strip()
    if "null" in types and text.lower() in ("null", "none"):
        return None, [] if text == "null" else [f"read {text!r} as null"]
    if "string" in types:
        # A union such as string|array: JSON that is exactly an allowed container wins.
        if types & {"array", "object"} and text[:1] in ("[", "{"):
            value = load_strict(text)
            if value is not None and json_type(value) in types:
                return value, []
        return raw, []
    if not text and "null" in types:
        return None, ["read the empty value as null"]
    text, unquoted = _unquote(text)
    notes = [unquoted] if unquoted else []
    for kind, reader in _READERS:
        if kind in types and (read := reader(text)) is not None:
            return read.value, notes + ([read.note] if read.note else [])
    expected = " or ".join(sorted(types))
    return raw, [f"expected {expected}, got {clip(raw)!r}; kept as text"]


def _check_enum(value: JSONValue, allowed: list[JSONValue]) -> tuple[JSONValue, list[str]]:
    # bool is an int in Python, but true is not 1 in JSON.
    if any(value == option and isinstance(value, bool) == isinstance(option, bool) for option in allowed):
        return value, []
    if isinstance(value, str):
        for option in allowed:
            if isinstance(option, str) and option.lower() == value.strip().lower():
                return option, [f"matched {clip(value)!r} to the allowed value {option!r}"]
    shown = ", ".join(clip(json.dumps(option), 20) for option in allowed[:10])
    return value, [f"{clip(json.dumps(value))} is not one of the allowed values ({shown})"]


def _coerce_one(raw: str, node: JSONValue, root: JSONDict) -> tuple[JSONValue, list[str]]:
    types = types_of(node, root)
    if types is None:
        return raw, []
    value, notes = _coerce_to_types(raw, types)
    allowed = _enum_of(node, root)
    if allowed is not None:
        value, more = _check_enum(value, allowed)
        notes += more
    return value, notes


def _subject(tool: str | None, param: str) -> str:
    return f"{tool}.{param}" if tool else param


def coerce_arguments(
    values: Mapping[str, str], schema: JSONDict, *, tool: str | None = None
) -> tuple[JSONDict, list[str]]:
    """Text values typed by the tool's JSON Schema, and notes on every liberty taken.

    Each value is read as the type its property allows (``type`` lists, ``anyOf``/``oneOf``,
    local ``$ref``s, ``enum``): numbers, booleans (true/false/yes/no/1/0), null, and JSON
    arrays/objects (repaired if needed). A string-typed value is kept verbatim ("007" stays
    "007"); a value that fits no allowed type is kept as text; a parameter the schema does
    not know is kept as text. Diagnostics are prefixed ``<tool>.<param>:`` (or ``<param>:``
    without ``tool``). Never raises.
    """
    root: JSONDict = schema if isinstance(schema, dict) else {}
    coerced: JSONDict = {}
    diagnostics: list[str] = []
    for name, raw in values.items():
        subject = _subject(tool, name)
        if not isinstance(raw, str):
            coerced[name] = _json_value_or_text(raw)
            continue
        node, known = property_schema(root, name)
        if not known:
            coerced[name] = raw
            diagnostics.append(f"{subject}: not in the schema; kept as text")
            continue
        coerced[name], notes = _coerce_one(raw, node, root)
        diagnostics.extend(f"{subject}: {note}" for note in notes)
    return coerced, diagnostics


def _json_value_or_text(value: object) -> JSONValue:
    try:
        return _json_value(value)
    except (TypeError, RecursionError):
        return str(value)


def coerce_json_arguments(arguments: JSONDict, schema: JSONDict, tool: str) -> tuple[JSONDict, list[str]]:
    """JSON arguments with clean string numbers/booleans typed where the schema wants them.

    Only obvious mismatches are fixed: a string value whose schema allows no string, only
    number/integer/boolean, and whose text is exactly such a literal.
    """
    fixed: JSONDict = dict(arguments)
    diagnostics: list[str] = []
    for name, value in arguments.items():
        node, known = property_schema(schema, name)
        if not known:
            diagnostics.append(f"{tool}.{name}: not in the schema")
            continue
        types = types_of(node, schema)
        if (
            not isinstance(value, str)
            or types is None
            or not types <= {"integer", "number", "boolean", "null"}
        ):
            continue
        clean = _clean_literal(value.strip(), types)
        if clean is not None:
            fixed[name] = clean.value
            diagnostics.append(
                f"{tool}.{name}: read the string {clip(value)!r} as {json_type(clean.value)} {json.dumps(clean.value)}"
            )
    return fixed, diagnostics


def _clean_literal(text: str, types: frozenset[str]) -> _Read | None:
    if "integer" in types and re.fullmatch(r"-?[0-9]+", text):
        read = _read_integer(text)
        if read is not None:
            return read
    if "number" in types and _JSON_NUMBER.fullmatch(text):
        return _read_number(text)
    if "boolean" in types and text.lower() in ("true", "false"):
        return _Read(text.lower() == "true")
    return None
