"""The text a template splices for each tool definition and each tool result, by difference.

A template wraps what it splices (Llama 3.x prints each tool with ``tojson(indent=4)`` and a
result as a whole ``ipython`` turn), so a piece's cost is not its own JSON. Each piece is found
by rendering the prompt without it: what the two renderings do not share is the text the piece
brought in (docs/chat-templates.md §4). Pure Python: no Django, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Protocol

from conversations.strings import common_prefix_length, common_suffix_length
from conversations.typealias import JSONDict

__all__ = ["Render", "Variants", "removed_span", "spliced_pieces"]

# render(messages, tools) → the prompt text, with the same template and options as the prompt.
Render = Callable[[list[JSONDict], list[JSONDict]], str]


class Variants(Protocol):
    """One prompt's renderings with one change each, as ``render`` would make them from the
    changed lists. A ``render`` that can make them without rendering the whole prompt again
    offers them as ``render.variants(messages, tools)`` (None: not for this prompt)."""

    def without_tool(self, index: int) -> str: ...

    def with_message(self, index: int, replacement: JSONDict | None) -> str: ...


def removed_span(full: str, without: str) -> str:
    """The text of ``full`` that ``without`` lacks: what lies between their common prefix and
    their common suffix (the suffix never overlapping the prefix)."""
    limit = min(len(full), len(without))
    prefix = common_prefix_length(full, without, limit)
    suffix = common_suffix_length(full, without, limit - prefix)
    return full[prefix : len(full) - suffix]


def _tool_name(tool: JSONDict) -> str:
    function = tool.get("function")
    if isinstance(function, dict) and isinstance(function.get("name"), str):
        return str(function["name"])
    return str(tool.get("name", "?"))


def spliced_pieces(
    render: Render, full: str, messages: Sequence[JSONDict], tools: Sequence[JSONDict]
) -> tuple[dict[str, str], list[str]]:
    """``(tool texts by name, result texts in order)`` as ``render`` splices them into ``full``.

    A tool's text is what the prompt loses without that tool. A result's text is what it loses
    without that tool message; a template that refuses the shorter history (roles must
    alternate…) is asked again with the result's content emptied, and failing that the
    result's own text is counted.
    """
    messages, tools = list(messages), list(tools)
    offered: Callable[[list[JSONDict], list[JSONDict]], Variants | None] | None = getattr(
        render, "variants", None
    )
    variants = offered(messages, tools) if offered is not None else None
    tool_texts: dict[str, str] = {}
    for index, tool in enumerate(tools):
        try:
            if variants is not None:
                without = variants.without_tool(index)
            else:
                without = render(messages, tools[:index] + tools[index + 1 :])
        except Exception:  # noqa: BLE001 — a template refusing the variant: count the definition
            tool_texts[_tool_name(tool)] = json.dumps(tool, ensure_ascii=False)
        else:
            tool_texts[_tool_name(tool)] = removed_span(full, without)
    result_texts: list[str] = []
    for index, message in enumerate(messages):
        if message.get("role") != "tool":
            continue
        for replacement in (None, {**message, "content": ""}):
            try:
                if variants is not None:
                    without = variants.with_message(index, replacement)
                else:
                    kept = [replacement] if replacement is not None else []
                    without = render(messages[:index] + kept + messages[index + 1 :], tools)
            except Exception:  # noqa: BLE001 — try the next, milder variant
                continue
            result_texts.append(removed_span(full, without))
            break
        else:
            content = message.get("content")
            result_texts.append(content if isinstance(content, str) else json.dumps(content))
    return tool_texts, result_texts
