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

__all__ = ["Render", "Variants", "removed_inside", "removed_span", "spliced_pieces"]

# render(messages, tools) → the prompt text, with the same template and options as the prompt.
Render = Callable[[list[JSONDict], list[JSONDict]], str]


class Variants(Protocol):
    """What one prompt loses with one change, each the :func:`removed_span` of the prompt and its
    rendering with the changed lists. A ``render`` that can find them without rendering the
    whole prompt again offers them as ``render.variants(messages, tools)`` (None: not for this
    prompt)."""

    def tool_piece(self, index: int) -> str:
        """What the prompt loses without ``tools[index]``."""
        ...

    def message_piece(self, index: int, replacement: JSONDict | None) -> str:
        """What it loses with ``messages[index]`` left out (``replacement`` None) or replaced."""
        ...


def removed_span(full: str, without: str) -> str:
    """The text of ``full`` that ``without`` lacks: what lies between their common prefix and
    their common suffix (the suffix never overlapping the prefix)."""
    limit = min(len(full), len(without))
    prefix = common_prefix_length(full, without, limit)
    suffix = common_suffix_length(full, without, limit - prefix)
    return full[prefix : len(full) - suffix]


def removed_inside(part: str, changed: str) -> str | None:
    """:func:`removed_span` of any ``before + part + after`` and ``before + changed + after``,
    found from ``part`` and ``changed`` alone — or None when that cannot be decided without the
    rest: the shorter is how the longer begins, so where the whole texts first differ depends on
    what follows.

    When they first differ inside both, the whole texts' common prefix is ``before`` and the
    prefix the two share. Their common suffix is ``after`` and the suffix the two share, limited
    as :func:`removed_span` limits it (to what the prefix leaves of the shorter text): a suffix
    that reaches into ``before`` is cut back to that limit all the same."""
    limit = min(len(part), len(changed))
    prefix = common_prefix_length(part, changed, limit)
    if prefix == limit:
        return None
    suffix = common_suffix_length(part, changed, limit - prefix)
    return part[prefix : len(part) - suffix]


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
                piece = variants.tool_piece(index)
            else:
                piece = removed_span(full, render(messages, tools[:index] + tools[index + 1 :]))
        except Exception:  # noqa: BLE001 — a template refusing the variant: count the definition
            tool_texts[_tool_name(tool)] = json.dumps(tool, ensure_ascii=False)
        else:
            tool_texts[_tool_name(tool)] = piece
    result_texts: list[str] = []
    for index, message in enumerate(messages):
        if message.get("role") != "tool":
            continue
        for replacement in (None, {**message, "content": ""}):
            try:
                if variants is not None:
                    piece = variants.message_piece(index, replacement)
                else:
                    kept = [replacement] if replacement is not None else []
                    piece = removed_span(full, render(messages[:index] + kept + messages[index + 1 :], tools))
            except Exception:  # noqa: BLE001 — try the next, milder variant
                continue
            result_texts.append(piece)
            break
        else:
            content = message.get("content")
            result_texts.append(content if isinstance(content, str) else json.dumps(content))
    return tool_texts, result_texts
