"""The demo model in every provider's wire format: requests in, Chat Completions form, and back.

The demo's behaviour lives in one place, :func:`conversations.demo.model.complete`, which reads a
Chat Completions request and writes a ``chat.completion``. A :class:`Dialect` converts another
format's request into that form (:attr:`Dialect.to_chat`), and the demo's answer back into the
format's reply (:attr:`Dialect.from_chat`), its event stream (:attr:`Dialect.events`) or its
error envelope (:attr:`Dialect.error`). The dialects, by provider key, are :data:`DIALECTS`.

Streams are written whole (the demo has no token-by-token generation), but split the way the
real APIs split them: text in small pieces, and a call's arguments over several chunks
(Anthropic's ``input_json_delta``, Responses' ``function_call_arguments.delta``, Chat's
``tool_calls[index]`` fragments). Gemini sends each ``functionCall`` whole in one chunk, as the
Gemini API does (docs/wire-formats.md §5.1).

Formats whose structured output has no schema name (Anthropic ``output_config``, Gemini
``responseJsonSchema``) are named here: the structured paradigm's union is recognised by its
root ``decision`` property.

Pure Python: no Django, no I/O.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from conversations.demo.model import DECISION_SCHEMA, openai_error_body
from conversations.typealias import JSONDict, JSONValue

PIECE = 12  # characters per streamed fragment


class FormatError(Exception):
    """A request the format's real endpoint would refuse (400); the message is for the client."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class Dialect:
    """One wire format spoken by the demo model.

    ``to_chat(body, model)`` returns the Chat Completions request (``model``: the model named by
    the URL, for formats that put it there; else None) and raises :class:`FormatError`;
    ``from_chat(completion, body)`` and ``events(completion, body)`` write the demo's
    ``chat.completion`` as this format's reply or as its ``text/event-stream`` body;
    ``error(status, message)`` is the format's error envelope.
    """

    key: str
    to_chat: Callable[[JSONDict, str | None], JSONDict]
    from_chat: Callable[[JSONDict, JSONDict], JSONDict]
    events: Callable[[JSONDict, JSONDict], str]
    error: Callable[[int, str], JSONDict]
    # The demo's own (OpenAI) error bodies are this format's: relayed whole, param and code kept.
    openai_errors: bool = False

    def error_from_chat(self, status: int, body: JSONDict) -> JSONDict:
        """The demo's error ``body`` in this format's envelope, with the same message."""
        return body if self.openai_errors else self.error(status, _error_message(body))


# --- Shared helpers --------------------------------------------------------------------------


def _dump(value: JSONValue) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _object(value: JSONValue) -> JSONDict:
    return value if isinstance(value, dict) else {}


def _list(value: JSONValue) -> list[JSONValue]:
    return value if isinstance(value, list) else []


def _string(value: JSONValue) -> str:
    return value if isinstance(value, str) else ""


def _parsed_object(text: str) -> JSONDict:
    """Arguments text as an object; text that is not one (a call cut short on purpose) is ``{}``."""
    try:
        value: JSONValue = json.loads(text) if text.strip() else {}
    except ValueError:
        return {}
    return _object(value)


def _pieces(text: str, size: int = PIECE) -> list[str]:
    return [text[start : start + size] for start in range(0, len(text), size)] or [""]


def _sse(data: JSONValue, event: str | None = None) -> str:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {_dump(data)}\n\n"


def _suffix(identifier: str) -> str:
    """The distinctive part of a demo id (``chatcmpl-demo…``, ``call_…``), for other prefixes."""
    return identifier.removeprefix("chatcmpl-").removeprefix("call_")


def _schema_name(schema: JSONDict) -> str:
    return DECISION_SCHEMA if "decision" in _object(schema.get("properties")) else "response"


def _error_message(body: JSONDict) -> str:
    return _string(_object(body.get("error")).get("message")) or "the demo model failed"


