"""Tolerant readers for tool calls that a model wrote as plain text.

When tools are taught in the prompt instead of through a native tool API, the reply is text
that should hold calls in the taught convention. Models get it nearly right: code fences,
truncation, invented results, Python-flavoured JSON, calls in their reasoning, closing tags
inside file contents. These readers accept what a careful human reader would, and report each
liberty taken as a diagnostic that the page shows beside the raw text. None of them raises,
whatever the input.

Diagnostic wording: one lowercase clause without a final period, prefixed by its subject —
``"<tool>: …"`` about a call, ``"<tool>.<param>: …"`` about one argument, no prefix about the
reply as a whole. Fixed key phrases make them searchable: "empty reply", "code fence",
"truncated", "invented result", "<think>", "repaired", "not among the offered tools",
"not in the schema", "read … as …" (a value coerced), "ambiguous".
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import json_repair

from conversations.typealias import JSONDict, JSONValue

__all__ = [
    "ParseResult",
    "ParsedCall",
    "coerce_arguments",
    "parse_json_reply",
    "parse_label",
    "parse_xml_calls",
]


@dataclass
class ParsedCall:
    """One call read from a reply.

    ``arguments`` is ``None`` when the arguments could not be made into an object.
    ``arguments_text`` is where they came from: the raw ``<invoke>`` body for XML, the JSON
    string (or the object re-serialised as read, before schema coercion) for JSON.
    """

    name: str
    arguments: JSONDict | None
    arguments_text: str


@dataclass
class ParseResult:
    """The calls in a reply, its prose outside them (stripped), and what the reader tolerated."""

    calls: list[ParsedCall]
    text: str
    diagnostics: list[str]


# ---------------------------------------------------------------------------------------------
# Shared text handling
# ---------------------------------------------------------------------------------------------

_CLIP = 60
# Some models write namespaced tags (`<ns:invoke>`); accept any prefix.
_NS = r"(?:[A-Za-z_][\w.-]*:)?"
_THINK_BLOCK = re.compile(r"<(think|thinking|reasoning)\b[^<>]*>(.*?)(?:</\1\s*>|\Z)", re.I | re.S)
_THINK_CLOSE = re.compile(r"</(?:think|thinking|reasoning)\s*>", re.I)
_INVENTED_RESULT = re.compile(
    rf"<{_NS}(?:function_results?|function_outputs?|tool_results?|tool_use_results?"
    rf"|tool_responses?|tool_outputs?)\b",
    re.I,
)
# The JSON convention splices results back as "Tool execution result: …" (simple-chatbot).
_INVENTED_RESULT_LINE = re.compile(r"^[ \t]*tool (?:execution )?result\s*:", re.I | re.M)
_FENCE_LANGS = r"(?:xml|jsonl?|json5|javascript|js|python|text|plaintext)"
# What may sit right before a call when it was fenced or pasted from a chat UI:
# "```xml", "~~~", "xml Copy code", or a bare language tag on its own line.
_FENCE_BEFORE = re.compile(
    rf"(?:(?:```|~~~)[ \t]*[\w+.-]*|(?:\b{_FENCE_LANGS}[ \t]*)?copy[ \t]*code"
    rf"|(?:\A|(?<=\n))[ \t]*{_FENCE_LANGS})\s*\Z",
    re.I,
)
_FENCE_AFTER = re.compile(r"\A\s*(?:```|~~~)[ \t]*(?=\n|\Z)")
_WHOLE_FENCE = re.compile(
    r"\A\s*(?:```|~~~)[ \t]*[\w+.-]*[ \t]*(?:copy[ \t]*code)?[ \t]*\n(.*?)\n?[ \t]*(?:```|~~~)?\s*\Z",
    re.I | re.S,
)


def _as_text(value: object) -> str:
    """Any input as text: ``None`` is an empty reply, bytes are decoded leniently."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", errors="replace")
    return str(value)


