"""What one recorded model call said, in the OpenTelemetry GenAI conventions' terms.

A model call is recorded as its exact request and response bodies in the provider's wire
format (``docs/wire-formats.md``). This module reads them back — a single JSON reply or a
stored event stream alike — into the GenAI vocabulary (``docs/traces.md`` §2): the system
instructions, the input and output messages as ``role`` + ``parts`` (``text``,
``tool_call``, ``tool_call_response``, ``reasoning``), the tool definitions offered, the
requested output type, and the response's id, model, finish reasons and token usage.

One reader per wire format, in ``READERS``; bodies are untrusted data, so every reader takes
what it finds and skips what it does not recognise (it never raises).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from conversations.loop.providers.streaming import parse_sse
from conversations.typealias import JSONDict, JSONList, JSONValue


@dataclass
class CallContent:
    """One model call in GenAI terms; empty lists where a body said nothing (or was not JSON)."""

    request: JSONDict = field(default_factory=dict)
    system_instructions: JSONList = field(default_factory=list)
    input_messages: JSONList = field(default_factory=list)
    output_messages: JSONList = field(default_factory=list)
    tool_definitions: JSONList = field(default_factory=list)
    output_type: str | None = None
    stream: bool = False
    response_id: str | None = None
    response_model: str | None = None
    finish_reasons: list[str] = field(default_factory=list)
    usage: JSONValue = None


def _json(text: str) -> JSONValue:
    try:
        return json.loads(text)  # type: ignore[no-any-return]
    except (ValueError, RecursionError):
        return None


def _dict(value: JSONValue) -> JSONDict:
    return value if isinstance(value, dict) else {}


def _list(value: JSONValue) -> JSONList:
    return value if isinstance(value, list) else []


def _str(value: JSONValue) -> str | None:
    return value if isinstance(value, str) and value else None


def _text_part(text: str) -> JSONDict:
    return {"type": "text", "content": text}


def _arguments(value: JSONValue) -> JSONValue:
    """Tool-call arguments as a JSON object when the provider sent them as JSON text."""
    if isinstance(value, str):
        parsed = _json(value)
        return parsed if isinstance(parsed, dict) else value
    return value


def _tool_call(call_id: JSONValue, name: JSONValue, arguments: JSONValue) -> JSONDict:
    part: JSONDict = {
        "type": "tool_call",
        "name": name if isinstance(name, str) else "",
        "arguments": arguments,
    }
    if isinstance(call_id, str) and call_id:
        part["id"] = call_id
    return part


def _tool_response(call_id: JSONValue, response: JSONValue) -> JSONDict:
    part: JSONDict = {"type": "tool_call_response", "response": response}
    if isinstance(call_id, str) and call_id:
        part["id"] = call_id
    return part


def _message(role: str, parts: JSONList) -> JSONDict:
    return {"role": role, "parts": parts}


def _events(body: str) -> list[JSONDict]:
    """The JSON ``data`` of each event of a stored event stream (``[DONE]`` and others skipped)."""
    return [data for event in parse_sse(body) if (data := _dict(_json(event.data)))]


def _streamed(body: str) -> bool:
    return body.lstrip().startswith(("data:", "event:", ":"))


def _is_json_format(value: JSONValue) -> bool:
    return _dict(value).get("type") in {"json_schema", "json_object"}


def _content_parts(content: JSONValue) -> JSONList:
    """Text content as a string or a list of typed blocks (``text`` / ``input_text`` / ``output_text``)."""
    if isinstance(content, str):
        return [_text_part(content)] if content else []
    parts: JSONList = []
    for block in _list(content):
        kind = _dict(block).get("type")
        text = _dict(block).get("text")
        if isinstance(text, str):
            parts.append(_text_part(text))
        elif isinstance(kind, str):
            parts.append({"type": kind})
    return parts


def _tool_definition(name: JSONValue, description: JSONValue, parameters: JSONValue) -> JSONDict:
    tool: JSONDict = {"type": "function", "name": name if isinstance(name, str) else ""}
    if isinstance(description, str) and description:
        tool["description"] = description
    if parameters is not None:
        tool["parameters"] = parameters
    return tool


# --- OpenAI Chat Completions -----------------------------------------------------------------


def _chat_request(request: JSONDict, content: CallContent) -> None:
    for message in _list(request.get("messages")):
        message = _dict(message)
        role = _str(message.get("role")) or "user"
        parts = _content_parts(message.get("content"))
        if role in {"system", "developer"}:
            content.system_instructions.extend(parts)
            continue
        if role == "tool":
            text = message.get("content")
            response = (
                text if isinstance(text, str) else [p.get("content") for p in parts if isinstance(p, dict)]
            )
            content.input_messages.append(
                _message("tool", [_tool_response(message.get("tool_call_id"), response)])
            )
            continue
        for call in _list(message.get("tool_calls")):
            function = _dict(_dict(call).get("function"))
            parts.append(
                _tool_call(_dict(call).get("id"), function.get("name"), _arguments(function.get("arguments")))
            )
        content.input_messages.append(_message(role, parts))
    for tool in _list(request.get("tools")):
        function = _dict(_dict(tool).get("function"))
        if function:
            content.tool_definitions.append(
                _tool_definition(
                    function.get("name"), function.get("description"), function.get("parameters")
                )
            )
    if _is_json_format(request.get("response_format")):
        content.output_type = "json"
    content.stream = request.get("stream") is True


def _chat_assembled(body: str) -> JSONDict:
    """A stored Chat Completions chunk stream as the one completion it adds up to."""
    reply: JSONDict = {}
    text: list[str] = []
    calls: dict[int, JSONDict] = {}
    finish: JSONValue = None
    for chunk in _events(body):
        for key in ("id", "model"):
            if key not in reply and _str(chunk.get(key)):
                reply[key] = chunk[key]
        if chunk.get("usage"):
            reply["usage"] = chunk["usage"]
        for choice in _list(chunk.get("choices"))[:1]:
            delta = _dict(_dict(choice).get("delta"))
            if isinstance(delta.get("content"), str):
                text.append(str(delta["content"]))
            for fragment in _list(delta.get("tool_calls")):
                fragment = _dict(fragment)
                index = fragment.get("index")
                call = calls.setdefault(index if isinstance(index, int) else len(calls), {"arguments": ""})
                if _str(fragment.get("id")):
                    call["id"] = fragment["id"]
                function = _dict(fragment.get("function"))
                if _str(function.get("name")):
                    call["name"] = function["name"]
                if isinstance(function.get("arguments"), str):
                    call["arguments"] = f"{call['arguments']}{function['arguments']}"
            if _str(_dict(choice).get("finish_reason")):
                finish = _dict(choice)["finish_reason"]
    message: JSONDict = {"role": "assistant", "content": "".join(text) or None}
    if calls:
        message["tool_calls"] = [
            {"id": c.get("id"), "function": {"name": c.get("name"), "arguments": c["arguments"]}}
            for _, c in sorted(calls.items())
        ]
    reply["choices"] = [{"message": message, "finish_reason": finish}]
    return reply


def _chat_response(response: JSONDict, content: CallContent) -> None:
    for choice in _list(response.get("choices")):
        message = _dict(_dict(choice).get("message"))
        parts = _content_parts(message.get("content"))
        for call in _list(message.get("tool_calls")):
            function = _dict(_dict(call).get("function"))
            parts.append(
                _tool_call(_dict(call).get("id"), function.get("name"), _arguments(function.get("arguments")))
            )
        reason = _str(_dict(choice).get("finish_reason"))
        if reason:
            content.finish_reasons.append(reason)
        content.output_messages.append({**_message("assistant", parts), "finish_reason": reason or ""})
    content.response_id = _str(response.get("id"))
    content.response_model = _str(response.get("model"))
    content.usage = response.get("usage")


# --- OpenAI Responses ------------------------------------------------------------------------

# How a Responses reply's status reads as a finish reason (docs/traces.md §2).
_RESPONSES_INCOMPLETE = {"max_output_tokens": "length", "content_filter": "content_filter"}


def _responses_request(request: JSONDict, content: CallContent) -> None:
    if instructions := _str(request.get("instructions")):
        content.system_instructions.append(_text_part(instructions))
    items = request.get("input")
    listed: JSONList = [{"role": "user", "content": items}] if isinstance(items, str) else _list(items)
    for entry in listed:
        item = _dict(entry)
        kind = item.get("type")
        if kind == "function_call":
            call = _tool_call(item.get("call_id"), item.get("name"), _arguments(item.get("arguments")))
            content.input_messages.append(_message("assistant", [call]))
        elif kind == "function_call_output":
            response = _tool_response(item.get("call_id"), item.get("output"))
            content.input_messages.append(_message("tool", [response]))
        elif role := _str(item.get("role")):
            parts = _content_parts(item.get("content"))
            if role in {"system", "developer"}:
                content.system_instructions.extend(parts)
            else:
                content.input_messages.append(_message(role, parts))
    for tool in _list(request.get("tools")):
        tool = _dict(tool)
        if tool.get("type") == "function":
            content.tool_definitions.append(
                _tool_definition(tool.get("name"), tool.get("description"), tool.get("parameters"))
            )
    if _is_json_format(_dict(request.get("text")).get("format")):
        content.output_type = "json"
    content.stream = request.get("stream") is True


def _responses_assembled(body: str) -> JSONDict:
    """A stored Responses event stream: its last event carrying the whole ``response``."""
    responses = [_dict(event.get("response")) for event in _events(body) if _dict(event.get("response"))]
    return responses[-1] if responses else {}


def _responses_response(response: JSONDict, content: CallContent) -> None:
    parts: JSONList = []
    calls = False
    for item in _list(response.get("output")):
        item = _dict(item)
        if item.get("type") == "message":
            parts.extend(_content_parts(item.get("content")))
        elif item.get("type") == "function_call":
            calls = True
            parts.append(_tool_call(item.get("call_id"), item.get("name"), _arguments(item.get("arguments"))))
        elif item.get("type") == "reasoning":
            for summary in _list(item.get("summary")):
                if text := _str(_dict(summary).get("text")):
                    parts.append({"type": "reasoning", "content": text})
    status = _str(response.get("status"))
    reason: str | None = None
    if status == "completed":
        reason = "tool_calls" if calls else "stop"
    elif status == "incomplete":
        why = _str(_dict(response.get("incomplete_details")).get("reason")) or ""
        reason = _RESPONSES_INCOMPLETE.get(why, why or "incomplete")
    elif status == "failed":
        reason = "error"
    if reason:
        content.finish_reasons.append(reason)
    if response:
        content.output_messages.append({**_message("assistant", parts), "finish_reason": reason or ""})
    content.response_id = _str(response.get("id"))
    content.response_model = _str(response.get("model"))
    content.usage = response.get("usage")


# --- Anthropic Messages ----------------------------------------------------------------------


def _anthropic_blocks(blocks: JSONValue) -> tuple[JSONList, JSONList]:
    """Message content blocks as (parts, tool responses): tool results become their own message."""
    if isinstance(blocks, str):
        return [_text_part(blocks)], []
    parts: JSONList = []
    responses: JSONList = []
    for block in _list(blocks):
        block = _dict(block)
        kind = block.get("type")
        if kind == "text":
            parts.append(_text_part(str(block.get("text", ""))))
        elif kind == "tool_use":
            parts.append(_tool_call(block.get("id"), block.get("name"), block.get("input")))
        elif kind == "tool_result":
            result = block.get("content")
            if isinstance(result, list):
                result = "".join(str(_dict(b).get("text", "")) for b in result)
            responses.append(_tool_response(block.get("tool_use_id"), result))
        elif kind == "thinking":
            parts.append({"type": "reasoning", "content": str(block.get("thinking", ""))})
        elif isinstance(kind, str):
            parts.append({"type": kind})
    return parts, responses


def _anthropic_request(request: JSONDict, content: CallContent) -> None:
    content.system_instructions.extend(_content_parts(request.get("system")))
    for message in _list(request.get("messages")):
        message = _dict(message)
        parts, responses = _anthropic_blocks(message.get("content"))
        if responses:
            content.input_messages.append(_message("tool", responses))
        if parts or not responses:
            content.input_messages.append(_message(_str(message.get("role")) or "user", parts))
    for tool in _list(request.get("tools")):
        tool = _dict(tool)
        if _str(tool.get("name")):
            content.tool_definitions.append(
                _tool_definition(tool.get("name"), tool.get("description"), tool.get("input_schema"))
            )
    if _is_json_format(_dict(request.get("output_config")).get("format")) or _is_json_format(
        request.get("output_format")
    ):
        content.output_type = "json"
    content.stream = request.get("stream") is True


def _anthropic_assembled(body: str) -> JSONDict:
    """A stored Messages event stream as the one message it adds up to."""
    message: JSONDict = {}
    blocks: dict[int, JSONDict] = {}
    partial_json: dict[int, list[str]] = {}
    for event in _events(body):
        kind = event.get("type")
        index = event.get("index")
        position = index if isinstance(index, int) else -1
        if kind == "message_start":
            message = dict(_dict(event.get("message")))
        elif kind == "content_block_start":
            blocks[position] = dict(_dict(event.get("content_block")))
        elif kind == "content_block_delta":
            delta = _dict(event.get("delta"))
            block = blocks.setdefault(position, {})
            if delta.get("type") == "input_json_delta":
                partial_json.setdefault(position, []).append(str(delta.get("partial_json", "")))
            for key in ("text", "thinking"):
                if isinstance(delta.get(key), str):
                    block[key] = f"{block.get(key, '')}{delta[key]}"
        elif kind == "message_delta":
            message.update({k: v for k, v in _dict(event.get("delta")).items() if v is not None})
            message["usage"] = {**_dict(message.get("usage")), **_dict(event.get("usage"))}
    for position, pieces in partial_json.items():
        parsed = _json("".join(pieces))
        blocks[position]["input"] = parsed if parsed is not None else "".join(pieces)
    message["content"] = [block for _, block in sorted(blocks.items())]
    return message


def _anthropic_response(response: JSONDict, content: CallContent) -> None:
    parts, _ = _anthropic_blocks(response.get("content"))
    reason = _str(response.get("stop_reason"))
    if reason:
        content.finish_reasons.append(reason)
    if response:
        content.output_messages.append({**_message("assistant", parts), "finish_reason": reason or ""})
    content.response_id = _str(response.get("id"))
    content.response_model = _str(response.get("model"))
    content.usage = response.get("usage")


# --- Gemini generateContent ------------------------------------------------------------------


def _gemini_parts(parts: JSONValue) -> tuple[JSONList, JSONList]:
    out: JSONList = []
    responses: JSONList = []
    for part in _list(parts):
        part = _dict(part)
        if isinstance(part.get("text"), str):
            kind = "reasoning" if part.get("thought") is True else "text"
            out.append({"type": kind, "content": part["text"]})
        elif call := _dict(part.get("functionCall")):
            out.append(_tool_call(call.get("id"), call.get("name"), call.get("args")))
        elif response := _dict(part.get("functionResponse")):
            responses.append(_tool_response(response.get("id"), response.get("response")))
    return out, responses


def _gemini_request(request: JSONDict, content: CallContent) -> None:
    system, _ = _gemini_parts(_dict(request.get("systemInstruction")).get("parts"))
    content.system_instructions.extend(system)
    for message in _list(request.get("contents")):
        message = _dict(message)
        parts, responses = _gemini_parts(message.get("parts"))
        if responses:
            content.input_messages.append(_message("tool", responses))
        if parts or not responses:
            role = "assistant" if message.get("role") == "model" else _str(message.get("role")) or "user"
            content.input_messages.append(_message(role, parts))
    for tool in _list(request.get("tools")):
        for declaration in _list(_dict(tool).get("functionDeclarations")):
            declaration = _dict(declaration)
            parameters = declaration.get("parameters", declaration.get("parametersJsonSchema"))
            content.tool_definitions.append(
                _tool_definition(declaration.get("name"), declaration.get("description"), parameters)
            )
    config = _dict(request.get("generationConfig"))
    if config.get("responseMimeType") == "application/json":
        content.output_type = "json"


def _gemini_assembled(body: str) -> JSONDict:
    """A stored ``streamGenerateContent`` stream: its chunks' parts joined, the last reason and usage."""
    merged: JSONDict = {}
    parts: JSONList = []
    finish: JSONValue = None
    for chunk in _events(body):
        for key in ("responseId", "modelVersion", "usageMetadata"):
            if chunk.get(key):
                merged[key] = chunk[key]
        for candidate in _list(chunk.get("candidates"))[:1]:
            for part in _list(_dict(_dict(candidate).get("content")).get("parts")):
                last = _dict(parts[-1]) if parts else {}
                if _mergeable(last, _dict(part)):
                    parts[-1] = {**last, "text": f"{last['text']}{_dict(part)['text']}"}
                else:
                    parts.append(part)
            finish = _dict(candidate).get("finishReason") or finish
    merged["candidates"] = [{"content": {"role": "model", "parts": parts}, "finishReason": finish}]
    return merged