@dataclass(frozen=True)
class _Answer:
    """The parts of a ``chat.completion`` the dialects write out."""

    id: str
    model: str
    created: int
    text: str | None
    refusal: str | None
    calls: list[JSONDict]
    finish_reason: str
    usage: JSONDict

    @classmethod
    def of(cls, completion: JSONDict) -> _Answer:
        choice = _object(_list(completion.get("choices"))[0])
        message = _object(choice.get("message"))
        created = completion.get("created")
        return cls(
            id=_string(completion.get("id")),
            model=_string(completion.get("model")),
            created=created if isinstance(created, int) else 0,
            text=_string(message.get("content")) or None,
            refusal=_string(message.get("refusal")) or None,
            calls=[_object(call) for call in _list(message.get("tool_calls"))],
            finish_reason=_string(choice.get("finish_reason")),
            usage=_object(completion.get("usage")),
        )

    @staticmethod
    def call_parts(call: JSONDict) -> tuple[str, str, str]:
        """(id, name, arguments text) of a ``tool_calls`` item."""
        function = _object(call.get("function"))
        return _string(call.get("id")), _string(function.get("name")), _string(function.get("arguments"))

    def tokens(self, key: str) -> int:
        value = self.usage.get(key)
        return value if isinstance(value, int) else 0


# --- OpenAI Chat Completions (the demo's own form) ----------------------------------------------


def _chat_to_chat(body: JSONDict, model: str | None) -> JSONDict:
    return {key: value for key, value in body.items() if key not in ("stream", "stream_options")}


def _chat_from_chat(completion: JSONDict, body: JSONDict) -> JSONDict:
    return completion


