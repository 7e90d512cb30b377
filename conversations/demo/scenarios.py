"""The scenarios: ``[demo:…]`` switches in the user's question that make the demo misbehave on
purpose (:data:`MARKERS` lists them for the UI and the docs).

Content misbehaviours (:data:`MISBEHAVIOURS`) change the first call of a first decision; form
misbehaviours (:data:`FLAWS`) are applied by each format's writer in
:mod:`conversations.demo.conventions`. The refusals and the HTTP 500 are answered by
:func:`conversations.demo.model.complete`; the delays are applied by the HTTP views.

Pure Python: no Django, no I/O, no randomness.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import replace

from conversations.demo.arguments import required_names
from conversations.demo.request import Call, Tool, dump
from conversations.typealias import JSONValue

SLOW_MARKER_CAP_SECONDS = 30.0
DRIP_MARKER_CAP_SECONDS = 2.0

MARKERS: Mapping[str, str] = {
    "[demo:malformed-json]": "the first tool call is cut short: invalid JSON arguments (native), "
    "a JSON reply without its closing brackets, an XML block without its closing tags",
    "[demo:unknown-tool]": "the first tool call names a tool that was not offered",
    "[demo:missing-argument]": "the first tool call leaves out a required argument",
    "[demo:code-fence]": "the call is wrapped in a ```xml / ```json code fence (native: written as "
    "fenced JSON text instead of tool_calls)",
    "[demo:no-tool]": "answer in text even when a tool fits",
    "[demo:no-native-tools]": "refuse any request with native 'tools' (400, as Ollama does for a model "
    "without tool support)",
    "[demo:no-structured]": "refuse a json_schema response_format (400)",
    "[demo:http-500]": "fail with HTTP 500 on every request for this question",
    "[demo:slow=SECONDS]": "wait SECONDS (at most 30) before answering; applied by the HTTP view",
    "[demo:drip=SECONDS]": "when streaming, wait SECONDS (at most 2) between events, so the reply "
    "visibly grows; applied by the HTTP view",
}


# --- Misbehaving on request ----------------------------------------------------------------


def _drop_required_argument(call: Call, tool: Tool, offered: frozenset[str]) -> Call:
    parsed: JSONValue = json.loads(call.arguments)
    if not isinstance(parsed, dict) or not parsed:
        return call
    victim = next((name for name in required_names(tool) if name in parsed), next(iter(parsed)))
    del parsed[victim]
    return replace(call, arguments=dump(parsed))


def truncate_arguments(call: Call) -> Call:
    # Any proper prefix of a JSON object is invalid JSON, as a cut-off stream would be.
    return replace(call, arguments=call.arguments[: max(1, len(call.arguments) * 2 // 3)])


def _misname_tool(call: Call, tool: Tool, offered: frozenset[str]) -> Call:
    prefix, separator, bare = call.name.rpartition("__")
    for candidate in (*_misspellings(bare), f"{bare}_v2", f"{bare}_v3"):
        name = f"{prefix}{separator}{candidate}"
        if name not in offered:
            return replace(call, name=name)
    return replace(call, name=f"{call.name}_unknown")


def _misspellings(word: str) -> list[str]:
    """Typos a model might make: drop the second of two vowels ("weather" → "wether"), or the
    last inner vowel ("calculate" → "calculte")."""
    typos = [re.sub(r"([aeiou])[aeiou]", r"\1", word, count=1)]
    inner = [index for index, char in enumerate(word[:-1]) if char in "aeiou"]
    if inner:
        typos.append(word[: inner[-1]] + word[inner[-1] + 1 :])
    return [typo for typo in typos if typo != word]


# Applied in this order to the first call of the first decision after the user's message.
MISBEHAVIOURS: dict[str, Callable[[Call, Tool, frozenset[str]], Call]] = {
    "missing-argument": _drop_required_argument,
    "unknown-tool": _misname_tool,
}
# Misbehaviours of form rather than content: each format's writer applies them its own way.
FLAWS = frozenset({"malformed-json", "code-fence"})
