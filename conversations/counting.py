"""One way of counting what a model receives, for every page that shows a count.

A tool's definition is counted as the text a conversation splices for it: the OpenAI-shaped
function definition the providers send (``conversations.loop.providers.openai_chat.wire_tool``), as
the Hermes-style templates put it in a prompt (``conversations.loop.splicing.templates.tool_texts``).
The server page counts it so too — under the name a conversation sends (``<server>__<tool>``) and
:data:`TOOL_ENCODING` (it has no model to choose a tokenizer by), which is also the demo model's
stand-in encoding — so the same tool counts the same on the server page and in a demo
conversation (docs/teaching.md §6).

A paradigm that writes its tools into the prompt (prompt_json, prompt_xml, intent) says what it
wrote for each (``ModelRequest.tool_texts``); those texts are the tools' counts
(:func:`prompt_tools_counted`), so every paradigm's tool definitions have a count and a cost.

A structured-output request sends a schema (``response_format``) besides its messages; the
model reads it, so the prompt's count includes it (:func:`with_response_format`). Its tools are
itemised like the others': the structured paradigm says what the request carries of each tool —
its line in the system prompt and its branch of the schema — in ``ModelRequest.tool_texts``, so
each tool has a count and a cost (the schema's wrapper and its final-answer branch are no tool's).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from conversations.loop.llm import ToolDef, provider_tool_names
from conversations.loop.providers.openai_chat import wire_tool
from conversations.loop.splicing import Spliced, count_tokens
from conversations.loop.splicing.templates import tool_texts
from conversations.typealias import JSONDict

TOOL_ENCODING = "o200k_base"
RESPONSE_FORMAT = "response_format"


def tool_definition_text(tool: Mapping[str, Any], provider_name: str = "") -> str:
    """An MCP tool definition (``name``, ``description``, ``inputSchema``) as a prompt splices it,
    under ``provider_name`` (the name a conversation sends; default the tool's own)."""
    name = provider_name or str(tool.get("name") or "")
    definition = ToolDef(
        server_id=0,
        server_name="",
        name=str(tool.get("name") or ""),
        provider_name=name,
        description=str(tool.get("description") or ""),
        input_schema=dict(tool.get("inputSchema") or {}),
    )
    return tool_texts([wire_tool(definition)])[name]


def tool_tokens(
    tool: Mapping[str, Any], provider_name: str = "", encoding: str = TOOL_ENCODING
) -> int | None:
    """Tokens of :func:`tool_definition_text`; None when the tokenizer fails."""
    try:
        return count_tokens(tool_definition_text(tool, provider_name), encoding)
    except Exception:  # noqa: BLE001 — a tokenizer failure hides the count, not the definition
        return None


def catalog_tokens(
    tools: Sequence[Mapping[str, Any]], *, server_name: str, encoding: str = TOOL_ENCODING
) -> list[int | None]:
    """Each tool of one server's catalog counted as a conversation with that server sends it:
    under its provider name ``<server>__<tool>`` (:func:`conversations.loop.llm.provider_tool_names`)."""
    names = provider_tool_names([(server_name, str(tool.get("name") or "")) for tool in tools])
    return [tool_tokens(tool, name, encoding) for tool, name in zip(tools, names, strict=True)]


def definitions_counted(spliced: Spliced, tools: Sequence[JSONDict]) -> Spliced:
    """``spliced`` with each tool counted as its definition's text when the rendering is not the
    model's own (illustrative): what such a rendering puts between definitions says nothing of
    the model, so the count is the one the server page shows. A model's real template keeps the
    count of what it splices (the text the prompt loses without the tool)."""
    report = spliced.tokens
    if spliced.exact or not tools or report.encoding is None or not report.tools:
        return spliced
    try:
        counts = {name: count_tokens(text, report.encoding) for name, text in tool_texts(tools).items()}
    except Exception:  # noqa: BLE001 — keep the report as it was
        return spliced
    note = f"{report.note}; each tool: its JSON definition, as the server page counts it"
    return replace(spliced, tokens=replace(report, tools=counts, note=note))


def prompt_tools_counted(spliced: Spliced, texts: Mapping[str, str]) -> Spliced:
    """``spliced`` with each tool counted as the text its paradigm wrote for it into the prompt
    (``texts``, by name): part of the prompt's count, listed apart as the tool's definition."""
    report = spliced.tokens
    if not texts or report.encoding is None or report.prompt is None:
        return spliced
    try:
        counts = {name: count_tokens(text, report.encoding) for name, text in texts.items()}
    except Exception:  # noqa: BLE001 — keep the report as it was
        return spliced
    note = f"{report.note}; each tool: the text the paradigm writes for it into the request"
    return replace(spliced, tokens=replace(report, tools={**report.tools, **counts}, note=note))


def with_response_format(spliced: Spliced, response_format: JSONDict | None) -> Spliced:
    """``spliced`` with the structured-output schema the request sends counted into its prompt."""
    report = spliced.tokens
    if not response_format or report.encoding is None or report.prompt is None:
        return spliced
    try:
        schema = count_tokens(json.dumps(response_format, ensure_ascii=False), report.encoding)
    except Exception:  # noqa: BLE001 — as a failed count elsewhere: no count rather than a wrong one
        return spliced
    note = f"{report.note}; the prompt includes the {RESPONSE_FORMAT} schema the request sends ({schema})"
    if report.tools:
        note += f" (each tool's text: its line in the prompt and its branch of the {RESPONSE_FORMAT} schema)"
    return replace(spliced, tokens=replace(report, prompt=report.prompt + schema, note=note))


def _messages(body: str) -> list[Any]:
    """The JSON-RPC messages of a recorded body: one JSON document, or an event stream's
    ``data:`` lines."""
    try:
        return [json.loads(body)]
    except (ValueError, RecursionError):  # RecursionError: a server's JSON nested thousands deep
        pass
    found: list[Any] = []
    for line in body.splitlines():
        if line.startswith("data:"):
            try:
                found.append(json.loads(line[5:]))
            except (ValueError, RecursionError):
                continue
    return found


def tools_as_sent(items: Sequence[Mapping[str, Any]], bodies: Iterable[str]) -> list[Mapping[str, Any]]:
    """The listed tools with their members in the order the server sent them.

    A stored listing may have lost that order (PostgreSQL's ``jsonb`` orders an object's keys);
    a conversation sends a definition as the server wrote it, and key order changes a count. The
    recorded ``tools/list`` response bodies keep it: a tool found there is taken from there.
    """
    sent: dict[str, Mapping[str, Any]] = {}
    for body in bodies:
        for message in _messages(body):
            result = message.get("result") if isinstance(message, dict) else None
            tools = result.get("tools") if isinstance(result, dict) else None
            for tool in tools if isinstance(tools, list) else []:
                if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                    sent.setdefault(tool["name"], tool)
    return [sent.get(str(item.get("name")), item) for item in items]
