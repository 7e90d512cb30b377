"""A server's tools as one host would send them, and what changed on the way.

``present_catalog`` applies a :class:`~conversations.loop.hosts.presets.HostPreset` to tool
definitions as their servers listed them: the name the host gives each tool, its description and
inputSchema after the host's rewriting, the tool definition in the wire shape of the host's model
API, every difference from the server's own definition (``changed``, ``added``, ``lost``), and a
verdict: ``ok`` (the model sees the server's definition unchanged), ``changed`` (it sees a
rewritten one) or ``refused`` (the host would not send it, or its model API would refuse the
request), each refusal naming the rule. ``tools_as_host`` does the same for a turn's offered tools
(a conversation run "as host H").

Never raises on what a server listed: a definition that is not an object, a schema nested past
any rewriter's reach or a huge catalog gives refusals, not exceptions. Work is linear in the
size of the definitions; the diff is walked with a stack and capped (``DIFF_LIMIT``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from conversations.loop.hosts.presets import HostPreset, Rule
from conversations.loop.llm import ToolDef
from conversations.loop.paradigms.structured import encoded_arguments_schema, strictify
from conversations.loop.providers.gemini import gemini_schema
from conversations.typealias import JSONDict, JSONValue

Verdict = Literal["ok", "changed", "refused"]
ChangeKind = Literal["changed", "added", "lost"]
# The most differences one tool's diff lists (a hostile schema may differ everywhere).
DIFF_LIMIT = 200
# OpenAI's strict-mode size limits (presets.OPENAI_STRUCTURED).
STRICT_MAX_DEPTH = 10
STRICT_MAX_PROPERTIES = 5000
STRICT_MAX_ENUM = 1000
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True)
class Change:
    """One difference between the server's definition and the host's: ``path`` is a slash path
    into ``{name, description, inputSchema}`` (``inputSchema/properties/city/minLength``)."""

    kind: ChangeKind
    path: str
    before: JSONValue = None
    after: JSONValue = None

    def as_json(self) -> JSONDict:
        return {"kind": self.kind, "path": self.path, "before": self.before, "after": self.after}


@dataclass(frozen=True)
class Refusal:
    """Why the host would not send a tool: what is wrong, and the rule it breaks."""

    problem: str
    rule: Rule

    def as_json(self) -> JSONDict:
        return {
            "problem": self.problem,
            "rule": self.rule.text,
            "source": self.rule.source,
            "status": self.rule.status,
        }


@dataclass
class Presented:
    """One tool as one host sends it."""

    server: str
    name: str
    host_name: str
    description: str
    input_schema: JSONDict
    wire: JSONDict
    changes: list[Change] = field(default_factory=list)
    refusals: list[Refusal] = field(default_factory=list)
    # The rewriter's own words for what it did (why a keyword went, what became what).
    notes: list[str] = field(default_factory=list)
    # More differences than ``DIFF_LIMIT``: how many were left out.
    changes_left_out: int = 0

    @property
    def verdict(self) -> Verdict:
        if self.refusals:
            return "refused"
        return "changed" if self.changes else "ok"

    @property
    def losses(self) -> list[Change]:
        return [change for change in self.changes if change.kind == "lost"]

    def as_json(self) -> JSONDict:
        return {
            "server": self.server,
            "name": self.name,
            "host_name": self.host_name,
            "verdict": self.verdict,
            "refusals": [refusal.as_json() for refusal in self.refusals],
            "changes": [change.as_json() for change in self.changes],
            "changes_left_out": self.changes_left_out,
            "notes": list(self.notes),
            "wire": self.wire,
        }


@dataclass
class HostView:
    """A catalog as one host sends it: each tool, and the host's verdict on the whole."""

    preset: HostPreset
    tools: list[Presented]

    @property
    def verdict(self) -> Verdict:
        verdicts = {tool.verdict for tool in self.tools}
        if "refused" in verdicts:
            return "refused"
        return "changed" if "changed" in verdicts else "ok"

    def as_json(self) -> JSONDict:
        return {
            "host": self.preset.key,
            "label": self.preset.label,
            "api": self.preset.api,
            "verdict": self.verdict,
            "counts": {
                verdict: sum(1 for tool in self.tools if tool.verdict == verdict)
                for verdict in ("ok", "changed", "refused")
            },
            "rules": [
                {"text": rule.text, "source": rule.source, "status": rule.status}
                for rule in self.preset.rules()
            ],
            "tools": [tool.as_json() for tool in self.tools],
        }


