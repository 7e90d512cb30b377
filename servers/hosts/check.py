"""``server check``: is a server ready for the hosts its users run? A report for CI.

Each finding has a level, and the levels make the exit code (docs/hosts.md, "server check"):

- ``error`` — some host refuses a tool (a name, a schema, a limit it breaks), or the definition
  is broken for every client (two tools share a name; an inputSchema or outputSchema that is not
  valid JSON Schema, or not an object schema): exit 2;
- ``warning`` — it works, but a model or a host will do worse: a host drops part of a schema
  the model needed (``meaningful_losses``: never an annotation or a keyword re-expressed), no description, parameters nobody explained, a name outside the
  MCP spec's recommended form, missing or contradictory annotations: exit 1 with ``--strict``,
  else 0;
- ``note`` — worth knowing, never failing: what a host renames or rewrites without loss.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from jsonschema.exceptions import SchemaError
from jsonschema.validators import Draft202012Validator, validator_for

from conversations.loop.hosts import Change, HostPreset
from conversations.typealias import JSONDict
from servers.hosts.reports import host_views
from servers.lint import THIN_DESCRIPTION_WORDS, undescribed_parameters

Level = Literal["error", "warning", "note"]
EXIT_READY = 0
EXIT_WARNINGS = 1
EXIT_REFUSED = 2
# The MCP specification's recommended tool names (2025-11-25, "Tool names").
MCP_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
MCP_TOOL_NAMES = "https://modelcontextprotocol.io/specification/2025-11-25/server/tools#tool-names"
MCP_ANNOTATIONS = "https://modelcontextprotocol.io/specification/2025-11-25/schema#toolannotations"
MCP_OUTPUT_SCHEMA = "https://modelcontextprotocol.io/specification/2025-11-25/server/tools#output-schema"
HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")


@dataclass(frozen=True)
class CheckFinding:
    level: Level
    area: str  # portability, description, names, inputSchema, outputSchema, annotations
    tool: str
    message: str
    host: str = ""
    source: str = ""

    def as_json(self) -> JSONDict:
        return {
            "level": self.level,
            "area": self.area,
            "tool": self.tool,
            "host": self.host,
            "message": self.message,
            "source": self.source,
        }


@dataclass
class Readiness:
    server: str
    hosts: dict[str, str]
    findings: list[CheckFinding] = field(default_factory=list)

    def count(self, level: Level) -> int:
        return sum(1 for finding in self.findings if finding.level == level)

    def exit_code(self, *, strict: bool) -> int:
        if self.count("error"):
            return EXIT_REFUSED
        if strict and self.count("warning"):
            return EXIT_WARNINGS
        return EXIT_READY

    def as_json(self, *, strict: bool) -> JSONDict:
        code = self.exit_code(strict=strict)
        return {
            "server": self.server,
            "ready": code == EXIT_READY,
            "exit_code": code,
            "strict": strict,
            "hosts": dict(self.hosts),
            "counts": {level: self.count(level) for level in ("error", "warning", "note")},
            "findings": [finding.as_json() for finding in self.findings],
        }


def server_check(
    server_name: str, tools: Sequence[Mapping[str, Any]], presets: Sequence[HostPreset]
) -> Readiness:
    """The readiness of ``tools`` (as the server listed them) for ``presets``' hosts."""
    views = host_views(server_name, tools, presets)
    readiness = Readiness(server_name, {view.preset.key: view.verdict for view in views})
    add = readiness.findings.append
    names = [str(tool.get("name", "")) if isinstance(tool, Mapping) else "" for tool in tools]
    for name in sorted({name for name in names if names.count(name) > 1}):
        add(
            CheckFinding(
                "error", "names", name, f"{names.count(name)} tools are named {name!r}", source=MCP_TOOL_NAMES
            )
        )
    for tool, name in zip(tools, names, strict=True):
        for finding in _definition_findings(tool if isinstance(tool, Mapping) else {}, name):
            add(finding)
    for view in views:
        for shown in view.tools:
            for refusal in shown.refusals:
                add(
                    CheckFinding(
                        "error",
                        "portability",
                        shown.name,
                        f"refused: {refusal.problem} ({refusal.rule.text}; {refusal.rule.status})",
                        host=view.preset.key,
                        source=refusal.rule.source,
                    )
                )
            losses = meaningful_losses(shown.changes)
            if losses:
                lost = ", ".join(sorted({change.path for change in losses})[:12])
                add(
                    CheckFinding(
                        "warning",
                        "portability",
                        shown.name,
                        f"the model is not told: {lost}"
                        + (" …" if len({c.path for c in losses}) > 12 else ""),
                        host=view.preset.key,
                        source=view.preset.schema_rule.source,
                    )
                )
            kept = [change for change in shown.changes if change.kind != "lost"]
            if kept and not shown.refusals:
                add(
                    CheckFinding(
                        "note",
                        "portability",
                        shown.name,
                        f"sent as {shown.host_name}, {len(kept)} change(s) without loss",
                        host=view.preset.key,
                    )
                )
    return readiness


