"""Gemini ``generateContent``: ``contents`` with ``functionCall``/``functionResponse`` parts to
Chat messages (a response is paired with its call by name and order), and the answer back as
a candidate or its SSE stream, with Google's error envelope.

Pure Python: no Django, no I/O.
"""

from __future__ import annotations

import base64
import hashlib

from conversations.demo.anthropic import result_text
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
    return (value if isinstance(value, str) else dump_json(value)), is_error


def _gemini_messages(body: JSONDict) -> list[JSONValue]:
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        raise FormatError("* GenerateContentRequest.contents: contents is not specified")
    chat: list[JSONValue] = []
    system = as_object(body.get("systemInstruction"))
    if system:
        chat.append({"role": "system", "content": _parts_text(system.get("parts"))})
    pending: list[tuple[str, str]] = []  # (id, name) of the previous model turn's calls
    for index, item in enumerate(contents):
        content = as_object(item)
        parts = [as_object(part) for part in as_list(content.get("parts"))]
        if content.get("role") == "model":
            pending = []
            calls: list[JSONValue] = []
            for number, part in enumerate(part for part in parts if "functionCall" in part):
                function_call = as_object(part.get("functionCall"))
                call_id = as_string(function_call.get("id")) or f"call_gemini_{index}_{number}"
                name = as_string(function_call.get("name"))
                calls.append(
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": name, "arguments": dump_json(function_call.get("args", {}))},
                    }
                )
                pending.append((call_id, name))
            text = _parts_text(parts)
            chat.append(
                {"role": "assistant", "content": text or None, **({"tool_calls": calls} if calls else {})}
            )
            continue
        responses = [as_object(part.get("functionResponse")) for part in parts if "functionResponse" in part]
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
            text, is_error = _response_text(as_object(response.get("response")))
            chat.append({"role": "tool", "tool_call_id": call_id, "content": result_text(text, is_error)})
        pending = []
        text = _parts_text(parts)
        if text or not responses:
            chat.append({"role": "user", "content": text})
    return chat


def _paired_call(response: JSONDict, pending: list[tuple[str, str]]) -> str:
    """The call a function response answers: by ``id`` when given, else the first open call of that name."""
    wanted = as_string(response.get("id"))
    name = as_string(response.get("name"))
    for position, (call_id, call_name) in enumerate(pending):
        if (wanted and call_id == wanted) or (not wanted and call_name == name):
            pending.pop(position)
            return call_id
    raise FormatError(
        "Please ensure that function response turn comes immediately after a function call turn."
    )


def _parts_text(parts: JSONValue | list[JSONDict]) -> str:
    return "".join(
        as_string(part.get("text"))
        for part in (parts if isinstance(parts, list) else [])
        if isinstance(part, dict) and isinstance(part.get("text"), str) and not part.get("thought")
    )


def _gemini_choice(config: JSONDict) -> JSONDict:
    mode = as_string(config.get("mode")) or "AUTO"
    names = [as_string(name) for name in as_list(config.get("allowedFunctionNames"))]
    if mode == "NONE":
        return {"tool_choice": "none"}
    if mode == "ANY" and len(names) == 1:
        return {"tool_choice": {"type": "function", "function": {"name": names[0]}}}
    if names:
        allowed: list[JSONValue] = [{"type": "function", "function": {"name": name}} for name in names]
        kind = "required" if mode == "ANY" else "auto"
        return {"tool_choice": {"type": "allowed_tools", "allowed_tools": {"mode": kind, "tools": allowed}}}
    return {"tool_choice": "required" if mode == "ANY" else "auto"}