def _clip(text: str, limit: int = _CLIP) -> str:
    """``text`` short enough for a diagnostic."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _split_thinking(text: str) -> tuple[str, list[str]]:
    """The reply without its reasoning blocks, and the blocks' contents.

    An unclosed ``<think>`` runs to the end (the reply was cut while reasoning). A lone
    ``</think>`` means the opening tag was in the prompt (R1-style templates), so everything
    before it is reasoning.
    """
    thoughts: list[str] = []

    def set_aside(match: re.Match[str]) -> str:
        thoughts.append(match.group(2))
        return ""

    visible = _THINK_BLOCK.sub(set_aside, text)
    closes = list(_THINK_CLOSE.finditer(visible))
    if closes:
        orphan = closes[-1]
        thoughts.append(visible[: orphan.start()])
        visible = visible[orphan.end() :]
    return visible, thoughts


def _thinking_diagnostic(thoughts: list[str], calls_inside: int) -> list[str]:
    if not thoughts:
        return []
    if calls_inside:
        return [
            f"ignored {_plural(calls_inside, 'call')} inside a <think> block: calls in reasoning do not count"
        ]
    return ["set aside a <think> block: reasoning is not part of the answer"]


def _strip_fence_before(prose: str) -> tuple[str, bool]:
    """``prose`` without the fence opener (or chat-UI copy artefact) that ends it."""
    stripped = False
    while match := _FENCE_BEFORE.search(prose):
        prose = prose[: match.start()]
        stripped = True
    return prose, stripped


def _strip_fence_after(prose: str) -> tuple[str, bool]:
    """``prose`` without the fence closer that starts it."""
    match = _FENCE_AFTER.match(prose)
    return (prose[match.end() :], True) if match else (prose, False)


def _prose_around(text: str, spans: Sequence[tuple[int, int]], diagnostics: list[str]) -> str:
    """The text outside ``spans``, with fences that only wrapped a call removed.

    Fences are removed only where they touch a call, so a final answer that shows code in a
    fence keeps it.
    """
    parts: list[str] = []
    fenced = False
    pos = 0
    for index, (start, end) in enumerate(spans):
        before = text[pos:start]
        if index:
            before, closed = _strip_fence_after(before)
            fenced |= closed
        before, opened = _strip_fence_before(before)
        fenced |= opened
        parts.append(before)
        pos = max(pos, end)
    after = text[pos:]
    if spans:
        after, closed = _strip_fence_after(after)
        fenced |= closed
    parts.append(after)
    if fenced:
        diagnostics.append("stripped a code fence around the call")
    return "\n\n".join(part.strip() for part in parts if part.strip())


def _unfence_whole(text: str) -> tuple[str, bool]:
    """The inside of a fence that wraps the entire reply, else the reply unchanged."""
    match = _WHOLE_FENCE.match(text)
    return (match.group(1), True) if match else (text, False)


def _offered_list(names: Iterable[str], limit: int = 10) -> str:
    shown = list(names)
    if not shown:
        return "none offered"
    more = f", … ({len(shown) - limit} more)" if len(shown) > limit else ""
    return ", ".join(shown[:limit]) + more


def _unknown_tool(name: str, schemas: Mapping[str, JSONDict]) -> str:
    hint = difflib.get_close_matches(name, list(schemas), n=1)
    did_you_mean = f"; did you mean '{hint[0]}'?" if hint else ""
    return f"{name}: not among the offered tools (offered: {_offered_list(schemas)}){did_you_mean}"


def _tool_schema(schemas: Mapping[str, JSONDict], name: str) -> JSONDict | None:
    """The offered tool's schema; ``{}`` for an offered tool whose schema is unusable."""
    if name not in schemas:
        return None
    schema = schemas[name]
    return schema if isinstance(schema, dict) else {}


# ---------------------------------------------------------------------------------------------
# JSON loading
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Loaded:
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


def _load_strict(text: str) -> JSONValue | None:
    """``text`` as strict JSON, or ``None`` (also for the literal ``null``: callers want containers)."""
    try:
        return _json_value(json.loads(text, parse_constant=_reject_constant))
    except (ValueError, TypeError, RecursionError):
        return None


def _load_json(text: str) -> _Loaded | None:
    """``text`` as JSON, repairing it with json_repair when strict parsing fails."""
    strict = _load_strict(text)
    return _Loaded(strict, repaired=False) if strict is not None else _repair(text)


def _repair(text: str) -> _Loaded | None:
    """``text`` repaired into JSON by json_repair, or ``None`` if nothing usable comes out."""
    try:
        repaired = json_repair.repair_json(text, return_objects=True, skip_json_loads=True)
    except Exception:  # noqa: BLE001 — a third-party parser on model output: any failure means "unrepairable"
        return None
    try:
        return _Loaded(_json_value(repaired), repaired=True)
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


def _json_type(value: JSONValue) -> str:
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


def _types_of(node: JSONValue, root: JSONDict, depth: int = 0) -> frozenset[str] | None:
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
            types = _types_of(branch, root, depth + 1)
            if types is None:
                return None
            union |= types
        return frozenset(union)
    return _implied_types(node)


def _implied_types(node: JSONDict) -> frozenset[str] | None:
    """Types implied by keywords when ``type`` is absent."""
    values = node.get("enum")
    if isinstance(values, list) and values:
        return frozenset(_json_type(item) for item in values)
    if "const" in node:
        return frozenset({_json_type(node["const"])})
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
        if _types_of(branch, root, depth + 1) == frozenset({"null"}):
            allowed.append(None)
            continue
        listed = _enum_of(branch, root, depth + 1)
        if listed is None:
            return None
        allowed.extend(listed)
    return allowed


def _property_schema(schema: JSONDict, name: str) -> tuple[JSONValue, bool]:
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
    text = _unfence_whole(text)[0].strip()
    # Only text that opens like the container is worth repairing: json_repair would
    # otherwise dig a bracket out of prose.
    if not text.startswith("[" if kind is list else "{"):
        return None
    loaded = _load_json(text)
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
        inner = _load_strict(text)
        if isinstance(inner, str):
            return inner.strip(), f"removed the quotes around {_clip(text)!r}"
    return text, None


def _coerce_to_types(raw: str, types: frozenset[str]) -> tuple[JSONValue, list[str]]:
    """``raw`` as the first allowed type it reads cleanly as; notes are unprefixed."""
    text = raw.strip()
    if "null" in types and text.lower() in ("null", "none"):
        return None, [] if text == "null" else [f"read {text!r} as null"]
    if "string" in types:
        # A union such as string|array: JSON that is exactly an allowed container wins.
        if types & {"array", "object"} and text[:1] in ("[", "{"):
            value = _load_strict(text)
            if value is not None and _json_type(value) in types:
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
    return raw, [f"expected {expected}, got {_clip(raw)!r}; kept as text"]


