"""Where one tool call sits in each wire format: the parts of recorded bodies that carry it.

For the compare view's wire-format section. Each provider format has one function in
``EXCERPTS`` that takes the request body that followed a tool call (it replays the call and
sends the result back) and, when the reply was sent whole, the reply body; it returns the call
as the model sent it, the call as sent back, and the result message, each as the JSON excerpt
the format itself uses (OpenAI ``tool_calls`` and ``role: tool``; Responses ``function_call`` and
``function_call_output``; Anthropic ``tool_use`` and ``tool_result``; Gemini ``functionCall`` and
``functionResponse``). Nothing is rebuilt: every excerpt is a piece of a recorded body.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from conversations.providers.http import list_or_empty, object_or_empty
from conversations.typealias import JSONDict, JSONValue

# Keys whose values are the matching parts of a call across formats, and what they are.
CALL_ROLES: dict[str, str] = {
    "name": "name",
    "id": "id",
    "call_id": "id",
    "tool_call_id": "id",
    "tool_use_id": "id",
    "arguments": "arguments",
    "input": "arguments",
    "args": "arguments",
}
RESULT_ROLES: dict[str, str] = {
    **{key: role for key, role in CALL_ROLES.items() if role != "arguments"},
    "content": "result",
    "output": "result",
    "response": "result",
    "is_error": "error",
}


# Responses pairs a result with its call by ``call_id``; the ``fc_…`` item ``id`` is not the
# call's id (docs/wire-formats.md §3), so it is not marked.
RESPONSES_CALL_ROLES = {key: role for key, role in CALL_ROLES.items() if key != "id"}
RESPONSES_RESULT_ROLES = {key: role for key, role in RESULT_ROLES.items() if key != "id"}


@dataclass(frozen=True)
class WireExcerpts:
    """The call as the model sent it (None for a streamed reply), as sent back, and its result;
    and which keys mark the matching parts in this format."""

    sent: JSONValue
    replayed: JSONValue
    result: JSONValue
    call_roles: dict[str, str] = field(default_factory=lambda: CALL_ROLES)
    result_roles: dict[str, str] = field(default_factory=lambda: RESULT_ROLES)


def _dicts(values: JSONValue) -> Iterator[JSONDict]:
    return (value for value in list_or_empty(values) if isinstance(value, dict))


def _first(values: Iterator[JSONDict]) -> JSONDict | None:
    return next(values, None)


def _openai_chat(request: JSONDict, response: JSONDict | None) -> WireExcerpts | None:
    messages = list(_dicts(request.get("messages")))
    assistant = _first(m for m in messages if m.get("role") == "assistant" and m.get("tool_calls"))
    result = _first(m for m in messages if m.get("role") == "tool")
    if assistant is None or result is None:
        return None
    sent = None
    if response is not None:
        choice = _first(_dicts(response.get("choices")))
        sent = object_or_empty((choice or {}).get("message")) or None
    return WireExcerpts(sent=sent, replayed=assistant, result=result)


def _openai_responses(request: JSONDict, response: JSONDict | None) -> WireExcerpts | None:
    items = list(_dicts(request.get("input")))
    call = _first(i for i in items if i.get("type") == "function_call")
    result = _first(i for i in items if i.get("type") == "function_call_output")
    if call is None or result is None:
        return None
    sent = None
    if response is not None:
        sent = _first(i for i in _dicts(response.get("output")) if i.get("type") == "function_call")
    return WireExcerpts(
        sent=sent,
        replayed=call,
        result=result,
        call_roles=RESPONSES_CALL_ROLES,
        result_roles=RESPONSES_RESULT_ROLES,
    )


def _anthropic(request: JSONDict, response: JSONDict | None) -> WireExcerpts | None:
    messages = list(_dicts(request.get("messages")))
    call = _first(
        block
        for m in messages
        if m.get("role") == "assistant"
        for block in _dicts(m.get("content"))
        if block.get("type") == "tool_use"
    )
    result = _first(
        block
        for m in messages
        if m.get("role") == "user"
        for block in _dicts(m.get("content"))
        if block.get("type") == "tool_result"
    )
    if call is None or result is None:
        return None
    sent = None
    if response is not None:
        sent = _first(b for b in _dicts(response.get("content")) if b.get("type") == "tool_use")
    return WireExcerpts(sent=sent, replayed=call, result=result)


def _gemini_parts(contents: JSONValue, role: str, key: str) -> Iterator[JSONDict]:
    for content in _dicts(contents):
        if content.get("role") == role:
            yield from (part for part in _dicts(content.get("parts")) if key in part)


def _gemini(request: JSONDict, response: JSONDict | None) -> WireExcerpts | None:
    call = _first(_gemini_parts(request.get("contents"), "model", "functionCall"))
    result = _first(_gemini_parts(request.get("contents"), "user", "functionResponse"))
    if call is None or result is None:
        return None
    sent = None
    if response is not None:
        candidate = _first(_dicts(response.get("candidates")))
        sent = _first(_gemini_parts([(candidate or {}).get("content")], "model", "functionCall"))
    return WireExcerpts(sent=sent, replayed=call, result=result)


EXCERPTS: dict[str, Callable[[JSONDict, JSONDict | None], WireExcerpts | None]] = {
    "openai_chat": _openai_chat,
    "openai_responses": _openai_responses,
    "anthropic": _anthropic,
    "gemini": _gemini,
}