def _chat_events(completion: JSONDict, body: JSONDict) -> str:
    """``chat.completion.chunk`` events ending in ``[DONE]`` (docs/wire-formats.md §1.3)."""
    answer = _Answer.of(completion)
    include_usage = _object(body.get("stream_options")).get("include_usage") is True
    head: JSONDict = {
        "id": answer.id,
        "object": "chat.completion.chunk",
        "created": answer.created,
        "model": answer.model,
        "system_fingerprint": "demo",
    }

    def chunk(delta: JSONDict, finish_reason: str | None = None) -> str:
        choice: JSONDict = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        data: JSONDict = {**head, "choices": [choice]}
        if include_usage:
            data["usage"] = None
        return _sse(data)

    out = [chunk({"role": "assistant", "content": None})]
    if answer.text:
        out += [chunk({"content": piece}) for piece in _pieces(answer.text)]
    if answer.refusal:
        out += [chunk({"refusal": piece}) for piece in _pieces(answer.refusal)]
    for index, call in enumerate(answer.calls):
        call_id, name, arguments = _Answer.call_parts(call)
        first: JSONDict = {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        out.append(chunk({"tool_calls": [first]}))
        out += [
            chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            for piece in _pieces(arguments)
        ]
    out.append(chunk({}, answer.finish_reason))
    if include_usage:
        out.append(_sse({**head, "choices": [], "usage": answer.usage}))
    out.append("data: [DONE]\n\n")
    return "".join(out)


def _openai_error(status: int, message: str) -> JSONDict:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return openai_error_body(message, error_type=kind)


CHAT = Dialect("openai_chat", _chat_to_chat, _chat_from_chat, _chat_events, _openai_error, openai_errors=True)


# --- OpenAI Responses -------------------------------------------------------------------------


def _input_text(content: JSONValue) -> str:
    """A Responses message ``content``: a string, or the text of its input/output text parts."""
    if isinstance(content, str):
        return content
    return "\n".join(
        _string(part.get("text"))
        for part in _list(content)
        if isinstance(part, dict) and part.get("type") in ("input_text", "output_text", "text")
    )


def _responses_messages(body: JSONDict) -> list[JSONValue]:
    messages: list[JSONValue] = []
    if isinstance(body.get("instructions"), str):
        messages.append({"role": "system", "content": body["instructions"]})
    items = body.get("input")
    if isinstance(items, str):
        return [*messages, {"role": "user", "content": items}]
    if not isinstance(items, list):
        raise FormatError("Missing required parameter: 'input'.")
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise FormatError(f"Invalid type for 'input[{index}]': expected an object.")
        kind = item.get("type", "message")
        if kind == "function_call":
            call: JSONDict = {
                "id": _string(item.get("call_id")),
                "type": "function",
                "function": {"name": _string(item.get("name")), "arguments": _string(item.get("arguments"))},
            }
            last = _object(messages[-1]) if messages else {}
            if last.get("role") == "assistant":
                last["tool_calls"] = [*_list(last.get("tool_calls")), call]
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else _input_text(output)
            messages.append({"role": "tool", "tool_call_id": _string(item.get("call_id")), "content": text})
        elif kind == "message":
            messages.append({"role": item.get("role"), "content": _input_text(item.get("content"))})
        # Reasoning and other item kinds carry nothing the demo reads.
    return messages


def _responses_tool(tool: JSONValue) -> JSONValue:
    tool = _object(tool)
    if tool.get("type") != "function":
        return tool
    function: JSONDict = {
        key: tool[key] for key in ("name", "description", "parameters", "strict") if key in tool
    }
    return {"type": "function", "function": function}


def _responses_choice(choice: JSONValue) -> JSONValue:
    if not isinstance(choice, dict):
        return choice
    if choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    if choice.get("type") == "allowed_tools":
        tools: list[JSONValue] = [
            {"type": "function", "function": {"name": _object(tool).get("name")}}
            for tool in _list(choice.get("tools"))
        ]
        return {"type": "allowed_tools", "allowed_tools": {"mode": choice.get("mode"), "tools": tools}}
    return choice


def _responses_to_chat(body: JSONDict, model: str | None) -> JSONDict:
    chat: JSONDict = {"model": body.get("model"), "messages": _responses_messages(body)}
    if "tools" in body:
        chat["tools"] = [_responses_tool(tool) for tool in _list(body.get("tools"))]
    if "tool_choice" in body:
        chat["tool_choice"] = _responses_choice(body.get("tool_choice"))
    if "parallel_tool_calls" in body:
        chat["parallel_tool_calls"] = body["parallel_tool_calls"]
    text_format = _object(_object(body.get("text")).get("format"))
    if text_format.get("type") == "json_schema":
        spec = {key: value for key, value in text_format.items() if key != "type"}
        chat["response_format"] = {"type": "json_schema", "json_schema": spec}
    elif text_format:
        chat["response_format"] = {"type": text_format.get("type")}
    return chat


def _responses_output(answer: _Answer) -> list[JSONDict]:
    output: list[JSONDict] = []
    content: list[JSONValue] = []
    if answer.text:
        content.append({"type": "output_text", "text": answer.text, "annotations": []})
    if answer.refusal:
        content.append({"type": "refusal", "refusal": answer.refusal})
    if content:
        output.append(
            {
                "type": "message",
                "id": f"msg_{_suffix(answer.id)}",
                "status": "completed",
                "role": "assistant",
                "content": content,
            }
        )
    for call in answer.calls:
        call_id, name, arguments = _Answer.call_parts(call)
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{_suffix(call_id)}",
                "call_id": call_id,
                "name": name,
                "arguments": arguments,
                "status": "completed",
            }
        )
    return output


def _response(answer: _Answer, body: JSONDict, *, status: str, output: list[JSONDict]) -> JSONDict:
    response: JSONDict = {
        "id": f"resp_{_suffix(answer.id)}",
        "object": "response",
        "created_at": answer.created,
        "status": status,
        "model": answer.model,
        "output": [*output],
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools", []),
        "error": None,
        "incomplete_details": None,
        "usage": None,
    }
    if status == "completed":
        input_tokens, output_tokens = answer.tokens("prompt_tokens"), answer.tokens("completion_tokens")
        response["usage"] = {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "total_tokens": input_tokens + output_tokens,
        }
    return response