def _check_enum(value: JSONValue, allowed: list[JSONValue]) -> tuple[JSONValue, list[str]]:
    # bool is an int in Python, but true is not 1 in JSON.
    if any(value == option and isinstance(value, bool) == isinstance(option, bool) for option in allowed):
        return value, []
    if isinstance(value, str):
        for option in allowed:
            if isinstance(option, str) and option.lower() == value.strip().lower():
                return option, [f"matched {_clip(value)!r} to the allowed value {option!r}"]
    shown = ", ".join(_clip(json.dumps(option), 20) for option in allowed[:10])
    return value, [f"{_clip(json.dumps(value))} is not one of the allowed values ({shown})"]


def _coerce_one(raw: str, node: JSONValue, root: JSONDict) -> tuple[JSONValue, list[str]]:
    types = _types_of(node, root)
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
        node, known = _property_schema(root, name)
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


def _coerce_json_arguments(arguments: JSONDict, schema: JSONDict, tool: str) -> tuple[JSONDict, list[str]]:
    """JSON arguments with clean string numbers/booleans typed where the schema wants them.

    Only obvious mismatches are fixed: a string value whose schema allows no string, only
    number/integer/boolean, and whose text is exactly such a literal.
    """
    fixed: JSONDict = dict(arguments)
    diagnostics: list[str] = []
    for name, value in arguments.items():
        node, known = _property_schema(schema, name)
        if not known:
            diagnostics.append(f"{tool}.{name}: not in the schema")
            continue
        types = _types_of(node, schema)
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
                f"{tool}.{name}: read the string {_clip(value)!r} as {_json_type(clean.value)} {json.dumps(clean.value)}"
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


# ---------------------------------------------------------------------------------------------
# XML convention: <function_calls><invoke name="…"><parameter name="…">…</parameter></invoke>
# ---------------------------------------------------------------------------------------------

_BLOCK_START = re.compile(rf"<{_NS}(?:function_calls\s*>|invoke\b[^<>]*>)", re.I)
_CALLS_OPEN = re.compile(rf"<{_NS}function_calls\s*>", re.I)
_CALLS_CLOSE = re.compile(rf"</{_NS}function_calls\s*>", re.I)
_INVOKE_OPEN = re.compile(rf"<{_NS}invoke\b([^<>]*?)(/?)>", re.I)
_INVOKE_CLOSE = re.compile(rf"</{_NS}invoke\s*>", re.I)
_PARAM_OPEN = re.compile(rf"<{_NS}parameter\b([^<>]*?)(/?)>", re.I)
_PARAM_CLOSE = re.compile(rf"</{_NS}parameter\s*>", re.I)
_IN_BLOCK = re.compile(rf"{_INVOKE_OPEN.pattern}|{_CALLS_CLOSE.pattern}", re.I)
_IN_INVOKE = re.compile(
    rf"{_PARAM_OPEN.pattern}|{_INVOKE_CLOSE.pattern}|{_INVOKE_OPEN.pattern}|{_CALLS_CLOSE.pattern}", re.I
)
_VALUE_END = re.compile(
    rf"<{_NS}parameter\b[^<>]*>|{_INVOKE_CLOSE.pattern}|<{_NS}invoke\b[^<>]*>|{_CALLS_CLOSE.pattern}", re.I
)
_ATTRIBUTE = re.compile(r"""([\w:.-]+)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'=<>`]+))""")
_TRAILING_TAG = re.compile(r"<(/?)(?:[\w.-]+:)?(\w*)([^<>]*)\Z")
_TAG_NAMES = ("function_calls", "invoke", "parameter")
_WHOLE_CDATA = re.compile(r"\A\s*<!\[CDATA\[(.*)\]\]>\s*\Z", re.S)
_CDATA_OR_ENTITY = re.compile(
    r"<!\[CDATA\[(.*?)(?:\]\]>|\Z)|&(lt|gt|amp|quot|apos|#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6});", re.S
)
_ENTITIES = {"lt": "<", "gt": ">", "amp": "&", "quot": '"', "apos": "'"}
_LAYOUT_HEAD = re.compile(r"\A[ \t]*\r?\n")
_LAYOUT_TAIL = re.compile(r"\r?\n[ \t]*\Z")


def _attributes(text: str) -> dict[str, str]:
    """Tag attributes in any order, double-, single- or un-quoted, entities decoded."""
    found: dict[str, str] = {}
    for match in _ATTRIBUTE.finditer(text):
        value = next((group for group in match.groups()[1:] if group is not None), "")
        found[match.group(1).lower()] = _decode(value)[0]
    return found


def _partial_tag_start(text: str) -> int | None:
    """Where ``text`` ends in a call tag cut off mid-way (``<invo``, ``<parameter name="c``)."""
    match = _TRAILING_TAG.search(text)
    if match is None:
        return None
    slash, name, rest = match.group(1), match.group(2).lower(), match.group(3)
    if rest:
        return match.start() if name in _TAG_NAMES else None
    if name or slash:
        return match.start() if any(tag.startswith(name) for tag in _TAG_NAMES) else None
    return match.start()


def _decode(text: str) -> tuple[str, set[str]]:
    """``text`` with CDATA sections unwrapped and XML entities decoded, in one pass.

    One pass, so ``&amp;lt;`` becomes ``&lt;`` and CDATA content is never entity-decoded.
    """
    seen: set[str] = set()

    def replace(match: re.Match[str]) -> str:
        if match.group(2) is None:
            seen.add("CDATA")
            return match.group(1)
        entity = match.group(2)
        if entity in _ENTITIES:
            seen.add("entities")
            return _ENTITIES[entity]
        code = int(entity[2:], 16) if entity[1:2] in ("x", "X") else int(entity[1:])
        # NUL and lone surrogates cannot be stored or encoded: leave those references as written.
        if code == 0 or 0xD800 <= code <= 0xDFFF or code > 0x10FFFF:
            return match.group(0)
        seen.add("entities")
        return chr(code)

    return _CDATA_OR_ENTITY.sub(replace, text), seen