def host_name(preset: HostPreset, server: str, tool: str) -> str:
    """The name ``preset``'s host gives ``server``'s tool ``tool`` in front of its model."""
    if preset.naming == "claude":
        return f"mcp__{_UNSAFE.sub('_', server)}__{_UNSAFE.sub('_', tool)}"
    if preset.naming == "vscode":
        return f"mcp_{_UNSAFE.sub('_', server)}_{_UNSAFE.sub('_', tool)}"
    return tool


def present_catalog(preset: HostPreset, tools: Sequence[tuple[str, Mapping[str, Any]]]) -> HostView:
    """``tools`` — (server name, definition as listed) pairs, in the order offered — as
    ``preset``'s host sends them. Catalog rules come last: a name two tools share (the later one
    is refused), and tools past the host's limit (refused, the first ones kept)."""
    presented = [present_tool(preset, server, definition) for server, definition in tools]
    if preset.unique_rule is not None:
        seen: set[str] = set()
        for tool in presented:
            if tool.host_name in seen:
                tool.refusals.append(
                    Refusal(
                        f"another tool of this request is also named {tool.host_name!r}", preset.unique_rule
                    )
                )
            seen.add(tool.host_name)
    if preset.tool_limit is not None and preset.tool_limit_rule is not None:
        for index, tool in enumerate(presented):
            if index >= preset.tool_limit:
                tool.refusals.append(
                    Refusal(
                        f"tool {index + 1} of {len(presented)}: past the limit of {preset.tool_limit}",
                        preset.tool_limit_rule,
                    )
                )
    return HostView(preset, presented)


def present_tool(preset: HostPreset, server: str, definition: Mapping[str, Any]) -> Presented:
    """One definition as ``preset``'s host sends it (catalog rules aside: ``present_catalog``)."""
    name = definition.get("name") if isinstance(definition, Mapping) else None
    name = name if isinstance(name, str) else ""
    description = definition.get("description") if isinstance(definition, Mapping) else None
    description = description if isinstance(description, str) else ""
    raw_schema = definition.get("inputSchema") if isinstance(definition, Mapping) else None
    schema: JSONDict = raw_schema if isinstance(raw_schema, dict) else {}
    given = host_name(preset, server, name)
    tool = Presented(server, name, given, description, schema, {})
    if not preset.name_re.fullmatch(given):
        tool.refusals.append(Refusal(_name_problem(given, preset), preset.name_rule))
    if preset.combined_limit is not None and preset.combined_rule is not None:
        combined = len(server) + len(name)
        if combined >= preset.combined_limit:
            tool.refusals.append(
                Refusal(f"server and tool name are {combined} characters together", preset.combined_rule)
            )
    if preset.description_limit is not None and preset.description_rule is not None:
        if len(description) > preset.description_limit:
            tool.refusals.append(
                Refusal(f"the description is {len(description)} characters", preset.description_rule)
            )
    if not isinstance(raw_schema, dict):
        tool.notes.append("the definition has no inputSchema object: an empty schema stands for it")
    tool.input_schema = _rewritten(preset, schema, tool)
    tool.wire = wire_definition(preset, given, description, tool.input_schema)
    before: JSONDict = {"name": name, "description": description, "inputSchema": schema}
    after: JSONDict = {"name": given, "description": description, "inputSchema": tool.input_schema}
    tool.changes, tool.changes_left_out = diff(before, after)
    return tool


def _name_problem(name: str, preset: HostPreset) -> str:
    if not name:
        return "the tool has no name"
    bad = sorted({char for char in name if not re.match(r"[A-Za-z0-9_-]", char)})
    if bad and preset.api not in ("gemini", "gemini_json"):
        return f"{name[:80]!r} has characters the host refuses: {' '.join(repr(c) for c in bad)}"
    return f"{name[:80]!r} ({len(name)} characters) does not match {preset.name_pattern}"


def _rewritten(preset: HostPreset, schema: JSONDict, tool: Presented) -> JSONDict:
    """The inputSchema the host sends, refusals and notes added to ``tool``."""
    if preset.root_object is not None and schema.get("type") != "object":
        tool.refusals.append(
            Refusal(f"the inputSchema's type at the root is {schema.get('type')!r}", preset.root_object)
        )
    if preset.array_items is not None:
        missing = _arrays_without_items(schema)
        if missing:
            tool.refusals.append(
                Refusal("arrays without items: " + ", ".join(missing[:10]), preset.array_items)
            )
    if preset.schema_mode == "strict":
        return _strict(preset, schema, tool)
    if preset.schema_mode == "gemini_parameters":
        try:
            converted, notes = gemini_schema(schema)
        except RecursionError:
            tool.refusals.append(Refusal("the schema nests too deeply to convert", preset.schema_rule))
            return {}
        tool.notes.extend(notes)
        return converted
    # Never changed in place by anything here: the server's schema is sent as it is.
    return schema