def _responses_from_chat(completion: JSONDict, body: JSONDict) -> JSONDict:
    answer = _Answer.of(completion)
    return _response(answer, body, status="completed", output=_responses_output(answer))


def _responses_events(completion: JSONDict, body: JSONDict) -> str:
    """Named events from ``response.created`` to ``response.completed`` (docs/wire-formats.md §3)."""
    answer = _Answer.of(completion)
    output = _responses_output(answer)
    events: list[JSONDict] = [
        {"type": "response.created", "response": _response(answer, body, status="in_progress", output=[])}
    ]
    for index, item in enumerate(output):
        events += list(_item_events(index, item))
    events.append(
        {"type": "response.completed", "response": _response(answer, body, status="completed", output=output)}
    )
    return "".join(
        _sse({**event, "sequence_number": number}, str(event["type"])) for number, event in enumerate(events)
    )


def _item_events(index: int, item: JSONDict) -> Iterator[JSONDict]:
    item_id = item["id"]
    where: JSONDict = {"item_id": item_id, "output_index": index}
    if item["type"] == "function_call":
        arguments = _string(item.get("arguments"))
        yield {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**item, "arguments": "", "status": "in_progress"},
        }
        for piece in _pieces(arguments):
            yield {"type": "response.function_call_arguments.delta", **where, "delta": piece}
        yield {
            "type": "response.function_call_arguments.done",
            **where,
            "name": item["name"],
            "arguments": arguments,
        }
    else:
        yield {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**item, "content": [], "status": "in_progress"},
        }
        for part_index, part in enumerate(_list(item.get("content"))):
            part = _object(part)
            at: JSONDict = {**where, "content_index": part_index}
            if part.get("type") == "output_text":
                text = _string(part.get("text"))
                yield {"type": "response.content_part.added", **at, "part": {**part, "text": ""}}
                for piece in _pieces(text):
                    yield {"type": "response.output_text.delta", **at, "delta": piece}
                yield {"type": "response.output_text.done", **at, "text": text}
            else:
                yield {"type": "response.content_part.added", **at, "part": part}
            yield {"type": "response.content_part.done", **at, "part": part}
    yield {"type": "response.output_item.done", "output_index": index, "item": item}


RESPONSES = Dialect(
    "openai_responses",
    _responses_to_chat,
    _responses_from_chat,
    _responses_events,
    _openai_error,
    openai_errors=True,
)


# --- Anthropic Messages -----------------------------------------------------------------------


def _block_text(content: JSONValue) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(
        _string(block.get("text"))
        for block in _list(content)
        if isinstance(block, dict) and block.get("type") == "text"
    )


