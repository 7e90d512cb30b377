"""Where one tool call sits in each wire format: the parts of recorded bodies that carry it.

For the compare view's wire-format section. Each provider class has a static ``excerpts``
(the provider contract, :class:`conversations.loop.providers.base.Provider`) that takes the request
body that followed a tool call (it replays the call and sends the result back) and, when the
reply was sent whole, the reply body; it returns the call
as the model sent it, the call as sent back, and the result message, each as the JSON excerpt
the format itself uses (OpenAI ``tool_calls`` and ``role: tool``; Responses ``function_call`` and
``function_call_output``; Anthropic ``tool_use`` and ``tool_result``; Gemini ``functionCall`` and
``functionResponse``). Nothing is rebuilt: every excerpt is a piece of a recorded body. This
module holds what they share: :class:`WireExcerpts`, the keys that mark matching parts, and two
small readers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

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


ExcerptReader = Callable[[JSONDict, JSONDict | None], WireExcerpts | None]


def dicts(values: JSONValue) -> Iterator[JSONDict]:
    """The objects in ``values`` when it is a list (nothing otherwise)."""
    return (value for value in (values if isinstance(values, list) else []) if isinstance(value, dict))


def first(values: Iterator[JSONDict]) -> JSONDict | None:
    return next(values, None)