def _trim_layout(raw: str) -> str:
    """A text value without the line breaks that only lay out the tags around it.

    A one-line value is stripped; a multi-line value loses one leading and one trailing
    line break so its indentation and inner blank lines survive.
    """
    if "\n" not in raw.strip():
        return raw.strip()
    return _LAYOUT_TAIL.sub("", _LAYOUT_HEAD.sub("", raw, count=1), count=1)


def _is_free_text(schema: JSONDict | None, param: str) -> bool:
    """Whether a parameter holds free text, where a stray ``</parameter>`` may be content."""
    if schema is None:
        return True
    node, known = _property_schema(schema, param)
    types = _types_of(node, schema) if known else None
    return types is None or "string" in types


@dataclass
class _XmlReader:
    """One pass over a reply in the XML convention, collecting calls, spans and diagnostics."""

    text: str
    schemas: Mapping[str, JSONDict]
    calls: list[ParsedCall] = field(default_factory=list)
    spans: list[tuple[int, int]] = field(default_factory=list)
    diagnostics: list[str] = field(default_factory=list)
    _truncation_noted: bool = False

    def read(self) -> None:
        pos = 0
        while (opener := _BLOCK_START.search(self.text, pos)) is not None:
            wrapped = _CALLS_OPEN.match(self.text, opener.start()) is not None
            if not wrapped:
                self.diagnostics.append("read an <invoke> that is not inside <function_calls>")
            end = self._block(opener.end() if wrapped else opener.start(), wrapped)
            self.spans.append((opener.start(), end))
            pos = end
        cut = _partial_tag_start(self.text[pos:])
        if cut is not None:
            self._truncated("it ends inside a call tag")
            self.spans.append((pos + cut, len(self.text)))

    def _truncated(self, detail: str) -> None:
        if not self._truncation_noted:
            self.diagnostics.append(f"reply is truncated: {detail}; kept what was complete")
            self._truncation_noted = True

    def _block(self, pos: int, wrapped: bool) -> int:
        """Read ``<invoke>``s from ``pos``; return where the block ends."""
        while True:
            match = _IN_BLOCK.search(self.text, pos)
            gap = self.text[pos : match.start() if match else len(self.text)]
            if match is None:
                return self._block_runs_out(pos, gap, wrapped)
            if gap.strip():
                if not wrapped:
                    return pos  # prose between bare invokes ends the group
                self.diagnostics.append(f"ignored stray text inside <function_calls>: {_clip(gap)!r}")
            if _CALLS_CLOSE.fullmatch(match.group(0)):
                return match.end()
            pos = self._invoke(match)

    def _block_runs_out(self, pos: int, gap: str, wrapped: bool) -> int:
        if not gap.strip():
            if wrapped:
                self._truncated("</function_calls> never closed")
            return len(self.text)
        cut = _partial_tag_start(gap)
        if cut is not None and not gap[:cut].strip():
            self._truncated("it ends inside a call tag")
            return len(self.text)
        if wrapped:
            self.diagnostics.append(
                "</function_calls> is missing; read the text after the last call as prose"
            )
        return pos

    def _invoke(self, opener: re.Match[str]) -> int:
        """Read one ``<invoke>``; return the position after it."""
        name = _attributes(opener.group(1)).get("name", "").strip()
        schema = _tool_schema(self.schemas, name)
        subject = name or "<invoke>"
        values: dict[str, str] = {}
        if opener.group(2) == "/":
            body_start = body_end = end = opener.end()
        else:
            body_start = opener.end()
            body_end, end = self._parameters(body_start, subject, schema, values)
        if not name:
            self.diagnostics.append("skipped an <invoke> without a name attribute")
            return end
        self.calls.append(self._call(name, schema, values, self.text[body_start:body_end]))
        return end

    def _call(self, name: str, schema: JSONDict | None, values: dict[str, str], body: str) -> ParsedCall:
        if schema is None:
            self.diagnostics.append(_unknown_tool(name, self.schemas))
            return ParsedCall(name=name, arguments=dict(values), arguments_text=body)
        arguments, notes = coerce_arguments(values, schema, tool=name)
        self.diagnostics.extend(notes)
        return ParsedCall(name=name, arguments=arguments, arguments_text=body)

    def _parameters(
        self, pos: int, subject: str, schema: JSONDict | None, values: dict[str, str]
    ) -> tuple[int, int]:
        """Read ``<parameter>``s into ``values``; return (end of body, position after the invoke)."""
        while True:
            match = _IN_INVOKE.search(self.text, pos)
            gap = self.text[pos : match.start() if match else len(self.text)]
            if match is None:
                if gap.strip() and _partial_tag_start(gap) is None:
                    self.diagnostics.append(f"{subject}: ignored stray text inside <invoke>: {_clip(gap)!r}")
                self._truncated(f"</invoke> of {subject} never closed")
                return len(self.text), len(self.text)
            if gap.strip():
                self.diagnostics.append(f"{subject}: ignored stray text inside <invoke>: {_clip(gap)!r}")
            tag = match.group(0)
            if _INVOKE_CLOSE.fullmatch(tag):
                return match.start(), match.end()
            param_tag = _PARAM_OPEN.fullmatch(tag)
            if param_tag is None:
                self.diagnostics.append(f"{subject}: </invoke> is missing; the call ends at the next tag")
                return match.start(), match.start()
            pos = self._parameter(param_tag, match.end(), subject, schema, values)

    def _parameter(
        self,
        tag: re.Match[str],
        value_start: int,
        subject: str,
        schema: JSONDict | None,
        values: dict[str, str],
    ) -> int:
        """Read one ``<parameter>`` whose value starts at ``value_start``; return the position after it."""
        param = _attributes(tag.group(1)).get("name", "").strip()
        where = f"{subject}.{param or '<parameter>'}"
        if tag.group(2) == "/":
            raw, end = "", value_start
        else:
            raw, end = self._value(value_start, where, _is_free_text(schema, param))
        if not param:
            self.diagnostics.append(f"{subject}: skipped a <parameter> without a name attribute")
            return end
        if param in values:
            self.diagnostics.append(f"{where}: given twice; the last value counts")
        values[param] = self._text_value(raw, where)
        return end

    def _value(self, start: int, where: str, free_text: bool) -> tuple[str, int]:
        """The raw value opening at ``start`` and the position after its ``</parameter>``.

        Free text ends at the last ``</parameter>`` before the next tag (the value itself
        may contain one); typed values end at the first.
        """
        boundary_match = _VALUE_END.search(self.text, start)
        boundary = boundary_match.start() if boundary_match else len(self.text)
        closes = list(_PARAM_CLOSE.finditer(self.text, start, boundary))
        if closes:
            close = closes[-1] if free_text else closes[0]
            if free_text and len(closes) > 1:
                self.diagnostics.append(
                    f"{where}: the value contains '</parameter>'; read up to the last one"
                )
            return self.text[start : close.start()], close.end()
        raw = self.text[start:boundary]
        if boundary_match is None:
            self._truncated(f"</parameter> of {where} never closed, its partial value is kept")
            cut = _partial_tag_start(raw)
            return (raw if cut is None else raw[:cut]), boundary
        self.diagnostics.append(f"{where}: </parameter> is missing; read the value up to the next tag")
        return raw, boundary

    def _text_value(self, raw: str, where: str) -> str:
        whole = _WHOLE_CDATA.match(raw)
        if whole is not None and "]]>" not in whole.group(1):
            self.diagnostics.append(f"{where}: unwrapped CDATA")
            return whole.group(1)
        value, seen = _decode(_trim_layout(raw))
        if "CDATA" in seen:
            self.diagnostics.append(f"{where}: unwrapped CDATA")
        if "entities" in seen:
            self.diagnostics.append(f"{where}: decoded XML entities")
        return value