def _result_text(text: str, is_error: bool) -> str:
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
        message = _object(item)
        role, content = message.get("role"), message.get("content")
        blocks = [_object(block) for block in _list(content)]
        if role == "assistant":
            _check_answered(index, pending, [])
            calls: list[JSONValue] = [
                {
                    "id": _string(block.get("id")),
                    "type": "function",
                    "function": {
                        "name": _string(block.get("name")),
                        "arguments": _dump(block.get("input", {})),
                    },
                }
                for block in blocks
                if block.get("type") == "tool_use"
            ]
            text = _block_text(content)
            chat.append(
                {"role": "assistant", "content": text or None, **({"tool_calls": calls} if calls else {})}
            )
            pending = [_string(_object(call).get("id")) for call in calls]
        elif role == "user":
            results = [block for block in blocks if block.get("type") == "tool_result"]
            _check_answered(index, pending, [_string(block.get("tool_use_id")) for block in results])
            pending = []
            chat += [
                {
                    "role": "tool",
                    "tool_call_id": _string(block.get("tool_use_id")),
                    "content": _result_text(_block_text(block.get("content")), block.get("is_error") is True),
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
    return {"auto": "auto", "any": "required", "none": "none"}.get(_string(kind), _string(kind))


def _anthropic_to_chat(body: JSONDict, model: str | None) -> JSONDict:
    if not isinstance(body.get("max_tokens"), int):
        raise FormatError("max_tokens: Field required")
    chat: JSONDict = {"model": body.get("model"), "messages": _anthropic_messages(body)}
    if "tools" in body:
        chat["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": _object(tool).get("name"),
                    "description": _object(tool).get("description", ""),
                    "parameters": _object(tool).get("input_schema", {}),
                },
            }
            for tool in _list(body.get("tools"))
        ]
    choice = _object(body.get("tool_choice"))
    if choice:
        chat["tool_choice"] = _anthropic_choice(choice)
        if choice.get("disable_parallel_tool_use") is True:
            chat["parallel_tool_calls"] = False
    output_format = _object(_object(body.get("output_config")).get("format"))
    if output_format.get("type") == "json_schema":
        schema = _object(output_format.get("schema"))
        chat["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": _schema_name(schema), "schema": schema, "strict": True},
        }
    return chat


_STOP_REASONS = {"tool_calls": "tool_use", "length": "max_tokens"}


def _tool_use_id(call_id: str) -> str:
    return f"toolu_{_suffix(call_id)}"


def _anthropic_message(answer: _Answer, content: list[JSONValue], *, done: bool) -> JSONDict:
    return {
        "id": f"msg_{_suffix(answer.id)}",
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
    answer = _Answer.of(completion)
    content: list[JSONValue] = []
    if answer.text:
        content.append({"type": "text", "text": answer.text})
    for call in answer.calls:
        call_id, name, arguments = _Answer.call_parts(call)
        # ``input`` is always an object: a call the demo cuts short on purpose arrives empty.
        content.append(
            {
                "type": "tool_use",
                "id": _tool_use_id(call_id),
                "name": name,
                "input": _parsed_object(arguments),
            }
        )
    return _anthropic_message(answer, content, done=True)


def _anthropic_events(completion: JSONDict, body: JSONDict) -> str:
    """Named events from ``message_start`` to ``message_stop`` (docs/wire-formats.md §4.4)."""
    answer = _Answer.of(completion)
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
            for piece in _pieces(answer.text)
        ]
        events.append({"type": "content_block_stop", "index": index})
        index += 1
    for call in answer.calls:
        call_id, name, arguments = _Answer.call_parts(call)
        start: JSONDict = {"type": "tool_use", "id": _tool_use_id(call_id), "name": name, "input": {}}
        events.append({"type": "content_block_start", "index": index, "content_block": start})
        # No arguments stream as one empty fragment (docs/wire-formats.md §4.4); a cut-short call as sent.
        fragments = [""] if arguments.strip() in ("", "{}") else _pieces(arguments)
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
    return "".join(_sse(event, str(event["type"])) for event in events)


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


# --- Gemini generateContent -------------------------------------------------------------------