# Gemini's REST API takes the protobuf JSON mapping, which accepts each field's snake_case name as
# well as its lowerCamelCase one (google-genai sends ``parameters_json_schema``, for one): the
# protocol's own field names are read either way. What a field carries as data (a schema, a
# call's arguments, a tool's response) is not renamed: its keys are the caller's.
_SNAKE_FIELDS = {
    "system_instruction": "systemInstruction",
    "function_declarations": "functionDeclarations",
    "parameters_json_schema": "parametersJsonSchema",
    "tool_config": "toolConfig",
    "function_calling_config": "functionCallingConfig",
    "allowed_function_names": "allowedFunctionNames",
    "generation_config": "generationConfig",
    "response_json_schema": "responseJsonSchema",
    "response_schema": "responseSchema",
    "response_mime_type": "responseMimeType",
    "function_call": "functionCall",
    "function_response": "functionResponse",
    "inline_data": "inlineData",
    "file_data": "fileData",
    "mime_type": "mimeType",
    "file_uri": "fileUri",
    "max_output_tokens": "maxOutputTokens",
    "stop_sequences": "stopSequences",
    "candidate_count": "candidateCount",
    "top_p": "topP",
    "top_k": "topK",
    "thought_signature": "thoughtSignature",
}
_DATA_FIELDS = frozenset(
    {"parameters", "parametersJsonSchema", "responseSchema", "responseJsonSchema", "args", "response"}
)


def _camel_fields(value: JSONValue) -> JSONValue:
    """``value`` with the protocol's snake_case field names read as their lowerCamelCase ones."""
    if isinstance(value, list):
        return [_camel_fields(item) for item in value]
    if not isinstance(value, dict):
        return value
    renamed: JSONDict = {}
    for key, item in value.items():
        name = _SNAKE_FIELDS.get(key, key)
        renamed.setdefault(name, item if name in _DATA_FIELDS else _camel_fields(item))
    return renamed


def _gemini_to_chat(body: JSONDict, model: str | None) -> JSONDict:
    body = as_object(_camel_fields(body))
    chat: JSONDict = {"model": model, "messages": _gemini_messages(body)}
    declarations = [
        as_object(declaration)
        for tool in as_list(body.get("tools"))
        for declaration in as_list(as_object(tool).get("functionDeclarations"))
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
        chat.update(_gemini_choice(as_object(as_object(body.get("toolConfig")).get("functionCallingConfig"))))
    generation = as_object(body.get("generationConfig"))
    schema = generation.get("responseJsonSchema", generation.get("responseSchema"))
    if isinstance(schema, dict):
        chat["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": schema_name(schema), "schema": _lower_types(schema)},
        }
    elif generation.get("responseMimeType") == "application/json":
        chat["response_format"] = {"type": "json_object"}
    return chat


# An opaque signature on the first call, as thinking Gemini models send; the demo never checks it.
def _signature(call_id: str) -> str:
    return base64.b64encode(hashlib.sha256(f"demo-thought:{call_id}".encode()).digest()).decode()


def _gemini_parts(answer: Answer) -> list[JSONDict]:
    parts: list[JSONDict] = []
    if answer.text:
        parts.append({"text": answer.text})
    for number, call in enumerate(answer.calls):
        call_id, name, arguments = Answer.call_parts(call)
        # Gemini sends no call ids, and ``args`` is always an object.
        part: JSONDict = {"functionCall": {"name": name, "args": parsed_object(arguments)}}
        if number == 0:
            part["thoughtSignature"] = _signature(call_id)
        parts.append(part)
    return parts


def _gemini_response(answer: Answer, parts: list[JSONDict], *, finish: bool) -> JSONDict:
    candidate: JSONDict = {"content": {"role": "model", "parts": [*parts]}, "index": 0}
    response: JSONDict = {
        "candidates": [candidate],
        "modelVersion": answer.model,
        "responseId": suffix(answer.id),
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
    answer = Answer.of(completion)
    return _gemini_response(answer, _gemini_parts(answer), finish=True)


def _gemini_events(completion: JSONDict, body: JSONDict) -> str:
    """``alt=sse`` chunks, each a whole response: text in pieces, each call whole.

    See docs/wire-formats.md §5.1.
    """
    answer = Answer.of(completion)
    chunks: list[list[JSONDict]] = []
    for part in _gemini_parts(answer):
        if "text" in part:
            chunks += [[{"text": piece}] for piece in pieces(as_string(part["text"]))]
        else:
            chunks.append([part])
    chunks = chunks or [[{"text": ""}]]
    return "".join(
        sse(_gemini_response(answer, parts, finish=number == len(chunks) - 1))
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
