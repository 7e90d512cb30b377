"""Tool-definition overrides: a conversation may offer its MCP tools with other descriptions.

An eval's description *variant* (``evals``) rewords a tool's description and its parameters'
descriptions to A/B test the wording — the tool definitions are part of the prompt. The runner
asks ``tool_overrides_for(conversation)`` when its turn connects and splices the reworded text
(``tools_overridden``) before anything is offered, so every paradigm reads it, the turn's
``tools`` and the request bodies record it, and the ``connect`` step says what was changed.

Imports run one way (docs/ARCHITECTURE.md, Import layering): the app that keeps overrides
registers a source here when Django starts (``evals.apps``). Like the loop, this module loads no
framework.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from conversations.loop.llm import ToolDef
from conversations.typealias import JSONDict, JSONValue

if TYPE_CHECKING:
    from conversations.models import Conversation

# By "server/tool": {"description": str, "parameters": {parameter name: description}}.
Overrides = Mapping[str, JSONDict]
OverrideSource = Callable[["Conversation"], Overrides]

_sources: list[OverrideSource] = []


def override_source_register(source: OverrideSource) -> None:
    """Have ``tool_overrides_for`` ask ``source`` too (once, however often it is registered)."""
    if source not in _sources:
        _sources.append(source)


def tool_overrides_for(conversation: Conversation) -> dict[str, JSONDict]:
    """The overrides the conversation's tools get, merged over every registered source (a later
    source wins for the same tool); empty for an ordinary conversation."""
    merged: dict[str, JSONDict] = {}
    for source in _sources:
        merged.update(source(conversation))
    return merged


def tools_overridden(tools: Sequence[ToolDef], overrides: Overrides) -> tuple[list[ToolDef], list[str]]:
    """``tools`` with the overridden descriptions spliced in, and one note per tool changed.

    A parameter the override names but the tool's ``inputSchema`` lacks is left out (the note
    says so): an override rewords a definition, it never adds to it.
    """
    changed: list[ToolDef] = []
    notes: list[str] = []
    for tool in tools:
        override = overrides.get(f"{tool.server_name}/{tool.name}")
        if not override:
            changed.append(tool)
            continue
        description = override.get("description")
        parameters = override.get("parameters")
        schema: JSONDict = copy.deepcopy(tool.input_schema)
        properties = schema.get("properties")
        reworded: list[str] = []
        missing: list[str] = []
        if isinstance(parameters, dict):
            for name, text in parameters.items():
                if isinstance(properties, dict) and isinstance(properties.get(name), dict):
                    prop = properties[name]
                    assert isinstance(prop, dict)
                    prop["description"] = _text(text)
                    reworded.append(name)
                else:
                    missing.append(name)
        new = replace(
            tool,
            description=_text(description) if description is not None else tool.description,
            input_schema=schema,
        )
        changed.append(new)
        parts = (["description"] if description is not None else []) + [
            f"parameter {name}" for name in reworded
        ]
        note = f"{tool.server_name}/{tool.name}: overridden for this conversation ({', '.join(parts) or 'nothing'})"
        if missing:
            note += f"; no such parameter: {', '.join(missing)}"
        notes.append(note)
    return changed, notes


def _text(value: JSONValue) -> str:
    return value if isinstance(value, str) else ""