def _strict(preset: HostPreset, schema: JSONDict, tool: Presented) -> JSONDict:
    try:
        strict, notes = strictify(schema)
        encoded = strict == encoded_arguments_schema(schema)
    except RecursionError:
        tool.refusals.append(Refusal("the schema nests too deeply", preset.schema_rule))
        return schema
    if encoded:
        # strictify's way out (the arguments as one JSON string) is this product's, no host's.
        tool.refusals.append(Refusal(notes[0].split(", which strict mode")[0], preset.schema_rule))
        return schema
    tool.notes.extend(notes)
    depth, properties, enums = _size(strict)
    if depth > STRICT_MAX_DEPTH:
        tool.refusals.append(
            Refusal(f"{depth} levels of nesting (at most {STRICT_MAX_DEPTH})", preset.schema_rule)
        )
    if properties > STRICT_MAX_PROPERTIES:
        tool.refusals.append(
            Refusal(f"{properties} properties (at most {STRICT_MAX_PROPERTIES})", preset.schema_rule)
        )
    if enums > STRICT_MAX_ENUM:
        tool.refusals.append(Refusal(f"{enums} enum values (at most {STRICT_MAX_ENUM})", preset.schema_rule))
    return strict


def _size(schema: JSONDict) -> tuple[int, int, int]:
    """Object nesting depth, properties and enum values of a schema, walked with a stack."""
    depth = properties = enums = 0
    stack: list[tuple[JSONValue, int]] = [(schema, 0)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, list):
            stack.extend((item, level) for item in node)
            continue
        if not isinstance(node, dict):
            continue
        found = node.get("properties")
        if isinstance(found, dict):
            depth = max(depth, level + 1)
            properties += len(found)
            stack.extend((child, level + 1) for child in found.values())
        values = node.get("enum")
        enums += len(values) if isinstance(values, list) else 0
        for key in ("items", "anyOf", "$defs"):
            child = node.get(key)
            if key == "$defs" and isinstance(child, dict):
                stack.extend((inner, level) for inner in child.values())
            elif child is not None and key != "$defs":
                stack.append((child, level))
    return depth, properties, enums


def _arrays_without_items(schema: JSONDict) -> list[str]:
    found: list[str] = []
    stack: list[tuple[JSONValue, str]] = [(schema, "")]
    while stack and len(found) < 50:
        node, path = stack.pop()
        if isinstance(node, list):
            stack.extend((item, f"{path}/{index}") for index, item in enumerate(node))
            continue
        if not isinstance(node, dict):
            continue
        declared = node.get("type")
        if (
            declared == "array" or (isinstance(declared, list) and "array" in declared)
        ) and "items" not in node:
            found.append(path or "/")
        for key, child in node.items():
            if isinstance(child, (dict, list)) and key not in (
                "enum",
                "const",
                "default",
                "examples",
                "required",
            ):
                stack.append((child, f"{path}/{key}"))
    return sorted(found)


def wire_definition(preset: HostPreset, name: str, description: str, schema: JSONDict) -> JSONDict:
    """The tool definition in the shape of the host's model API."""
    described: JSONDict = {"description": description} if description else {}
    if preset.api == "openai_chat":
        function: JSONDict = {"name": name, **described, "parameters": schema}
        if preset.strict is not None:
            function["strict"] = preset.strict
        return {"type": "function", "function": function}
    if preset.api == "openai_responses":
        return {
            "type": "function",
            "name": name,
            **described,
            "parameters": schema,
            "strict": bool(preset.strict),
        }
    if preset.api == "anthropic":
        return {"name": name, **described, "input_schema": schema}
    if preset.api == "gemini_json":
        return {"name": name, **described, "parametersJsonSchema": schema}
    return {"name": name, **described, "parameters": schema}