# Keywords whose loss tells the model nothing less about the arguments: annotations for
# validators and editors, and definitions once their references are inlined.
UNTOLD_KEYWORDS = frozenset({"$schema", "$id", "$comment", "title", "examples", "$defs", "definitions"})
# Keywords a rewriting re-expresses beside them (a type list as anyOf, oneOf as anyOf, const as
# enum, allOf merged): lost only if nothing was added in their place.
REEXPRESSED = frozenset({"type", "oneOf", "allOf", "const"})


def meaningful_losses(changes: Sequence[Change]) -> list[Change]:
    """The ``lost`` differences that leave the model knowing less about the arguments: not an
    annotation (``UNTOLD_KEYWORDS``), not a keyword re-expressed beside it, not a ``default``
    moved into the description."""
    added = {_parent(change.path) for change in changes if change.kind == "added"}
    described = {
        _parent(change.path)
        for change in changes
        if change.path.endswith("/description") and change.kind != "lost"
    }
    found = []
    for change in changes:
        if change.kind != "lost":
            continue
        parent, _, key = change.path.rpartition("/")
        if key in UNTOLD_KEYWORDS or (key in REEXPRESSED and parent in added):
            continue
        if key == "default" and parent in described:
            continue
        found.append(change)
    return found


def _parent(path: str) -> str:
    return path.rpartition("/")[0]


def _definition_findings(tool: Mapping[str, Any], name: str) -> list[CheckFinding]:
    found: list[CheckFinding] = []
    if not MCP_NAME_RE.fullmatch(name):
        found.append(
            CheckFinding(
                "warning",
                "names",
                name,
                "the name is outside the MCP specification's recommended form [A-Za-z0-9_.-]{1,128}",
                source=MCP_TOOL_NAMES,
            )
        )
    description = str(tool.get("description") or "").strip()
    if not description:
        found.append(
            CheckFinding(
                "warning", "description", name, "no description: a model has only the name to choose by"
            )
        )
    elif len(description.split()) < THIN_DESCRIPTION_WORDS:
        found.append(
            CheckFinding(
                "warning", "description", name, f"thin description ({len(description.split())} words)"
            )
        )
    input_schema = tool.get("inputSchema")
    problem = _schema_problem(input_schema)
    if problem:
        found.append(CheckFinding("error", "inputSchema", name, problem, source=MCP_TOOL_NAMES))
    else:
        try:
            undescribed = undescribed_parameters(input_schema)
        except RecursionError:
            undescribed = []
        if undescribed:
            found.append(
                CheckFinding(
                    "warning",
                    "description",
                    name,
                    "parameters without a description: " + ", ".join(undescribed[:20]),
                )
            )
    if "outputSchema" in tool:
        problem = _schema_problem(tool.get("outputSchema"))
        if problem:
            found.append(CheckFinding("error", "outputSchema", name, problem, source=MCP_OUTPUT_SCHEMA))
    found.extend(_annotation_findings(tool.get("annotations"), name))
    return found


def _schema_problem(schema: Any) -> str:
    """Why ``schema`` cannot serve as a tool's input or output schema ("" when it can)."""
    if not isinstance(schema, dict):
        return "the schema is not a JSON object"
    if schema.get("type") != "object":
        return f"the schema's type at the root is {schema.get('type')!r}, not 'object'"
    try:
        validator_for(schema, default=Draft202012Validator).check_schema(schema)
    except SchemaError as exc:
        return f"not valid JSON Schema: {exc.message[:300]}"
    except RecursionError:
        return "the schema nests too deeply to be checked"
    except Exception as exc:  # noqa: BLE001 — an unknown $schema or a broken $ref is the server's bug
        return f"the schema cannot be checked: {str(exc)[:300]}"
    return ""


def _annotation_findings(annotations: Any, name: str) -> list[CheckFinding]:
    if annotations is None:
        return [
            CheckFinding(
                "warning",
                "annotations",
                name,
                "no annotations: a host must assume the tool changes things, may destroy data and reaches "
                "the outside world (the MCP defaults), and asks before every call",
                source=MCP_ANNOTATIONS,
            )
        ]
    if not isinstance(annotations, dict):
        return [
            CheckFinding(
                "error", "annotations", name, "annotations is not a JSON object", source=MCP_ANNOTATIONS
            )
        ]
    found: list[CheckFinding] = []
    for hint in HINTS:
        if hint in annotations and not isinstance(annotations[hint], bool):
            found.append(
                CheckFinding(
                    "warning",
                    "annotations",
                    name,
                    f"{hint} is {annotations[hint]!r}, not a boolean",
                    source=MCP_ANNOTATIONS,
                )
            )
    if "readOnlyHint" not in annotations:
        found.append(
            CheckFinding(
                "warning",
                "annotations",
                name,
                "no readOnlyHint: a host must assume the tool changes things",
                source=MCP_ANNOTATIONS,
            )
        )
    if annotations.get("readOnlyHint") is True and annotations.get("destructiveHint") is True:
        found.append(
            CheckFinding(
                "warning",
                "annotations",
                name,
                "readOnlyHint and destructiveHint are both true (destructiveHint means something only when "
                "the tool is not read-only)",
                source=MCP_ANNOTATIONS,
            )
        )
    return found
