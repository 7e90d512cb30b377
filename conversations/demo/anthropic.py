"""Anthropic Messages: content blocks (``tool_use``, ``tool_result``) to Chat messages, and the
answer back as a ``message`` or the ``message_start`` … ``message_stop`` event stream, with
Anthropic's error envelope.

Pure Python: no Django, no I/O.
"""

from __future__ import annotations

from conversations.demo.base import (
    Answer,
    Dialect,
    FormatError,
    as_list,
    as_object,
    as_string,
    dump_json,
    parsed_object,
    pieces,
    schema_name,
    sse,
    suffix,
)
from conversations.typealias import JSONDict, JSONValue

# --- Anthropic Messages -----------------------------------------------------------------------


def _block_text(content: JSONValue) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(
        as_string(block.get("text"))
        for block in as_list(content)
        if isinstance(block, dict) and block.get("type") == "text"
    )


def result_text(text: str, is_error: bool) -> str:
    # Chat tool messages carry no error flag: the demo reads errors from the text.
    return f"Error: {text}" if is_error and not text.lower().startswith("error") else text


def _anthropic_messages(body: JSONDict) -> list[JSONValue]:
    items = body.get("messages")
    if not isinstance(items, list):
        raise FormatError("messages: Field required")
    chat: list[JSONValue] = []
    if body.get("system"):
        chat.append({"role": "system", "content": _block_text(body.get("system"))})
    pending: list[str] = []  # tool_use ids of the previous assistant message
    for index, item in enumerate(items):
        message = as_object(item)
        role, content = message.get("role"), message.get("content")
        blocks = [as_object(block) for block in as_list(content)]
        if role == "assistant":
            _check_answered(index, pending, [])
            calls: list[JSONValue] = [
                {
                    "id": as_string(block.get("id")),
                    "type": "function",
                    "function": {
                        "name": as_string(block.get("name")),
                        "arguments": dump_json(block.get("input", {})),
                    },
                }
                for block in blocks
                if block.get("type") == "tool_use"
            ]
            text = _block_text(content)
            chat.append(
                {"role": "assistant", "content": text or None, **({"tool_calls": calls} if calls else {})}
            )
            pending = [as_string(as_object(call).get("id")) for call in calls]
        elif role == "user":
            results = [block for block in blocks if block.get("type") == "tool_result"]
            _check_answered(index, pending, [as_string(block.get("tool_use_id")) for block in results])
            pending = []
            chat += [
                {
                    "role": "tool",
                    "tool_call_id": as_string(block.get("tool_use_id")),
                    "content": result_text(_block_text(block.get("content")), block.get("is_error") is True),
                }
                for block in results
            ]
            text = _block_text(content)
            if text or not results:
                chat.append({"role": "user", "content": text})
        else:
            raise FormatError(f"messages.{index}.role: Input should be 'user' or 'assistant'")
    _check_answered(len(items), pending, [])
    return chat


def _check_answered(index: int, expected: list[str], answered: list[str]) -> None:
    """Anthropic's rule (docs/wire-formats.md §4.3): every ``tool_use`` of message ``index - 1`` is answered
    in message ``index``, and only those."""
    unexpected = [call_id for call_id in answered if call_id not in expected]
    if unexpected:
        raise FormatError(
            f"messages.{index}.content.0: unexpected `tool_use_id` found in `tool_result` blocks: "
            f"{unexpected[0]}. Each `tool_result` block must have a corresponding `tool_use` block in "
            "the previous message."
        )
    missing = [call_id for call_id in expected if call_id not in answered]
    if missing:
        raise FormatError(
            f"messages.{index - 1}: `tool_use` ids were found without `tool_result` blocks immediately after: "
            f"{', '.join(missing)}. Each `tool_use` block must have a corresponding `tool_result` block "
            "in the next message."
        )


def _anthropic_choice(choice: JSONDict) -> JSONValue:
    kind = choice.get("type")
    if kind == "tool":
        return {"type": "function", "function": {"name": choice.get("name")}}
    return {"auto": "auto", "any": "required", "none": "none"}.get(as_string(kind), as_string(kind))