def _cut_invented_results(text: str, after: int, diagnostics: list[str]) -> str:
    """``text`` up to the first result the model wrote itself after position ``after``."""
    match = _INVENTED_RESULT.search(text, after)
    if match is None:
        return text
    diagnostics.append(f"cut an invented result ({_clip(match.group(0), 30)}…) and everything after it")
    return text[: match.start()]


def _parse_xml(text: str, schemas: Mapping[str, JSONDict]) -> ParseResult:
    if not text.strip():
        return ParseResult(calls=[], text="", diagnostics=["empty reply"])
    visible, thoughts = _split_thinking(text)
    diagnostics = _thinking_diagnostic(thoughts, sum(len(_INVOKE_OPEN.findall(t)) for t in thoughts))
    first = _BLOCK_START.search(visible)
    if first is not None:
        visible = _cut_invented_results(visible, first.start(), diagnostics)
    reader = _XmlReader(visible, schemas)
    reader.read()
    prose = _prose_around(visible, reader.spans, diagnostics)
    return ParseResult(calls=reader.calls, text=prose, diagnostics=diagnostics + reader.diagnostics)


def parse_xml_calls(text: str | None, *, schemas: Mapping[str, JSONDict]) -> ParseResult:
    """The calls in a reply written in the ``<function_calls>``/``<invoke>`` convention.

    ``schemas`` maps each offered tool name (as the model sees it) to its input schema; it
    types the text values (see ``coerce_arguments``) and flags unknown tools, which are kept
    as calls for the host to reject. Several ``<invoke>``s are several calls. Calls inside
    ``<think>`` blocks do not count; text from an invented ``<function_results>`` on is cut;
    a truncated reply yields what was complete plus a partial final value. Never raises.
    """
    return _guarded(_parse_xml, text, schemas)


# ---------------------------------------------------------------------------------------------
# JSON convention: {"tool": NAME, "arguments": {...}}
# ---------------------------------------------------------------------------------------------

# Bounds that keep a pathological reply (thousands of brackets) from costing seconds.
_MAX_CANDIDATES = 64  # bracketed values examined per reply
_MAX_REPAIRS = 4  # json_repair runs per reply; a real reply needs one at most
_MAX_REPAIR_DEPTH = 16  # json_repair slows steeply with nesting; calls are shallow
_MAX_NESTING = 4  # lists and wrappers a call may sit in
_MAX_SCAN_DEPTH = 256  # bracket depth past which a value is taken as unclosed garbage
# Only a value mentioning one of these (or an offered name) can hold a call worth repairing.
_CALL_HINT = re.compile(r"tool|name|function", re.I)
_OPENER = re.compile(r"[{\[]")
_SIGNIFICANT = re.compile(r"[\"'\\{}\[\]]")
_NAME_KEYS = ("tool", "name", "tool_name", "function")
_ARGUMENT_KEYS = ("arguments", "parameters", "args", "tool_input", "input")
_WRAPPER_KEYS = ("tool_calls", "tool_call", "function_call", "calls")
# Llama models on some servers write `<function=NAME>{args}</function>`.
_FUNCTION_TAG = re.compile(r"<function=([\w.:-]+)>?\s*\Z")
_FUNCTION_TAG_END = re.compile(r"\s*</function>")


