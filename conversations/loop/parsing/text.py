"""What every reader shares: the result types, and the text around the calls.

:class:`ParsedCall` and :class:`ParseResult`; reasoning blocks set aside, code fences and chat-UI
copy artefacts stripped where they touch a call, invented tool results recognised, the prose left
over; the wording of diagnostics about tools; and :func:`guarded`, which keeps a reader's "never
raises" promise even against its own bugs.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from conversations.typealias import JSONDict


@dataclass
class ParsedCall:
    """One call read from a reply.

    ``arguments`` is ``None`` when the arguments could not be made into an object.
    ``arguments_text`` is where they came from: the raw ``<invoke>`` body for XML, the JSON
    string (or the object re-serialised as read, before schema coercion) for JSON.
    """

    name: str
    arguments: JSONDict | None
    arguments_text: str


@dataclass
class ParseResult:
    """The calls in a reply, its prose outside them (stripped), and what the reader tolerated."""

    calls: list[ParsedCall]
    text: str
    diagnostics: list[str]


_CLIP = 60
# Some models write namespaced tags (`<ns:invoke>`); accept any prefix.
NS = r"(?:[A-Za-z_][\w.-]*:)?"
_THINK_BLOCK = re.compile(r"<(think|thinking|reasoning)\b[^<>]*>(.*?)(?:</\1\s*>|\Z)", re.I | re.S)
_THINK_CLOSE = re.compile(r"</(?:think|thinking|reasoning)\s*>", re.I)
INVENTED_RESULT = re.compile(
    rf"<{NS}(?:function_results?|function_outputs?|tool_results?|tool_use_results?"
    rf"|tool_responses?|tool_outputs?)\b",
    re.I,
)
# The JSON convention splices results back as "Tool execution result: …" (simple-chatbot).
INVENTED_RESULT_LINE = re.compile(r"^[ \t]*tool (?:execution )?result\s*:", re.I | re.M)
_FENCE_LANGS = ("xml", "jsonl", "json", "json5", "javascript", "js", "python", "text", "plaintext")
# What may sit right before a call when it was fenced or pasted from a chat UI: "```xml", "~~~",
# "xml Copy code", or a bare language tag on its own line, several in a row. They are read in one
# pass backwards from the call, so this pattern is matched against the reversed prose and spells
# each one backwards; each alternative is where the nearest opener starts when it matches.
_LANGS_BACKWARDS = "|".join(name[::-1] for name in _FENCE_LANGS)
_FENCE_BEFORE_BACKWARDS = re.compile(
    rf"""(?:\s*+(?:
        [\w+.-]*+[ \t]*+(?:```|~~~)                          # ```xml
      | (?:{_LANGS_BACKWARDS})[ \t]*+(?=\n|\Z)               # xml, alone on its line
      | edoc[ \t]*+ypoc(?:[ \t]*+(?:{_LANGS_BACKWARDS})\b)?   # xml Copy code
    ))*+""",
    re.I | re.X,
)
_FENCE_AFTER = re.compile(r"\A\s*(?:```|~~~)[ \t]*(?=\n|\Z)")
# The opening line of a fence around the whole reply; its inside runs to the closing fence, if any.
_WHOLE_FENCE_OPEN = re.compile(r"\A\s*+(?:```|~~~)[ \t]*+[\w+.-]*[ \t]*+(?:copy[ \t]*+code)?[ \t]*+\n", re.I)


def as_text(value: object) -> str:
    """Any input as text: ``None`` is an empty reply, bytes are decoded leniently."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", errors="replace")
    return str(value)