def _mergeable(last: JSONDict, part: JSONDict) -> bool:
    return (
        isinstance(last.get("text"), str)
        and isinstance(part.get("text"), str)
        and last.get("thought") is part.get("thought")
    )


def _gemini_response(response: JSONDict, content: CallContent) -> None:
    for candidate in _list(response.get("candidates")):
        candidate = _dict(candidate)
        parts, _ = _gemini_parts(_dict(candidate.get("content")).get("parts"))
        reason = _str(candidate.get("finishReason"))
        if reason:
            content.finish_reasons.append(reason)
        content.output_messages.append({**_message("assistant", parts), "finish_reason": reason or ""})
    content.response_id = _str(response.get("responseId"))
    content.response_model = _str(response.get("modelVersion"))
    content.usage = response.get("usageMetadata")


@dataclass(frozen=True)
class Reader:
    """How one wire format's bodies read: the request, a stream assembled, the reply."""

    request: Callable[[JSONDict, CallContent], None]
    assembled: Callable[[str], JSONDict]
    response: Callable[[JSONDict, CallContent], None]


READERS: dict[str, Reader] = {
    "openai_chat": Reader(_chat_request, _chat_assembled, _chat_response),
    "openai_responses": Reader(_responses_request, _responses_assembled, _responses_response),
    "anthropic": Reader(_anthropic_request, _anthropic_assembled, _anthropic_response),
    "gemini": Reader(_gemini_request, _gemini_assembled, _gemini_response),
}


def call_content(*, provider: str, request_body: str, response_body: str, label: str = "") -> CallContent:
    """One recorded model call read in GenAI terms (``provider`` a ``ModelProfile.provider``).

    ``label`` is the exchange's label (``POST /path``): Gemini says it streams in the URL.
    """
    content = CallContent()
    reader = READERS.get(provider)
    if reader is None:
        return content
    content.request = _dict(_json(request_body))
    reader.request(content.request, content)
    streamed = _streamed(response_body)
    content.stream = content.stream or streamed or ":streamGenerateContent" in label
    response = reader.assembled(response_body) if streamed else _dict(_json(response_body))
    reader.response(response, content)
    return content