@dataclass
class _RawCall:
    """A call as found in decoded JSON, before its arguments are checked."""

    name: str
    arguments: JSONValue
    has_arguments: bool
    notes: list[str] = field(default_factory=list)


@dataclass
class _Found:
    start: int
    end: int
    calls: list[_RawCall]
    repaired: bool
    closed: bool


@dataclass(frozen=True)
class _Extent:
    """Where a bracketed value ends, whether it closed, and how deeply it nests."""

    end: int
    closed: bool
    depth: int


def _bracket_end(text: str, start: int) -> _Extent:
    """The extent of the bracketed value opening at ``start``.

    String-aware (double and single quotes, backslash escapes), so brackets inside strings
    do not count; an unclosed value runs to the end of the text.
    """
    depth = deepest = 0
    quote = ""
    pos = start
    # Jump between the characters that matter: long prose and strings cost one regex step.
    while (match := _SIGNIFICANT.search(text, pos)) is not None:
        char, pos = match.group(), match.end()
        if quote:
            if char == "\\":
                pos += 1
            elif char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char in "{[":
            depth += 1
            deepest = max(deepest, depth)
            if depth > _MAX_SCAN_DEPTH:  # no call nests this deep: stop counting
                break
        elif char in "}]":
            depth -= 1
            if depth == 0:
                return _Extent(pos, True, deepest)
    return _Extent(len(text), False, deepest)


def _read_calls(value: JSONValue, names: Mapping[str, JSONDict], depth: int = 0) -> list[_RawCall]:
    """Every call in a decoded value: one object, a list of them, or a wrapper."""
    if depth > _MAX_NESTING:
        return []
    if isinstance(value, list):
        return [call for item in value for call in _read_calls(item, names, depth + 1)]
    if not isinstance(value, dict):
        return []
    for key in _WRAPPER_KEYS:
        if key in value and (inner := _read_calls(value[key], names, depth + 1)):
            return inner
    call = _read_call_object(value, names)
    return [call] if call else []


def _read_call_object(obj: JSONDict, names: Mapping[str, JSONDict]) -> _RawCall | None:
    nested = obj.get("function")
    if isinstance(nested, dict):
        inner = _read_call_object(nested, names)
        if inner is not None:
            inner.notes = ["read an OpenAI-style {function: {name, arguments}} object"]
            return inner
    name_key = next((key for key in _NAME_KEYS if _is_name(obj.get(key))), None)
    arguments_key = next((key for key in _ARGUMENT_KEYS if key in obj), None)
    if name_key is None:
        return _read_keyed_by_name(obj, names)
    name = str(obj[name_key]).strip()
    # "name" is also an ordinary data key: without arguments it names a call only if offered.
    if name_key == "name" and arguments_key is None and name not in names:
        return None
    call = _RawCall(
        name=name,
        arguments=obj[arguments_key] if arguments_key else None,
        has_arguments=arguments_key is not None,
    )
    if (name_key, arguments_key or "arguments") != ("tool", "arguments"):
        call.notes.append(f"read the call from the keys '{name_key}'/'{arguments_key or '-'}'")
    return call


def _is_name(value: JSONValue) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _read_keyed_by_name(obj: JSONDict, names: Mapping[str, JSONDict]) -> _RawCall | None:
    """``{"get_weather": {...}}``: a single offered tool name as the key (Ollama accepts it)."""
    if len(obj) != 1:
        return None
    [(name, arguments)] = obj.items()
    if name not in names or not isinstance(arguments, dict):
        return None
    return _RawCall(
        name=name,
        arguments=arguments,
        has_arguments=True,
        notes=["read the tool name from the object's only key"],
    )


@dataclass
class _JsonScan:
    """A scan for calls in JSON values embedded anywhere in a reply."""

    text: str
    names: Mapping[str, JSONDict]
    found: list[_Found] = field(default_factory=list)
    saw_other_object: bool = False
    repairs_left: int = _MAX_REPAIRS

    def run(self) -> _JsonScan:
        pos = 0
        for _ in range(_MAX_CANDIDATES):
            opener = _OPENER.search(self.text, pos)
            if opener is None:
                break
            pos = self._candidate(opener.start())
        return self

    def _candidate(self, start: int) -> int:
        """Read the JSON value opening at ``start``; return where to look next."""
        extent = _bracket_end(self.text, start)
        end, closed = extent.end, extent.closed
        skip = end if closed else start + 1
        tag = _FUNCTION_TAG.search(self.text, max(0, start - 200), start)
        repairable = extent.depth <= _MAX_REPAIR_DEPTH and (
            tag is not None or self._may_hold_call(self.text[start:end])
        )
        loaded = self._load(self.text[start:end], repairable=repairable)
        if loaded is None:
            return skip
        calls = _read_calls(loaded.value, self.names)
        span_start = start
        if not calls and tag is not None and isinstance(loaded.value, dict):
            calls = [_RawCall(tag.group(1), loaded.value, True, ["read a <function=NAME>{arguments} call"])]
            span_start = tag.start()
            closer = _FUNCTION_TAG_END.match(self.text, end)
            end = closer.end() if closer else end
        if not calls:
            self.saw_other_object |= isinstance(loaded.value, dict) and not loaded.repaired
            return skip
        self.found.append(_Found(span_start, end, calls, loaded.repaired, closed))
        return end

    def _load(self, span: str, *, repairable: bool) -> _Loaded | None:
        strict = _load_strict(span)
        if strict is not None:
            return _Loaded(strict, repaired=False)
        # Repairing costs far more than parsing (and grows steeply with nesting): spend it
        # only where a call could be hiding, a bounded number of times per reply.
        if self.repairs_left <= 0 or not repairable:
            return None
        self.repairs_left -= 1
        return _repair(span)

    def _may_hold_call(self, span: str) -> bool:
        return _CALL_HINT.search(span) is not None or any(name in span for name in self.names)


