"""OpenAI Responses: ``input`` items and ``function_call_output`` to Chat messages, and the
answer back as ``output`` items or the ``response.*`` event stream.

Pure Python: no Django, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator

from conversations.demo.base import (
    Answer,
    Dialect,
    FormatError,
    as_list,
    as_object,
    as_string,
    pieces,
    sse,
    suffix,
)
from conversations.demo.openai_chat import openai_error
from conversations.typealias import JSONDict, JSONValue

# --- OpenAI Responses -------------------------------------------------------------------------


def _input_text(content: JSONValue) -> str:
    """A Responses message ``content``: a string, or the text of its input/output text parts."""
    if isinstance(content, str):
        return content
    return "\n".join(
        as_string(part.get("text"))
        for part in as_list(content)
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
                "id": as_string(item.get("call_id")),
                "type": "function",
                "function": {
                    "name": as_string(item.get("name")),
                    "arguments": as_string(item.get("arguments")),
                },
            }
            last = as_object(messages[-1]) if messages else {}
            if last.get("role") == "assistant":
                last["tool_calls"] = [*as_list(last.get("tool_calls")), call]
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else _input_text(output)
            messages.append({"role": "tool", "tool_call_id": as_string(item.get("call_id")), "content": text})
        elif kind == "message":
            messages.append({"role": item.get("role"), "content": _input_text(item.get("content"))})
        # Reasoning and other item kinds carry nothing the demo reads.
    return messages


def _responses_tool(tool: JSONValue) -> JSONValue:
    tool = as_object(tool)
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
            {"type": "function", "function": {"name": as_object(tool).get("name")}}
            for tool in as_list(choice.get("tools"))
        ]
        return {"type": "allowed_tools", "allowed_tools": {"mode": choice.get("mode"), "tools": tools}}
    return choice


def _responses_to_chat(body: JSONDict, model: str | None) -> JSONDict:
    chat: JSONDict = {"model": body.get("model"), "messages": _responses_messages(body)}
    if "tools" in body:
        chat["tools"] = [_responses_tool(tool) for tool in as_list(body.get("tools"))]
    if "tool_choice" in body:
        chat["tool_choice"] = _responses_choice(body.get("tool_choice"))
    if "parallel_tool_calls" in body:
        chat["parallel_tool_calls"] = body["parallel_tool_calls"]
    text_format = as_object(as_object(body.get("text")).get("format"))
    if text_format.get("type") == "json_schema":
        spec = {key: value for key, value in text_format.items() if key != "type"}
        chat["response_format"] = {"type": "json_schema", "json_schema": spec}
    elif text_format:
        chat["response_format"] = {"type": text_format.get("type")}
    return chat


def _responses_output(answer: Answer) -> list[JSONDict]:
    output: list[JSONDict] = []
    content: list[JSONValue] = []
    if answer.text:
        content.append({"type": "output_text", "text": answer.text, "annotations": [], "logprobs": []})
    if answer.refusal:
        content.append({"type": "refusal", "refusal": answer.refusal})
    if content:
        output.append(
            {
                "type": "message",
                "id": f"msg_{suffix(answer.id)}",
                "status": "completed",
                "role": "assistant",
                "content": content,
            }
        )
    for call in answer.calls:
        call_id, name, arguments = Answer.call_parts(call)
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{suffix(call_id)}",
                "call_id": call_id,
                "name": name,
                "arguments": arguments,
                "status": "completed",
            }
        )
    return output


def _response(answer: Answer, body: JSONDict, *, status: str, output: list[JSONDict]) -> JSONDict:
    response: JSONDict = {
        "id": f"resp_{suffix(answer.id)}",
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
            # No cache and no reasoning here; the fields are part of every usage object.
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        }
    return response


def _responses_from_chat(completion: JSONDict, body: JSONDict) -> JSONDict:
    answer = Answer.of(completion)
    return _response(answer, body, status="completed", output=_responses_output(answer))


def _responses_events(completion: JSONDict, body: JSONDict) -> str:
    """Named events from ``response.created`` to ``response.completed`` (docs/wire-formats.md §3)."""
    answer = Answer.of(completion)
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
        sse({**event, "sequence_number": number}, str(event["type"])) for number, event in enumerate(events)
    )


def _item_events(index: int, item: JSONDict) -> Iterator[JSONDict]:
    item_id = item["id"]
    where: JSONDict = {"item_id": item_id, "output_index": index}
    if item["type"] == "function_call":
        arguments = as_string(item.get("arguments"))
        yield {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**item, "arguments": "", "status": "in_progress"},
        }
        for piece in pieces(arguments):
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
        for part_index, part in enumerate(as_list(item.get("content"))):
            part = as_object(part)
            at: JSONDict = {**where, "content_index": part_index}
            if part.get("type") == "output_text":
                text = as_string(part.get("text"))
                yield {"type": "response.content_part.added", **at, "part": {**part, "text": ""}}
                for piece in pieces(text):
                    yield {"type": "response.output_text.delta", **at, "delta": piece, "logprobs": []}
                yield {"type": "response.output_text.done", **at, "text": text, "logprobs": []}
            else:
                yield {"type": "response.content_part.added", **at, "part": part}
            yield {"type": "response.content_part.done", **at, "part": part}
    yield {"type": "response.output_item.done", "output_index": index, "item": item}


RESPONSES = Dialect(
    "openai_responses",
    _responses_to_chat,
    _responses_from_chat,
    _responses_events,
    openai_error,
    openai_errors=True,
)