def diff(before: JSONValue, after: JSONValue, *, limit: int = DIFF_LIMIT) -> tuple[list[Change], int]:
    """Every difference from ``before`` to ``after`` (at most ``limit``, and how many more).

    Objects are compared key by key; a list of scalars (``required``, ``enum``, a type list) as
    a set, each element added or lost; any other list element by element when the lengths
    agree, else as one changed value. Walked with a stack: depth costs no recursion.
    """
    changes: list[Change] = []
    left_out = 0
    stack: list[tuple[str, JSONValue, JSONValue]] = [("", before, after)]
    while stack:
        path, old, new = stack.pop()
        found: list[Change] = []
        if isinstance(old, dict) and isinstance(new, dict):
            for key in reversed(list(dict.fromkeys([*old, *new]))):
                where = f"{path}/{key}" if path else str(key)
                if key not in new:
                    found.append(Change("lost", where, old[key], None))
                elif key not in old:
                    found.append(Change("added", where, None, new[key]))
                elif not _same(old[key], new[key]):
                    stack.append((where, old[key], new[key]))
        elif isinstance(old, list) and isinstance(new, list) and _scalars(old) and _scalars(new):
            old_keys = {_key(item) for item in old}
            new_keys = {_key(item) for item in new}
            found.extend(Change("lost", path, item, None) for item in old if _key(item) not in new_keys)
            found.extend(Change("added", path, None, item) for item in new if _key(item) not in old_keys)
            if not found:
                found.append(Change("changed", path, old, new))  # the same values in another order
        elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
            stack.extend(
                (f"{path}/{index}", o, n)
                for index, (o, n) in reversed(list(enumerate(zip(old, new, strict=True))))
                if not _same(o, n)
            )
        else:
            found.append(Change("changed", path, old, new))
        for change in found:
            if len(changes) < limit:
                changes.append(change)
            else:
                left_out += 1
    return changes, left_out


def _scalars(items: list[JSONValue]) -> bool:
    return all(not isinstance(item, (dict, list)) for item in items)


def _key(item: JSONValue) -> str:
    return json.dumps(item)


def _same(old: JSONValue, new: JSONValue) -> bool:
    # bool is an int to Python: True == 1 must still be a change.
    return type(old) is type(new) and old == new


def tools_as_host(
    preset: HostPreset, tools: Sequence[ToolDef], *, provider: str = ""
) -> tuple[list[ToolDef], list[str], list[str]]:
    """A turn's tools as ``preset``'s host offers them: each renamed and rewritten (its
    ``provider_name`` is the host's name, so a call by that name maps back to the server's tool),
    marked with the preset and its changes (``ToolDef.host``); the tools the host refuses are
    withheld. Returns the tools, one note per tool changed or withheld, and the problems (one per
    tool withheld) for the turn's ``connect`` step."""
    view = present_catalog(preset, [(tool.server_name, _definition(tool)) for tool in tools])
    offered: list[ToolDef] = []
    notes = [f"as host {preset.key} ({preset.label}): its naming and schema rules applied"]
    problems: list[str] = []
    if provider and not _speaks(preset, provider):
        notes.append(
            f"the profile's provider {provider} is not {preset.label}'s model API: names and schemas are "
            "rewritten, the wire flags of that API (strict, parametersJsonSchema) are not sent"
        )
    for tool, shown in zip(tools, view.tools, strict=True):
        where = f"{tool.server_name}/{tool.name}"
        if shown.refusals:
            reasons = "; ".join(f"{r.problem} ({r.rule.text})" for r in shown.refusals)
            problems.append(f"{where}: not offered: {preset.key} refuses it: {reasons}")
            notes.append(f"{where}: withheld ({preset.key} refuses it)")
            continue
        mark: JSONDict = {
            "preset": preset.key,
            "verdict": shown.verdict,
            "changes": [change.as_json() for change in shown.changes],
        }
        speaks = _speaks(preset, provider)
        offered.append(
            replace(
                tool,
                provider_name=shown.host_name,
                description=shown.description,
                input_schema=shown.input_schema,
                host=mark,
                strict=preset.strict if speaks else None,
                schema_field="parametersJsonSchema" if speaks and preset.api == "gemini_json" else "",
            )
        )
        if shown.changes:
            paths = ", ".join(sorted({change.path.split("/")[0] for change in shown.changes}))
            notes.append(f"{where}: offered as {shown.host_name} ({len(shown.changes)} changes: {paths})")
    return offered, notes, problems


def _speaks(preset: HostPreset, provider: str) -> bool:
    """Whether a profile of ``provider`` talks to the model API ``preset`` describes."""
    families = {
        "openai_chat": ("openai_chat",),
        "openai_responses": ("openai_responses",),
        "anthropic": ("anthropic",),
        "gemini": ("gemini",),
        "gemini_json": ("gemini",),
    }
    return provider in families[preset.api]


def _definition(tool: ToolDef) -> JSONDict:
    return {"name": tool.name, "description": tool.description, "inputSchema": tool.input_schema}
