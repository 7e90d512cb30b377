"""The text the demo model reads: each request rendered with its chat template, as vLLM renders a
Chat Completions request for an open-weight model, then read back (docs/chat-templates.md §6).

The template is Qwen2.5-7B-Instruct's (:data:`conversations.chat_templates.DEMO_CHAT_TEMPLATE`),
rendered by the same reproduction of transformers' environment the inspector splices prompts
with (:func:`conversations.loop.splicing.render_chat_template`), tool-call arguments parsed into
objects as vLLM parses them. :func:`read_prompt` then reads the messages and the tools out of
that text — ChatML turns, the ``<tools>`` block of the system turn, ``<tool_call>`` and
``<tool_response>`` tags — and the demo decides from those alone, so what the template drops
(call ids, a message's ``name``, a ``developer`` turn) the demo never sees, and what the page
shows as the prompt is what drives its answer.

What a template cannot carry is read from the request, as an engine reads it: ``tool_choice``,
``parallel_tool_calls`` and ``response_format`` (vLLM turns them into guided decoding, not text).

Pure Python: no Django, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace

from conversations.chat_templates import DEMO_CHAT_TEMPLATE
from conversations.demo.request import Call, Message, Request, RequestError, Tool
from conversations.loop.splicing import TemplateError, render_chat_template
from conversations.typealias import JSONDict, JSONValue

_START, _END = "<|im_start|>", "<|im_end|>"
_TOOLS_HEAD = (
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
_TOOLS_TAIL = "\n</tools>\n\nFor each function call, return a json object with function name and arguments"
_CALL_OPEN, _CALL_CLOSE = "<tool_call>\n", "\n</tool_call>"
_ROLES = frozenset({"system", "user", "assistant"})
_RESPONSE_OPEN, _RESPONSE_CLOSE = "<tool_response>\n", "\n</tool_response>"
_RESPONSE_SEPARATOR = "\n</tool_response>\n<tool_response>\n"


def wire_messages(request: Request) -> list[JSONDict]:
    """The request's messages as the template reads them: Chat Completions messages with their
    content as one string (text parts joined by a line break, as vLLM joins them for a template
    that reads content as a string)."""
    messages: list[JSONDict] = []
    for message in request.messages:
        if message.role == "tool":
            messages.append(
                {"role": "tool", "tool_call_id": message.tool_call_id or "", "content": message.text}
            )
        elif message.calls:
            calls: list[JSONValue] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in message.calls
            ]
            messages.append({"role": "assistant", "content": message.text or None, "tool_calls": calls})
        else:
            messages.append({"role": message.role, "content": message.text})
    return messages


def rendered_prompt(raw: Mapping[str, JSONValue], request: Request) -> str:
    """The text the demo reads for ``request`` (``raw``: its body, whose ``tools`` are rendered as
    sent). Raises :class:`RequestError` when the template refuses the request, as vLLM answers
    400 then."""
    tools = raw.get("tools")
    tool_dicts = [tool for tool in tools if isinstance(tool, dict)] if isinstance(tools, list) else []
    try:
        return render_chat_template(
            DEMO_CHAT_TEMPLATE, messages=wire_messages(request), tools=tool_dicts or None, arguments="object"
        )
    except (TemplateError, RecursionError) as error:
        # vLLM answers 400 when its template fails; a value nested too deep to print is one.
        message = f"The chat template could not render this request: {error}"
        raise RequestError(message, param="messages") from error


def read_prompt(text: str) -> tuple[tuple[Message, ...], tuple[Tool, ...]]:
    """The messages and tools a ChatML prompt in the template's form holds. Never raises: text
    out of form is read as a turn's content, as a model reads whatever it is given. Calls get the
    ids ``call_1``, ``call_2``… in order (the text has none), and each ``<tool_response>`` answers
    the call in the same position of the turn before it."""
    messages: list[Message] = []
    tools: tuple[Tool, ...] = ()
    # The calls read so far: each assistant turn's ids go on from them.
    calls = 0
    turns = text.split(_START)[1:]
    for index, turn in enumerate(turns):
        closed = _END in turn
        head, _, _ = turn.partition(_END)
        role, _, body = head.partition("\n")
        if not closed and index == len(turns) - 1 and role == "assistant" and not body:
            break  # the generation prompt: the turn the model writes
        if role == "system" and not messages and _TOOLS_HEAD in body:
            body, tools = _read_tools(body)
        if role == "assistant":
            messages.append(_read_assistant(body, calls_before=calls))
            calls += len(messages[-1].calls)
        elif role == "user" and body.startswith(_RESPONSE_OPEN) and body.endswith(_RESPONSE_CLOSE):
            messages.extend(_read_responses(body, messages))
        elif role in _ROLES:
            messages.append(Message(role, body))
        else:
            # No role this template writes (chat markup inside a message): read as a user's text.
            messages.append(Message("user", head))
    return tuple(messages), tools


def _read_tools(system: str) -> tuple[str, tuple[Tool, ...]]:
    content, _, listing = system.partition(_TOOLS_HEAD)
    lines, _, _ = listing.partition(_TOOLS_TAIL)
    tools: list[Tool] = []
    for line in lines.split("\n"):
        try:
            tool: JSONValue = json.loads(line) if line.strip() else None
        except (ValueError, RecursionError):
            continue
        function = tool.get("function") if isinstance(tool, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if isinstance(function, dict) and isinstance(name, str):
            description = function.get("description")
            parameters = function.get("parameters")
            tools.append(
                Tool(
                    name,
                    description if isinstance(description, str) else "",
                    parameters if isinstance(parameters, dict) else {},
                )
            )
    return content, tuple(tools)


def _tagged_calls(body: str) -> tuple[str, list[str]]:
    """The text outside ``<tool_call>`` blocks and the text inside each, in one pass: an opening
    tag with no closing one after it ends the search (no closing tag can follow a later one)."""
    outside: list[str] = []
    inside: list[str] = []
    position = 0
    while (start := body.find(_CALL_OPEN, position)) >= 0:
        end = body.find(_CALL_CLOSE, start + len(_CALL_OPEN))
        if end < 0:
            break
        outside.append(body[position:start])
        inside.append(body[start + len(_CALL_OPEN) : end])
        position = end + len(_CALL_CLOSE)
    outside.append(body[position:])
    return "".join(outside), inside


def _read_assistant(body: str, *, calls_before: int) -> Message:
    content, blocks = _tagged_calls(body)
    calls: list[Call] = []
    for block in blocks:
        try:
            call: JSONValue = json.loads(block)
        except (ValueError, RecursionError):
            continue
        name = call.get("name") if isinstance(call, dict) else None
        if not isinstance(call, dict) or not isinstance(name, str):
            continue
        arguments = call.get("arguments")
        text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
        calls.append(Call(f"call_{calls_before + len(calls) + 1}", name, text))
    # The template puts a line break between the content and each call.
    return Message("assistant", content.rstrip("\n") if blocks else body, calls=tuple(calls))


def _read_responses(body: str, messages: list[Message]) -> list[Message]:
    inner = body[len(_RESPONSE_OPEN) : -len(_RESPONSE_CLOSE)]
    results = inner.split(_RESPONSE_SEPARATOR)
    last = messages[-1] if messages and messages[-1].role == "assistant" else None
    ids = [call.id for call in last.calls] if last is not None else []
    return [
        Message(
            "tool",
            result,
            tool_call_id=ids[position] if position < len(ids) else f"call_unknown_{position + 1}",
        )
        for position, result in enumerate(results)
    ]


def through_template(raw: Mapping[str, JSONValue], request: Request) -> Request:
    """``request`` with its messages and tools replaced by those read from its rendered prompt:
    what the demo decides from."""
    text = rendered_prompt(raw, request)
    messages, tools = read_prompt(text)
    return replace(request, messages=messages, tools=tools, prompt=text)
