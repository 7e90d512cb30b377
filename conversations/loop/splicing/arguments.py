"""Tool-call arguments in history, as each engine hands them to its chat template.

The wire carries a call's ``arguments`` as a JSON string. Engines differ (docs/chat-templates.md
§3):

* ``object`` — vLLM (and SGLang) parse it into an object before rendering; empty arguments
  become ``{}``.
* ``string`` — transformers' ``apply_chat_template`` passes the messages as given: the wire's
  string.
* ``llama.cpp`` — the string, unless the template reads the arguments as an object (llama.cpp
  finds out by rendering a probe conversation); then parsed.

Pure Python: no Django, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from conversations.typealias import JSONDict, JSONValue

__all__ = [
    "ARGUMENT_MODES",
    "ARGUMENT_MODE_LABELS",
    "reads_object_arguments",
    "rewritten_arguments",
    "setting_note",
    "template_messages",
]

ARGUMENT_MODES = ("object", "string", "llama.cpp")
# For a profile's setting that overrides the engine's own way (choices of a form field).
ARGUMENT_MODE_LABELS = (
    ("object", "an object, parsed from the wire's string (vLLM, SGLang)"),
    ("string", "the wire's JSON string (transformers)"),
    ("llama.cpp", "as llama.cpp's probe of the template decides"),
)
_WIRE_STRING = "the wire's JSON string"


def setting_note(mode: str, *, parses: bool) -> str:
    """How a profile's arguments setting (one of :data:`ARGUMENT_MODES`) passed the arguments,
    for the prompt's source line; ``parses`` is whether the template got them parsed."""
    if mode == "llama.cpp":
        how = f"as llama.cpp's probe decides: {'an object' if parses else _WIRE_STRING}"
    else:
        how = "an object (parsed from the wire's string)" if parses else _WIRE_STRING
    return f"tool-call arguments: {how} (the profile's setting)"


def _as_object(arguments: JSONValue) -> JSONValue:
    """vLLM's conversion: a JSON string is parsed (into whatever it holds), empty arguments are
    ``{}``. A string that does not parse stays as it is (vLLM would refuse the request; the text
    shows what the model wrote)."""
    if arguments is None or arguments == "":
        return {}
    if not isinstance(arguments, str):
        return arguments
    try:
        parsed: JSONValue = json.loads(arguments)
    except ValueError:
        return arguments
    return parsed


def _call(call: JSONValue) -> JSONValue:
    if not isinstance(call, dict):
        return call
    function = call.get("function")
    if not isinstance(function, dict) or "arguments" not in function:
        return call
    return {**call, "function": {**function, "arguments": _as_object(function["arguments"])}}


def template_messages(messages: Sequence[JSONDict], *, parse: bool) -> list[JSONDict]:
    """``messages`` with tool-call arguments parsed when ``parse``; the caller's stay untouched.

    Only the dicts and lists on the way to a call's ``arguments`` are copied: everything else is
    shared with the caller, which is safe because the sandbox is immutable (a template cannot
    change a list or dict it is given). A deep copy of the whole history cost more than the
    rendering at every step of a long turn.
    """
    if not parse:
        return list(messages)
    prepared: list[JSONDict] = []
    for message in messages:
        calls = message.get("tool_calls")
        if isinstance(calls, list):
            message = {**message, "tool_calls": [_call(call) for call in calls]}
        prepared.append(message)
    return prepared


class _Watched(dict[str, JSONValue]):
    """A dict that remembers whether a template read into it (a key, its items, its JSON)."""

    def __init__(self, **values: JSONValue) -> None:
        super().__init__(**values)
        self.read = False

    def __getitem__(self, key: str) -> JSONValue:
        self.read = True
        return super().__getitem__(key)

    def get(self, key: str, default: JSONValue = None) -> JSONValue:  # type: ignore[override]
        self.read = True
        return super().get(key, default)

    def items(self) -> Any:
        self.read = True
        return super().items()

    def values(self) -> Any:
        self.read = True
        return super().values()

    def __iter__(self) -> Iterator[str]:
        self.read = True
        return super().__iter__()


def reads_object_arguments(render: Callable[[list[JSONDict], list[JSONDict]], str]) -> bool:
    """Whether a template reads a call's arguments as an object, as llama.cpp decides it.

    llama.cpp renders a probe conversation (a user turn, an assistant call to ``tool1`` with
    arguments ``{"arg": …}``, its result, an answer) and parses arguments for every request
    when the template used ``arguments.arg`` — read, iterated or serialised (``tojson``).
    ``render(messages, tools)`` renders the template; a probe that fails decides nothing (False).
    """
    arguments = _Watched(arg="Argument value")
    messages: list[JSONDict] = [
        {"role": "user", "content": "User message"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call00001",
                    "type": "function",
                    "function": {"name": "tool1", "arguments": arguments},
                }
            ],
        },
        {"role": "tool", "content": "Tool response", "tool_call_id": "call00001"},
        {"role": "assistant", "content": "The tool response was 'tool response'"},
        {"role": "user", "content": "User message"},
    ]
    tools: list[JSONDict] = [
        {
            "name": "tool",
            "type": "function",
            "function": {
                "name": "tool1",
                "description": "Tool description",
                "parameters": {
                    "type": "object",
                    "properties": {"arg": {"type": "string", "description": "Arg description"}},
                    "required": ["arg"],
                },
            },
        }
    ]
    try:
        render(messages, tools)
    except Exception:  # noqa: BLE001 — a probe the template refuses tells nothing
        return False
    return arguments.read


def rewritten_arguments(messages: Sequence[JSONDict], text: str) -> int:
    """How many history calls the template printed (their name is in ``text``) without their
    arguments as the model wrote them.

    A template given parsed arguments writes its own JSON (``{"city": "Paris"}`` where the model
    wrote ``{"city":"Paris"}``): the prompt is what the engine renders, but not the model's text.
    """
    count = 0
    for message in messages:
        calls = message.get("tool_calls")
        for call in calls if isinstance(calls, list) else []:
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict):
                continue
            arguments, name = function.get("arguments"), function.get("name")
            # A call the template does not print at all (not even its name) was not re-serialised.
            shown = isinstance(name, str) and name in text
            if shown and isinstance(arguments, str) and arguments.strip() and arguments not in text:
                count += 1
    return count
