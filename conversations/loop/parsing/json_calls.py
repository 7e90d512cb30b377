"""The JSON convention: ``{"tool": NAME, "arguments": {...}}``, alone or in a list.

:func:`parse_json_reply` finds calls in a reply however they were written: fenced, with prose
around them, under key variants (``name``/``function``, ``parameters``/``args``/``input``),
wrapped (``tool_calls``), keyed by tool name, as Llama's ``<function=NAME>``, with arguments as
a JSON-encoded string, or as Python-flavoured or truncated JSON (repaired). Bounds keep a
pathological reply cheap.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from conversations.loop.parsing.arguments import (
    Loaded,
    coerce_json_arguments,
    json_type,
    load_json,
    load_strict,
    repair,
)
from conversations.loop.parsing.text import (
    INVENTED_RESULT,
    INVENTED_RESULT_LINE,
    ParsedCall,
    ParseResult,
    clip,
    guarded,
    prose_around,
    split_thinking,
    thinking_diagnostic,
    tool_schema,
    unfence_whole,
    unknown_tool,
)
from conversations.typealias import JSONDict, JSONValue

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

    def _load(self, span: str, *, repairable: bool) -> Loaded | None:
        strict = load_strict(span)
        if strict is not None:
            return Loaded(strict, repaired=False)
        # Repairing costs far more than parsing (and grows steeply with nesting): spend it
        # only where a call could be hiding, a bounded number of times per reply.
        if self.repairs_left <= 0 or not repairable:
            return None
        self.repairs_left -= 1
        return repair(span)

    def _may_hold_call(self, span: str) -> bool:
        return _CALL_HINT.search(span) is not None or any(name in span for name in self.names)


def _cut_after_first_call(text: str, found: list[_Found], diagnostics: list[str]) -> tuple[str, list[_Found]]:
    """Drop an invented tool result (and all after it) that follows the first call."""
    if not found:
        return text, found
    for pattern in (INVENTED_RESULT, INVENTED_RESULT_LINE):
        for match in pattern.finditer(text, found[0].end):
            if not any(hit.start <= match.start() < hit.end for hit in found):
                diagnostics.append(
                    f"cut an invented result ({clip(match.group(0).strip(), 30)}…) and everything after it"
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
        diagnostics.append(f"{call.name}: the arguments are {json_type(value)}, not an object")
        return None, json.dumps(value, ensure_ascii=False)
    if not value.strip():
        return {}, value
    loaded = load_json(value)
    if loaded is None or not isinstance(loaded.value, dict):
        diagnostics.append(f"{call.name}: the arguments string is not a JSON object: {clip(value)!r}")
        return None, value
    repaired = " (repaired)" if loaded.repaired else ""
    diagnostics.append(f"{call.name}: decoded the arguments from a JSON-encoded string{repaired}")
    return loaded.value, value


def _json_call(call: _RawCall, schemas: Mapping[str, JSONDict], diagnostics: list[str]) -> ParsedCall:
    diagnostics.extend(f"{call.name}: {note}" for note in call.notes)
    arguments, source = _json_arguments(call, diagnostics)
    schema = tool_schema(schemas, call.name)
    if schema is None:
        diagnostics.append(unknown_tool(call.name, schemas))
    elif arguments is not None:
        arguments, notes = coerce_json_arguments(arguments, schema, call.name)
        diagnostics.extend(notes)
    return ParsedCall(name=call.name, arguments=arguments, arguments_text=source)


def _exact_json(text: str, schemas: Mapping[str, JSONDict]) -> ParseResult | None:
    """The reply when it is exactly the convention (maybe fenced): strict JSON, nothing else."""
    inner, fenced = unfence_whole(text)
    value = load_strict(inner.strip())
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
    visible, thoughts = split_thinking(text)
    diagnostics = thinking_diagnostic(
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
    prose = prose_around(visible, [(hit.start, hit.end) for hit in found], diagnostics)
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
    return guarded(_parse_json, text, schemas)