def _cut_after_first_call(text: str, found: list[_Found], diagnostics: list[str]) -> tuple[str, list[_Found]]:
    """Drop an invented tool result (and all after it) that follows the first call."""
    if not found:
        return text, found
    for pattern in (_INVENTED_RESULT, _INVENTED_RESULT_LINE):
        for match in pattern.finditer(text, found[0].end):
            if not any(hit.start <= match.start() < hit.end for hit in found):
                diagnostics.append(
                    f"cut an invented result ({_clip(match.group(0).strip(), 30)}…) and everything after it"
                )
                return text[: match.start()], [hit for hit in found if hit.end <= match.start()]
    return text, found


def _json_arguments(call: _RawCall, diagnostics: list[str]) -> tuple[JSONDict | None, str]:
    """The call's arguments as an object (``None`` if impossible) and their source text."""
    value = call.arguments
    if not call.has_arguments or value is None:
        diagnostics.append(f"{call.name}: no arguments given; called with none")
        return {}, ""
    if isinstance(value, dict):
        return value, json.dumps(value, ensure_ascii=False)
    if not isinstance(value, str):
        diagnostics.append(f"{call.name}: the arguments are {_json_type(value)}, not an object")
        return None, json.dumps(value, ensure_ascii=False)
    if not value.strip():
        return {}, value
    loaded = _load_json(value)
    if loaded is None or not isinstance(loaded.value, dict):
        diagnostics.append(f"{call.name}: the arguments string is not a JSON object: {_clip(value)!r}")
        return None, value
    repaired = " (repaired)" if loaded.repaired else ""
    diagnostics.append(f"{call.name}: decoded the arguments from a JSON-encoded string{repaired}")
    return loaded.value, value


def _json_call(call: _RawCall, schemas: Mapping[str, JSONDict], diagnostics: list[str]) -> ParsedCall:
    diagnostics.extend(f"{call.name}: {note}" for note in call.notes)
    arguments, source = _json_arguments(call, diagnostics)
    schema = _tool_schema(schemas, call.name)
    if schema is None:
        diagnostics.append(_unknown_tool(call.name, schemas))
    elif arguments is not None:
        arguments, notes = _coerce_json_arguments(arguments, schema, call.name)
        diagnostics.extend(notes)
    return ParsedCall(name=call.name, arguments=arguments, arguments_text=source)


def _exact_json(text: str, schemas: Mapping[str, JSONDict]) -> ParseResult | None:
    """The reply when it is exactly the convention (maybe fenced): strict JSON, nothing else."""
    inner, fenced = _unfence_whole(text)
    value = _load_strict(inner.strip())
    if value is None:
        return None
    calls = _read_calls(value, schemas)
    diagnostics = ["stripped a code fence around the call"] if fenced and calls else []
    if not calls:
        if isinstance(value, dict | list):
            diagnostics.append("JSON without a tool key is treated as the answer text")
        return ParseResult(calls=[], text=text.strip(), diagnostics=diagnostics)
    parsed = [_json_call(call, schemas, diagnostics) for call in calls]
    return ParseResult(calls=parsed, text="", diagnostics=diagnostics)


def _parse_json(text: str, schemas: Mapping[str, JSONDict]) -> ParseResult:
    if not text.strip():
        return ParseResult(calls=[], text="", diagnostics=["empty reply"])
    exact = _exact_json(text, schemas)
    if exact is not None:
        return exact
    visible, thoughts = _split_thinking(text)
    diagnostics = _thinking_diagnostic(
        thoughts,
        sum(len(hit.calls) for thought in thoughts for hit in _JsonScan(thought, schemas).run().found),
    )
    scan = _JsonScan(visible, schemas).run()
    visible, found = _cut_after_first_call(visible, scan.found, diagnostics)
    if any(not hit.closed for hit in found):
        diagnostics.append("reply is truncated: the JSON call was never closed; repaired what was there")
    elif any(hit.repaired for hit in found):
        diagnostics.append("repaired non-JSON in the call (quotes, True/None, trailing commas or the like)")
    if scan.saw_other_object:
        diagnostics.append("JSON without a tool key is treated as the answer text")
    calls = [_json_call(call, schemas, diagnostics) for hit in found for call in hit.calls]
    prose = _prose_around(visible, [(hit.start, hit.end) for hit in found], diagnostics)
    return ParseResult(calls=calls, text=prose, diagnostics=diagnostics)


def parse_json_reply(text: str | None, *, schemas: Mapping[str, JSONDict]) -> ParseResult:
    """The calls in a reply in the ``{"tool": NAME, "arguments": {...}}`` convention.

    A reply that holds no call is the final answer (``text``). Accepted besides the exact
    form: fences, the object embedded in prose, key variants (``name``/``function``/…,
    ``parameters``/``args``/…), OpenAI ``{"function": {...}}`` and ``{"tool_calls": [...]}``
    shapes, a list of calls, arguments as a JSON-encoded string, Python-flavoured or
    truncated JSON (repaired). Calls inside ``<think>`` do not count. String values are
    typed only where the schema allows just number/integer/boolean and the text is exactly
    such a literal. Never raises.
    """
    return _guarded(_parse_json, text, schemas)