def _lower_types(schema: JSONValue) -> JSONValue:
    """A Gemini ``Schema`` (types may be upper-case: ``OBJECT``) as JSON Schema types."""
    if isinstance(schema, list):
        return [_lower_types(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: JSONDict = {}
    for key, value in schema.items():
        if key == "type" and isinstance(value, str):
            out[key] = value.lower()
        elif key == "properties" and isinstance(value, dict):
            out[key] = {name: _lower_types(child) for name, child in value.items()}
        elif key in ("items", "anyOf"):
            out[key] = _lower_types(value)
        else:
            out[key] = value
    return out


def _response_text(response: JSONDict) -> tuple[str, bool]:
    """A ``functionResponse.response`` as the tool message text, and whether it reports an error."""
    if "error" in response:
        value, is_error = response["error"], True
    elif "output" in response or "result" in response:
        value, is_error = response.get("output", response.get("result")), False
    else:
        value, is_error = response, False
    return (value if isinstance(value, str) else _dump(value)), is_error


def _gemini_messages(body: JSONDict) -> list[JSONValue]:
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        raise FormatError("* GenerateContentRequest.contents: contents is not specified")
    chat: list[JSONValue] = []
    system = _object(body.get("systemInstruction"))
    if system:
        chat.append({"role": "system", "content": _parts_text(system.get("parts"))})
    pending: list[tuple[str, str]] = []  # (id, name) of the previous model turn's calls
    for index, item in enumerate(contents):
        content = _object(item)
        parts = [_object(part) for part in _list(content.get("parts"))]
        if content.get("role") == "model":
            pending = []
            calls: list[JSONValue] = []
            for number, part in enumerate(part for part in parts if "functionCall" in part):
                function_call = _object(part.get("functionCall"))
                call_id = _string(function_call.get("id")) or f"call_gemini_{index}_{number}"
                name = _string(function_call.get("name"))
                calls.append(
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": name, "arguments": _dump(function_call.get("args", {}))},
                    }
                )
                pending.append((call_id, name))
            text = _parts_text(parts)
            chat.append(
                {"role": "assistant", "content": text or None, **({"tool_calls": calls} if calls else {})}
            )
            continue
        responses = [_object(part.get("functionResponse")) for part in parts if "functionResponse" in part]
        if responses and not pending:
            raise FormatError(
                "Please ensure that function response turn comes immediately after a function call turn."
            )
        if responses and len(responses) != len(pending):
            raise FormatError(
                "Please ensure that the number of function response parts is equal to the number of "
                "function call parts of the function call turn."
            )
        for response in responses:
            call_id = _paired_call(response, pending)
            text, is_error = _response_text(_object(response.get("response")))
            chat.append({"role": "tool", "tool_call_id": call_id, "content": _result_text(text, is_error)})
        pending = []
        text = _parts_text(parts)
        if text or not responses:
            chat.append({"role": "user", "content": text})
    return chat


def _paired_call(response: JSONDict, pending: list[tuple[str, str]]) -> str:
    """The call a function response answers: by ``id`` when given, else the first open call of that name."""
    wanted = _string(response.get("id"))
    name = _string(response.get("name"))
    for position, (call_id, call_name) in enumerate(pending):
        if (wanted and call_id == wanted) or (not wanted and call_name == name):
            pending.pop(position)
            return call_id
    raise FormatError(
        "Please ensure that function response turn comes immediately after a function call turn."
    )


def _parts_text(parts: JSONValue | list[JSONDict]) -> str:
    return "".join(
        _string(part.get("text"))
        for part in (parts if isinstance(parts, list) else [])
        if isinstance(part, dict) and isinstance(part.get("text"), str) and not part.get("thought")
    )


def _gemini_choice(config: JSONDict) -> JSONDict:
    mode = _string(config.get("mode")) or "AUTO"
    names = [_string(name) for name in _list(config.get("allowedFunctionNames"))]
    if mode == "NONE":
        return {"tool_choice": "none"}
    if mode == "ANY" and len(names) == 1:
        return {"tool_choice": {"type": "function", "function": {"name": names[0]}}}
    if names:
        allowed: list[JSONValue] = [{"type": "function", "function": {"name": name}} for name in names]
        kind = "required" if mode == "ANY" else "auto"
        return {"tool_choice": {"type": "allowed_tools", "allowed_tools": {"mode": kind, "tools": allowed}}}
    return {"tool_choice": "required" if mode == "ANY" else "auto"}


def _gemini_to_chat(body: JSONDict, model: str | None) -> JSONDict:
    chat: JSONDict = {"model": model, "messages": _gemini_messages(body)}
    declarations = [
        _object(declaration)
        for tool in _list(body.get("tools"))
        for declaration in _list(_object(tool).get("functionDeclarations"))
    ]
    if declarations:
        chat["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": declaration.get("name"),
                    "description": declaration.get("description", ""),
                    "parameters": _lower_types(
                        declaration.get("parameters", declaration.get("parametersJsonSchema", {}))
                    ),
                },
            }
            for declaration in declarations
        ]
        chat.update(_gemini_choice(_object(_object(body.get("toolConfig")).get("functionCallingConfig"))))
    generation = _object(body.get("generationConfig"))
    schema = generation.get("responseJsonSchema", generation.get("responseSchema"))
    if isinstance(schema, dict):
        chat["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": _schema_name(schema), "schema": _lower_types(schema)},
        }
    elif generation.get("responseMimeType") == "application/json":
        chat["response_format"] = {"type": "json_object"}
    return chat


