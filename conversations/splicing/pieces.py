"""The text a template splices for each tool definition and each tool result, by difference.

A template wraps what it splices (Llama 3.x prints each tool with ``tojson(indent=4)`` and a
result as a whole ``ipython`` turn), so a piece's cost is not its own JSON. Each piece is found
by rendering the prompt without it: what the two renderings do not share is the text the piece
brought in (docs/chat-templates.md §4). Pure Python: no Django, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from conversations.typealias import JSONDict

__all__ = ["Render", "removed_span", "spliced_pieces"]

# render(messages, tools) → the prompt text, with the same template and options as the prompt.
Render = Callable[[list[JSONDict], list[JSONDict]], str]


def _common_prefix(a: str, b: str) -> int:
    """Length of the common prefix, by bisection over slice comparisons (done in C: prompts are
    hundreds of kilobytes and a piece is looked for at every step)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def removed_span(full: str, without: str) -> str:
    """The text of ``full`` that ``without`` lacks: what lies between their common prefix and
    their common suffix (the suffix never overlapping the prefix)."""
    prefix = _common_prefix(full, without)
    rest_full, rest_without = full[prefix:], without[prefix:]
    suffix = _common_prefix(rest_full[::-1], rest_without[::-1])
    return rest_full[: len(rest_full) - suffix]


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
    tool_texts: dict[str, str] = {}
    for index, tool in enumerate(tools):
        try:
            without = render(messages, tools[:index] + tools[index + 1 :])
        except Exception:  # noqa: BLE001 — a template refusing the variant: count the definition
            tool_texts[_tool_name(tool)] = json.dumps(tool, ensure_ascii=False)
        else:
            tool_texts[_tool_name(tool)] = removed_span(full, without)
    result_texts: list[str] = []
    for index, message in enumerate(messages):
        if message.get("role") != "tool":
            continue
        variants = (
            messages[:index] + messages[index + 1 :],
            messages[:index] + [{**message, "content": ""}] + messages[index + 1 :],
        )
        for variant in variants:
            try:
                without = render(variant, tools)
            except Exception:  # noqa: BLE001 — try the next, milder variant
                continue
            result_texts.append(removed_span(full, without))
            break
        else:
            content = message.get("content")
            result_texts.append(content if isinstance(content, str) else json.dumps(content))
    return tool_texts, result_texts