def _anthropic_to_chat(body: JSONDict, model: str | None) -> JSONDict:
    if not isinstance(body.get("max_tokens"), int):
        raise FormatError("max_tokens: Field required")
    chat: JSONDict = {"model": body.get("model"), "messages": _anthropic_messages(body)}
    if "tools" in body:
        chat["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": as_object(tool).get("name"),
                    "description": as_object(tool).get("description", ""),
                    "parameters": as_object(tool).get("input_schema", {}),
                },
            }
            for tool in as_list(body.get("tools"))
        ]
    choice = as_object(body.get("tool_choice"))
    if choice:
        chat["tool_choice"] = _anthropic_choice(choice)
        if choice.get("disable_parallel_tool_use") is True:
            chat["parallel_tool_calls"] = False
    output_format = as_object(as_object(body.get("output_config")).get("format"))
    if output_format.get("type") == "json_schema":
        schema = as_object(output_format.get("schema"))
        chat["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": schema_name(schema), "schema": schema, "strict": True},
        }
    return chat


_STOP_REASONS = {"tool_calls": "tool_use", "length": "max_tokens"}


def _tool_use_id(call_id: str) -> str:
    return f"toolu_{suffix(call_id)}"


def _anthropic_message(answer: Answer, content: list[JSONValue], *, done: bool) -> JSONDict:
    return {
        "id": f"msg_{suffix(answer.id)}",
        "type": "message",
        "role": "assistant",
        "model": answer.model,
        "content": content,
        "stop_reason": _STOP_REASONS.get(answer.finish_reason, "end_turn") if done else None,
        "stop_sequence": None,
        "usage": {
            "input_tokens": answer.tokens("prompt_tokens"),
            "output_tokens": answer.tokens("completion_tokens") if done else 1,
        },
    }


def _anthropic_from_chat(completion: JSONDict, body: JSONDict) -> JSONDict:
    answer = Answer.of(completion)
    content: list[JSONValue] = []
    if answer.text:
        content.append({"type": "text", "text": answer.text})
    for call in answer.calls:
        call_id, name, arguments = Answer.call_parts(call)
        # ``input`` is always an object: a call the demo cuts short on purpose arrives empty.
        content.append(
            {
                "type": "tool_use",
                "id": _tool_use_id(call_id),
                "name": name,
                "input": parsed_object(arguments),
            }
        )
    return _anthropic_message(answer, content, done=True)


def _anthropic_events(completion: JSONDict, body: JSONDict) -> str:
    """Named events from ``message_start`` to ``message_stop`` (docs/wire-formats.md §4.4)."""
    answer = Answer.of(completion)
    events: list[JSONDict] = [
        {"type": "message_start", "message": _anthropic_message(answer, [], done=False)},
        {"type": "ping"},
    ]
    index = 0
    if answer.text:
        events.append(
            {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}
        )
        events += [
            {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}}
            for piece in pieces(answer.text)
        ]
        events.append({"type": "content_block_stop", "index": index})
        index += 1
    for call in answer.calls:
        call_id, name, arguments = Answer.call_parts(call)
        start: JSONDict = {"type": "tool_use", "id": _tool_use_id(call_id), "name": name, "input": {}}
        events.append({"type": "content_block_start", "index": index, "content_block": start})
        # No arguments stream as one empty fragment (docs/wire-formats.md §4.4); a cut-short call as sent.
        fragments = [""] if arguments.strip() in ("", "{}") else pieces(arguments)
        events += [
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "input_json_delta", "partial_json": piece},
            }
            for piece in fragments
        ]
        events.append({"type": "content_block_stop", "index": index})
        index += 1
    events.append(
        {
            "type": "message_delta",
            "delta": {
                "stop_reason": _STOP_REASONS.get(answer.finish_reason, "end_turn"),
                "stop_sequence": None,
            },
            "usage": {"output_tokens": answer.tokens("completion_tokens")},
        }
    )
    events.append({"type": "message_stop"})
    return "".join(sse(event, str(event["type"])) for event in events)


_ANTHROPIC_ERRORS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def anthropic_error(status: int, message: str) -> JSONDict:
    kind = _ANTHROPIC_ERRORS.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


ANTHROPIC = Dialect("anthropic", _anthropic_to_chat, _anthropic_from_chat, _anthropic_events, anthropic_error)