def clip(text: str, limit: int = _CLIP) -> str:
    """``text`` short enough for a diagnostic."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def split_thinking(text: str) -> tuple[str, list[str]]:
    """The reply without its reasoning blocks, and the blocks' contents.

    An unclosed ``<think>`` runs to the end (the reply was cut while reasoning). A lone
    ``</think>`` means the opening tag was in the prompt (R1-style templates), so everything
    before it is reasoning.
    """
    thoughts: list[str] = []

    def set_aside(match: re.Match[str]) -> str:
        thoughts.append(match.group(2))
        return ""

    visible = _THINK_BLOCK.sub(set_aside, text)
    closes = list(_THINK_CLOSE.finditer(visible))
    if closes:
        orphan = closes[-1]
        thoughts.append(visible[: orphan.start()])
        visible = visible[orphan.end() :]
    return visible, thoughts


def thinking_diagnostic(thoughts: list[str], calls_inside: int) -> list[str]:
    if not thoughts:
        return []
    if calls_inside:
        return [
            f"ignored {_plural(calls_inside, 'call')} inside a <think> block: calls in reasoning do not count"
        ]
    return ["set aside a <think> block: reasoning is not part of the answer"]


def _strip_fence_before(prose: str) -> tuple[str, bool]:
    """``prose`` without the fence openers (or chat-UI copy artefacts) that end it."""
    openers = _FENCE_BEFORE_BACKWARDS.match(prose[::-1])
    length = openers.end() if openers else 0
    return prose[: len(prose) - length], length > 0


def _strip_fence_after(prose: str) -> tuple[str, bool]:
    """``prose`` without the fence closer that starts it."""
    match = _FENCE_AFTER.match(prose)
    return (prose[match.end() :], True) if match else (prose, False)


def prose_around(text: str, spans: Sequence[tuple[int, int]], diagnostics: list[str]) -> str:
    """The text outside ``spans``, with fences that only wrapped a call removed.

    Fences are removed only where they touch a call, so a final answer that shows code in a
    fence keeps it.
    """
    parts: list[str] = []
    fenced = False
    pos = 0
    for index, (start, end) in enumerate(spans):
        before = text[pos:start]
        if index:
            before, closed = _strip_fence_after(before)
            fenced |= closed
        before, opened = _strip_fence_before(before)
        fenced |= opened
        parts.append(before)
        pos = max(pos, end)
    after = text[pos:]
    if spans:
        after, closed = _strip_fence_after(after)
        fenced |= closed
    parts.append(after)
    if fenced:
        diagnostics.append("stripped a code fence around the call")
    return "\n\n".join(part.strip() for part in parts if part.strip())


def unfence_whole(text: str) -> tuple[str, bool]:
    """The inside of a fence that wraps the entire reply, else the reply unchanged.

    The inside ends before the trailing whitespace, or before a closing fence that ends the
    reply and the spaces and one line break before it.
    """
    opener = _WHOLE_FENCE_OPEN.match(text)
    if opener is None:
        return text, False
    inside = text[opener.end() :].rstrip()
    if inside.endswith(("```", "~~~")):
        inside = inside[:-3].rstrip(" \t").removesuffix("\n")
    return inside, True


def offered_list(names: Iterable[str], limit: int = 10) -> str:
    shown = list(names)
    if not shown:
        return "none offered"
    more = f", … ({len(shown) - limit} more)" if len(shown) > limit else ""
    return ", ".join(shown[:limit]) + more


def unknown_tool(name: str, schemas: Mapping[str, JSONDict]) -> str:
    hint = difflib.get_close_matches(name, list(schemas), n=1)
    did_you_mean = f"; did you mean '{hint[0]}'?" if hint else ""
    return f"{name}: not among the offered tools (offered: {offered_list(schemas)}){did_you_mean}"


def tool_schema(schemas: Mapping[str, JSONDict], name: str) -> JSONDict | None:
    """The offered tool's schema; ``{}`` for an offered tool whose schema is unusable."""
    if name not in schemas:
        return None
    schema = schemas[name]
    return schema if isinstance(schema, dict) else {}


def guarded(
    parse: Callable[[str, Mapping[str, JSONDict]], ParseResult], text: object, schemas: Mapping[str, JSONDict]
) -> ParseResult:
    """Run a parser so that even a bug in it keeps the reply, as text, and says so."""
    reply = as_text(text)
    offered: Mapping[str, JSONDict] = schemas if isinstance(schemas, Mapping) else {}
    try:
        return parse(reply, offered)
    except Exception as exc:  # noqa: BLE001 — the contract is "never raises"; the raw text must survive
        return ParseResult(
            calls=[],
            text=reply.strip(),
            diagnostics=[f"internal parser error ({type(exc).__name__}); kept the reply as text"],
        )
