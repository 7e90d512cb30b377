"""What a model will make of a tool definition: its token cost and the problems worth fixing.

Pure functions over listed definitions (JSON as the server sent it). The rules are the ones
providers enforce or that visibly hurt tool selection: a name OpenAI or Anthropic refuse, a
description too thin to choose by, parameters nobody explained, names two servers of one
conversation share, and more tools than a provider accepts in one request.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from conversations import counting

# Both OpenAI function names and Anthropic tool names: letters, digits, '_' and '-', 1-64 long.
PROVIDER_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
PROVIDER_NAME_LIMIT = 64
PROVIDER_TOOL_LIMIT = 128
THIN_DESCRIPTION_WORDS = 4
TOKEN_ENCODING = counting.TOOL_ENCODING


@dataclass(frozen=True)
class Finding:
    level: str  # "error": a provider refuses it; "warning": a model is likely to misuse it
    message: str


@dataclass
class ToolReport:
    """One tool definition, ready to show: its parts, its cost and its findings."""

    name: str
    title: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None
    annotations: dict[str, Any]
    tokens: int | None
    task_support: str = ""
    findings: list[Finding] = field(default_factory=list)

    @property
    def errors(self) -> int:
        return sum(1 for finding in self.findings if finding.level == "error")

    @property
    def warnings(self) -> int:
        return sum(1 for finding in self.findings if finding.level == "warning")


def undescribed_parameters(schema: Any, prefix: str = "") -> list[str]:
    """Parameter paths (nested objects included) that carry no description."""
    if not isinstance(schema, dict):
        return []
    missing: list[str] = []
    properties = schema.get("properties")
    for name, sub in properties.items() if isinstance(properties, dict) else []:
        path = f"{prefix}{name}"
        if not isinstance(sub, dict) or not str(sub.get("description") or "").strip():
            missing.append(path)
        missing.extend(undescribed_parameters(sub, f"{path}."))
        items = sub.get("items") if isinstance(sub, dict) else None
        missing.extend(undescribed_parameters(items, f"{path}[]."))
    return missing


def lint_tool(tool: Mapping[str, Any], *, server_name: str) -> list[Finding]:
    """The problems of one definition on its own."""
    findings: list[Finding] = []
    name = str(tool.get("name", ""))
    if len(name) > PROVIDER_NAME_LIMIT:
        findings.append(
            Finding("error", f"the name is {len(name)} characters: OpenAI and Anthropic accept at most 64")
        )
    elif not PROVIDER_NAME_RE.match(name):
        bad = sorted({c for c in name if not re.match(r"[A-Za-z0-9_-]", c)})
        findings.append(
            Finding(
                "error",
                f"the name has characters OpenAI and Anthropic refuse: {' '.join(repr(c) for c in bad)}",
            )
        )
    prefixed = len(server_name) + 2 + len(name)
    if len(name) <= PROVIDER_NAME_LIMIT < prefixed:
        findings.append(
            Finding(
                "warning",
                f"with the server prefix the provider name is {prefixed} characters: it is cut and hashed",
            )
        )
    description = str(tool.get("description") or "").strip()
    if not description:
        findings.append(Finding("warning", "no description: a model has only the name to choose by"))
    elif len(description.split()) < THIN_DESCRIPTION_WORDS:
        findings.append(Finding("warning", f"thin description ({len(description.split())} words)"))
    schema = tool.get("inputSchema")
    schema = schema if isinstance(schema, dict) else {}
    undescribed = undescribed_parameters(schema)
    if undescribed:
        findings.append(Finding("warning", "parameters without a description: " + ", ".join(undescribed)))
    properties = schema.get("properties")
    if isinstance(properties, dict) and properties and not schema.get("required"):
        findings.append(Finding("warning", "no 'required' list: every parameter is optional to the model"))
    if task_support(tool) == "required":
        findings.append(
            Finding(
                "warning",
                "runs only as a task (execution.taskSupport 'required'): a client without task support — "
                "most agent loops, this inspector's included — gets an error for every call",
            )
        )
    return findings


def task_support(tool: Mapping[str, Any]) -> str:
    """``execution.taskSupport`` as declared (``required``, ``optional``, ``forbidden``), or ""."""
    execution = tool.get("execution")
    value = execution.get("taskSupport") if isinstance(execution, dict) else None
    return value if isinstance(value, str) else ""


@dataclass(frozen=True)
class Neighbourhood:
    """The other servers of one conversation this server is in, and their tool names."""

    conversation: str
    tools_by_server: Mapping[str, Sequence[str]]


def lint_catalog(
    tools: Sequence[Mapping[str, Any]], *, server_name: str, neighbourhoods: Sequence[Neighbourhood] = ()
) -> tuple[list[ToolReport], list[Finding]]:
    """Reports for each tool, and findings about the list as a whole."""
    reports: list[ToolReport] = []
    # Counted as a conversation counts them: one way of counting everywhere.
    counts = counting.catalog_tokens(tools, server_name=server_name, encoding=TOKEN_ENCODING)
    for tool, tokens in zip(tools, counts, strict=True):
        reports.append(
            ToolReport(
                name=str(tool.get("name", "")),
                title=str(tool.get("title") or (tool.get("annotations") or {}).get("title") or ""),
                description=str(tool.get("description") or ""),
                input_schema=dict(tool.get("inputSchema") or {}),
                output_schema=tool.get("outputSchema")
                if isinstance(tool.get("outputSchema"), dict)
                else None,
                annotations=dict(tool.get("annotations") or {}),
                tokens=tokens,
                task_support=task_support(tool),
                findings=lint_tool(tool, server_name=server_name),
            )
        )
    overall: list[Finding] = []
    names = [report.name for report in reports]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        overall.append(
            Finding("error", "the server lists these names more than once: " + ", ".join(duplicates))
        )
    if len(reports) > PROVIDER_TOOL_LIMIT:
        overall.append(
            Finding(
                "error",
                f"{len(reports)} tools: providers accept at most {PROVIDER_TOOL_LIMIT} in one request",
            )
        )
    by_name = {report.name: report for report in reports}
    for hood in neighbourhoods:
        total = len(reports) + sum(len(names) for names in hood.tools_by_server.values())
        if total > PROVIDER_TOOL_LIMIT:
            overall.append(
                Finding(
                    "error",
                    f"conversation {hood.conversation!r}: {total} tools with its other servers; "
                    f"providers accept at most {PROVIDER_TOOL_LIMIT}",
                )
            )
        for other, other_names in hood.tools_by_server.items():
            for name in sorted(set(other_names) & set(by_name)):
                by_name[name].findings.append(
                    Finding(
                        "warning",
                        f"server {other!r} also has a tool named {name!r} (conversation {hood.conversation!r}); "
                        "a model sees them only by their prefixed names",
                    )
                )
    return reports, overall