def _guarded(
    parse: Callable[[str, Mapping[str, JSONDict]], ParseResult], text: object, schemas: Mapping[str, JSONDict]
) -> ParseResult:
    """Run a parser so that even a bug in it keeps the reply, as text, and says so."""
    reply = _as_text(text)
    offered: Mapping[str, JSONDict] = schemas if isinstance(schemas, Mapping) else {}
    try:
        return parse(reply, offered)
    except Exception as exc:  # noqa: BLE001 — the contract is "never raises"; the raw text must survive
        return ParseResult(
            calls=[],
            text=reply.strip(),
            diagnostics=[f"internal parser error ({type(exc).__name__}); kept the reply as text"],
        )


# ---------------------------------------------------------------------------------------------
# Labels: the reply names one tool, or none
# ---------------------------------------------------------------------------------------------

_LABEL_PREFIX = re.compile(
    r"\A\s*(?:the\s+)?(?:tool(?:[ _]?name)?|intent|label|answer|category|class|function|choice)\s*[:=\-]\s*",
    re.I,
)
_LABEL_TRIM = " \t\r\n\"'`*.,;:!?()[]{}<>"
_NONE_REPLIES = frozenset(
    {"none", "no tool", "no_tool", "no tools", "no-tool", "n/a", "na", "null", "nothing", "no"}
)
_NONE_IN_SENTENCE = re.compile(r"(?<![\w/])(?:none|no[ _-]tools?|n/a)(?![\w/])", re.I)


def _whole_word(name: str, flags: int) -> re.Pattern[str]:
    # Tool names may hold "." and "-": "a" must not match inside "a.b" or "a-b", yet a name
    # may end a sentence ("use get_time.").
    return re.compile(rf"(?<![\w.-]){re.escape(name)}(?![\w-])(?!\.\w)", flags)


def _names_mentioned(text: str, names: Sequence[str]) -> list[str]:
    """Offered names that appear in ``text`` as whole words, in order of first appearance."""
    for flags in (0, re.I):
        positions: list[tuple[int, str]] = []
        for name in names:
            match = _whole_word(name, flags).search(text)
            if match is not None:
                positions.append((match.start(), name))
        if positions:
            return [name for _, name in sorted(positions)]
    return []


def _parse_label(text: str, names: Sequence[str]) -> tuple[str | None, list[str]]:
    if not text.strip():
        return None, ["empty reply"]
    visible, thoughts = _split_thinking(text)
    diagnostics = _thinking_diagnostic(thoughts, 0)
    body = _unfence_whole(visible)[0].strip()
    cleaned = _LABEL_PREFIX.sub("", body, count=1).strip(_LABEL_TRIM)
    if cleaned in names:
        if cleaned != body:
            diagnostics.append(f"read {cleaned!r} from {_clip(body)!r}")
        return cleaned, diagnostics
    by_case = {name.lower(): name for name in reversed(names)}
    if cleaned.lower() in by_case:
        diagnostics.append(f"matched {_clip(cleaned)!r} to {by_case[cleaned.lower()]!r} ignoring case")
        return by_case[cleaned.lower()], diagnostics
    if cleaned.lower() in _NONE_REPLIES:
        if cleaned.lower() != "none" or cleaned != body:
            diagnostics.append(f"read {_clip(body)!r} as none")
        return None, diagnostics
    return _label_in_sentence(body, names, diagnostics)


def _label_in_sentence(
    body: str, names: Sequence[str], diagnostics: list[str]
) -> tuple[str | None, list[str]]:
    mentioned = _names_mentioned(body, names)
    if len(mentioned) > 1:
        diagnostics.append(
            f"ambiguous: the reply names {', '.join(mentioned)}; took the first, {mentioned[0]!r}"
        )
        return mentioned[0], diagnostics
    if mentioned:
        diagnostics.append(f"found {mentioned[0]!r} in {_clip(body)!r}")
        return mentioned[0], diagnostics
    if _NONE_IN_SENTENCE.search(body):
        diagnostics.append(f"read {_clip(body)!r} as none")
        return None, diagnostics
    diagnostics.append(
        f"{_clip(body)!r} is not among the offered tools (offered: {_offered_list(names)}, or none)"
    )
    return None, diagnostics


def parse_label(text: str | None, *, names: Sequence[str]) -> tuple[str | None, list[str]]:
    """The tool a classification reply names, or ``None`` for "no tool", and diagnostics.

    The reply should be exactly one offered name or ``none``. Tolerated: quotes, backticks,
    trailing punctuation, a "Tool:" prefix, case differences, a name inside a sentence
    (first one wins, several are reported as ambiguous), "no tool"/"N/A" for none. An
    unrecognised reply is ``None`` with a diagnostic listing the offered names. Never raises.
    """
    reply = _as_text(text)
    listed = [names] if isinstance(names, str) else names if isinstance(names, Sequence) else []
    offered = [name for name in listed if isinstance(name, str) and name]
    try:
        return _parse_label(reply, offered)
    except Exception as exc:  # noqa: BLE001 — the contract is "never raises"
        return None, [f"internal parser error ({type(exc).__name__}); no label read"]