# An opaque signature on the first call, as thinking Gemini models send; the demo never checks it.
def _signature(call_id: str) -> str:
    return base64.b64encode(hashlib.sha256(f"demo-thought:{call_id}".encode()).digest()).decode()


def _gemini_parts(answer: _Answer) -> list[JSONDict]:
    parts: list[JSONDict] = []
    if answer.text:
        parts.append({"text": answer.text})
    for number, call in enumerate(answer.calls):
        call_id, name, arguments = _Answer.call_parts(call)
        # Gemini sends no call ids, and ``args`` is always an object.
        part: JSONDict = {"functionCall": {"name": name, "args": _parsed_object(arguments)}}
        if number == 0:
            part["thoughtSignature"] = _signature(call_id)
        parts.append(part)
    return parts


def _gemini_response(answer: _Answer, parts: list[JSONDict], *, finish: bool) -> JSONDict:
    candidate: JSONDict = {"content": {"role": "model", "parts": [*parts]}, "index": 0}
    response: JSONDict = {
        "candidates": [candidate],
        "modelVersion": answer.model,
        "responseId": _suffix(answer.id),
    }
    if finish:
        candidate["finishReason"] = "MAX_TOKENS" if answer.finish_reason == "length" else "STOP"
        prompt, output = answer.tokens("prompt_tokens"), answer.tokens("completion_tokens")
        response["usageMetadata"] = {
            "promptTokenCount": prompt,
            "candidatesTokenCount": output,
            "totalTokenCount": prompt + output,
        }
    return response


def _gemini_from_chat(completion: JSONDict, body: JSONDict) -> JSONDict:
    answer = _Answer.of(completion)
    return _gemini_response(answer, _gemini_parts(answer), finish=True)


def _gemini_events(completion: JSONDict, body: JSONDict) -> str:
    """``alt=sse`` chunks, each a whole response: text in pieces, each call whole.

    See docs/wire-formats.md §5.1.
    """
    answer = _Answer.of(completion)
    chunks: list[list[JSONDict]] = []
    for part in _gemini_parts(answer):
        if "text" in part:
            chunks += [[{"text": piece}] for piece in _pieces(_string(part["text"]))]
        else:
            chunks.append([part])
    chunks = chunks or [[{"text": ""}]]
    return "".join(
        _sse(_gemini_response(answer, parts, finish=number == len(chunks) - 1))
        for number, parts in enumerate(chunks)
    )


_GEMINI_STATUSES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}


def gemini_error(status: int, message: str) -> JSONDict:
    code = _GEMINI_STATUSES.get(status, "INTERNAL" if status >= 500 else "INVALID_ARGUMENT")
    return {"error": {"code": status, "message": message, "status": code}}


GEMINI = Dialect("gemini", _gemini_to_chat, _gemini_from_chat, _gemini_events, gemini_error)

DIALECTS: dict[str, Dialect] = {dialect.key: dialect for dialect in (CHAT, RESPONSES, ANTHROPIC, GEMINI)}
