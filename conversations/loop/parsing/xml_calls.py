"""The XML convention: ``<function_calls><invoke name="…"><parameter name="…">…</parameter></invoke>``.

:func:`parse_xml_calls` reads it tolerantly (namespaced tags, missing closers, closing tags inside
free text, CDATA and entities, a reply cut off mid-call) and coerces values by the tool's schema.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from conversations.loop.parsing.arguments import coerce_arguments, property_schema, types_of
from conversations.loop.parsing.text import (
    INVENTED_RESULT,
    NS,
    ParsedCall,
    ParseResult,
    clip,
    guarded,
    prose_around,
    split_thinking,
    thinking_diagnostic,
    tool_schema,
    unknown_tool,
)
from conversations.typealias import JSONDict

_BLOCK_START = re.compile(rf"<{NS}(?:function_calls\s*>|invoke\b[^<>]*>)", re.I)
_CALLS_OPEN = re.compile(rf"<{NS}function_calls\s*>", re.I)
_CALLS_CLOSE = re.compile(rf"</{NS}function_calls\s*>", re.I)
_INVOKE_OPEN = re.compile(rf"<{NS}invoke\b([^<>]*?)(/?)>", re.I)
_INVOKE_CLOSE = re.compile(rf"</{NS}invoke\s*>", re.I)
_PARAM_OPEN = re.compile(rf"<{NS}parameter\b([^<>]*?)(/?)>", re.I)
_PARAM_CLOSE = re.compile(rf"</{NS}parameter\s*>", re.I)
_IN_BLOCK = re.compile(rf"{_INVOKE_OPEN.pattern}|{_CALLS_CLOSE.pattern}", re.I)
_IN_INVOKE = re.compile(
    rf"{_PARAM_OPEN.pattern}|{_INVOKE_CLOSE.pattern}|{_INVOKE_OPEN.pattern}|{_CALLS_CLOSE.pattern}", re.I
)
_VALUE_END = re.compile(
    rf"<{NS}parameter\b[^<>]*>|{_INVOKE_CLOSE.pattern}|<{NS}invoke\b[^<>]*>|{_CALLS_CLOSE.pattern}", re.I
)
_ATTRIBUTE = re.compile(r"""([\w:.-]+)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'=<>`]+))""")
# Possessive: a name backtracking into the rest would cost the square of the tag's length.
_TRAILING_TAG = re.compile(r"<(/?)(?:[\w.-]++:)?(\w*+)([^<>]*+)\Z")
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
    node, known = property_schema(schema, param)
    types = types_of(node, schema) if known else None
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
                self.diagnostics.append(f"ignored stray text inside <function_calls>: {clip(gap)!r}")
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
        schema = tool_schema(self.schemas, name)
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
            self.diagnostics.append(unknown_tool(name, self.schemas))
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
                    self.diagnostics.append(f"{subject}: ignored stray text inside <invoke>: {clip(gap)!r}")
                self._truncated(f"</invoke> of {subject} never closed")
                return len(self.text), len(self.text)
            if gap.strip():
                self.diagnostics.append(f"{subject}: ignored stray text inside <invoke>: {clip(gap)!r}")
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
    match = INVENTED_RESULT.search(text, after)
    if match is None:
        return text
    diagnostics.append(f"cut an invented result ({clip(match.group(0), 30)}…) and everything after it")
    return text[: match.start()]


def _parse_xml(text: str, schemas: Mapping[str, JSONDict]) -> ParseResult:
    if not text.strip():
        return ParseResult(calls=[], text="", diagnostics=["empty reply"])
    visible, thoughts = split_thinking(text)
    diagnostics = thinking_diagnostic(thoughts, sum(len(_INVOKE_OPEN.findall(t)) for t in thoughts))
    first = _BLOCK_START.search(visible)
    if first is not None:
        visible = _cut_invented_results(visible, first.start(), diagnostics)
    reader = _XmlReader(visible, schemas)
    reader.read()
    prose = prose_around(visible, reader.spans, diagnostics)
    return ParseResult(calls=reader.calls, text=prose, diagnostics=diagnostics + reader.diagnostics)


def parse_xml_calls(text: str | None, *, schemas: Mapping[str, JSONDict]) -> ParseResult:
    """The calls in a reply written in the ``<function_calls>``/``<invoke>`` convention.

    ``schemas`` maps each offered tool name (as the model sees it) to its input schema; it
    types the text values (see ``coerce_arguments``) and flags unknown tools, which are kept
    as calls for the host to reject. Several ``<invoke>``s are several calls. Calls inside
    ``<think>`` blocks do not count; text from an invented ``<function_results>`` on is cut;
    a truncated reply yields what was complete plus a partial final value. Never raises.
    """
    return guarded(_parse_xml, text, schemas)
