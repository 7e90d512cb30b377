"""Request understanding, first half: the Chat Completions request checked as a real endpoint
checks it, and read into the demo's own frozen records (:class:`Request`, :class:`Message`,
:class:`Tool`, :class:`Call`, :class:`ToolChoice`).

A request a real endpoint would refuse raises :class:`RequestError`, which
:func:`conversations.demo.model.complete` turns into a 400 worded like OpenAI's. Also the small
shared helpers of the wire body: call ids (derived from the request, so the same request gives
the same ids) and canonical JSON.

Pure Python: no Django, no I/O, no randomness.
"""

from __future__ import annotations

import hashlib
import json
import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from conversations.typealias import JSONDict, JSONValue

MAX_TOOLS = 128
MAX_TOOL_NAME_LENGTH = 64
_ID_ALPHABET = string.digits + string.ascii_letters


# --- Request validation -------------------------------------------------------------------


class RequestError(Exception):
    """A request the endpoint refuses with 400; fields as in OpenAI's error object."""

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code


@dataclass(frozen=True)
class Call:
    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Message:
    role: str
    text: str
    calls: tuple[Call, ...] = ()
    tool_call_id: str | None = None


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: JSONDict


@dataclass(frozen=True)
class ToolChoice:
    mode: str  # "none", "auto" or "required"
    names: tuple[str, ...] | None = None  # set by a named or an allowed_tools choice


@dataclass(frozen=True)
class Request:
    model: str
    messages: tuple[Message, ...]
    tools: tuple[Tool, ...]
    choice: ToolChoice
    parallel: bool
    fingerprint: str
    messages_fingerprint: str
    response_format: JSONDict | None = None
    # The text the demo read: its chat template's rendering of the request (set by
    # ``prompt.through_template``; empty before): what its reported usage counts.
    prompt: str = ""

    @property
    def can_call(self) -> bool:
        return bool(self.tools) and self.choice.mode != "none"

    def candidates(self) -> tuple[Tool, ...]:
        if self.choice.names is None:
            return self.tools
        return tuple(tool for tool in self.tools if tool.name in self.choice.names)


_ROLES = ("system", "developer", "user", "assistant", "tool", "function")
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]+$")


def parse_request(raw: Mapping[str, JSONValue]) -> Request:
    model = raw.get("model")
    if not model:
        raise RequestError("you must provide a model parameter")
    if not isinstance(model, str):
        raise _wrong_type("model", "a string", model)
    messages = _parse_messages(raw)
    tools = _parse_tools(raw.get("tools"))
    choice = _parse_tool_choice(raw.get("tool_choice"), tools)
    parallel = _parse_flag(raw, "parallel_tool_calls", default=True)
    response_format = raw.get("response_format")
    if response_format is not None and not isinstance(response_format, dict):
        raise _wrong_type("response_format", "an object", response_format)
    if _parse_flag(raw, "stream", default=False):
        raise RequestError(
            "The demo model does not stream; send 'stream': false.", param="stream", code="unsupported_value"
        )
    return Request(
        model=model,
        messages=messages,
        tools=tools,
        choice=choice,
        parallel=parallel,
        fingerprint=_canonical(dict(raw)),
        messages_fingerprint=_canonical(raw.get("messages")),
        response_format=response_format,
    )


def _parse_messages(raw: Mapping[str, JSONValue]) -> tuple[Message, ...]:
    items = raw.get("messages")
    if items is None:
        raise _missing("messages")
    if not isinstance(items, list):
        raise _wrong_type("messages", "an array of objects", items)
    if not items:
        raise RequestError(
            "Invalid 'messages': empty array. Expected an array with minimum length 1, "
            "but got an empty array instead.",
            param="messages",
            code="empty_array",
        )
    messages = tuple(_parse_message(f"messages[{index}]", item) for index, item in enumerate(items))
    _check_tool_replies(messages)
    return messages


def _parse_message(where: str, item: JSONValue) -> Message:
    if not isinstance(item, dict):
        raise _wrong_type(where, "an object", item)
    role = item.get("role")
    if role is None:
        raise _missing(f"{where}.role")
    if not isinstance(role, str) or role not in _ROLES:
        raise RequestError(
            f"Invalid value: '{role}'. Supported values are: 'system', 'assistant', 'user', "
            "'function', 'tool', and 'developer'.",
            param=f"{where}.role",
            code="invalid_value",
        )
    text = _content_text(f"{where}.content", item.get("content"))
    if role == "assistant":
        return Message(role, text, calls=_parse_tool_calls(f"{where}.tool_calls", item.get("tool_calls")))
    if role == "tool":
        return Message(role, text, tool_call_id=required_string(item, "tool_call_id", where))
    return Message(role, text)


def _content_text(where: str, content: JSONValue) -> str:
    """The text of a message: a string, or the ``text`` parts of a content array joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _wrong_type(where, "a string or an array of content parts", content)
    texts: list[str] = []
    for index, part in enumerate(content):
        if not isinstance(part, dict):
            raise _wrong_type(f"{where}[{index}]", "an object", part)
        if part.get("type") == "text":
            texts.append(required_string(part, "text", f"{where}[{index}]"))
    return "\n".join(texts)


def _parse_tool_calls(where: str, value: JSONValue) -> tuple[Call, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise _wrong_type(where, "an array", value)
    calls: list[Call] = []
    for index, item in enumerate(value):
        path = f"{where}[{index}]"
        if not isinstance(item, dict):
            raise _wrong_type(path, "an object", item)
        function = required_object(item, "function", path)
        arguments = function.get("arguments")
        if arguments is not None and not isinstance(arguments, str):
            raise _wrong_type(f"{path}.function.arguments", "a string", arguments)
        calls.append(
            Call(
                id=required_string(item, "id", path),
                name=required_string(function, "name", f"{path}.function"),
                arguments=arguments or "",
            )
        )
    return tuple(calls)


def _check_tool_replies(messages: Sequence[Message]) -> None:
    """Every assistant ``tool_calls`` message must be followed at once by one tool message per
    call id, and every tool message must answer such a call (OpenAI's rule and wording)."""
    owner: int | None = None
    expected: tuple[str, ...] = ()
    answered: set[str] = set()
    for index, message in enumerate(messages):
        if message.role == "tool":
            if owner is None:
                raise RequestError(
                    # "preceeding" is OpenAI's own spelling; clients match on this text.
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    "preceeding message with 'tool_calls'.",
                    param=f"messages.[{index}].role",
                )
            if message.tool_call_id not in expected:
                raise RequestError(
                    f"Invalid parameter: 'tool_call_id' of '{message.tool_call_id}' not found in "
                    "'tool_calls' of previous message.",
                    param=f"messages.[{index}].tool_call_id",
                )
            answered.add(message.tool_call_id)
            continue
        _check_all_answered(owner, expected, answered)
        owner = index if message.calls else None
        expected = tuple(call.id for call in message.calls)
        answered = set()
    _check_all_answered(owner, expected, answered)


def _check_all_answered(owner: int | None, expected: tuple[str, ...], answered: set[str]) -> None:
    missing = [call_id for call_id in expected if call_id not in answered]
    if owner is not None and missing:
        raise RequestError(
            "An assistant message with 'tool_calls' must be followed by tool messages responding "
            "to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
            + ", ".join(missing),
            param=f"messages.[{owner}].role",
        )


def _parse_tools(value: JSONValue) -> tuple[Tool, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise _wrong_type("tools", "an array", value)
    if len(value) > MAX_TOOLS:
        raise RequestError(
            f"Invalid 'tools': array too long. Expected an array with maximum length {MAX_TOOLS}, "
            f"but got an array with length {len(value)} instead.",
            param="tools",
            code="array_above_max_length",
        )
    return tuple(_parse_tool(f"tools[{index}]", item) for index, item in enumerate(value))


def _parse_tool(where: str, item: JSONValue) -> Tool:
    if not isinstance(item, dict):
        raise _wrong_type(where, "an object", item)
    kind = item.get("type")
    if kind is None:
        raise _missing(f"{where}.type")
    if kind != "function":
        raise RequestError(
            f"Invalid value: '{kind}'. The demo model supports only 'function' tools.",
            param=f"{where}.type",
            code="invalid_value",
        )
    function = required_object(item, "function", where)
    name = required_string(function, "name", f"{where}.function")
    _check_tool_name(f"{where}.function.name", name)
    description = function.get("description")
    if description is not None and not isinstance(description, str):
        raise _wrong_type(f"{where}.function.description", "a string", description)
    parameters = function.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise _wrong_type(f"{where}.function.parameters", "an object", parameters)
    return Tool(name=name, description=description or "", parameters=parameters or {})


def _check_tool_name(where: str, name: str) -> None:
    if not _TOOL_NAME.match(name):
        raise RequestError(
            f"Invalid '{where}': string does not match pattern. Expected a string that matches "
            "the pattern '^[a-zA-Z0-9_-]+$'.",
            param=where,
            code="invalid_value",
        )
    if len(name) > MAX_TOOL_NAME_LENGTH:
        raise RequestError(
            f"Invalid '{where}': string too long. Expected a string with maximum length "
            f"{MAX_TOOL_NAME_LENGTH}, but got a string with length {len(name)} instead.",
            param=where,
            code="string_above_max_length",
        )


def _parse_tool_choice(value: JSONValue, tools: tuple[Tool, ...]) -> ToolChoice:
    if value is None:
        return ToolChoice("auto" if tools else "none")
    if not tools:
        raise RequestError(
            "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.",
            param="tool_choice",
        )
    offered = {tool.name for tool in tools}
    if isinstance(value, str):
        if value not in ("none", "auto", "required"):
            raise RequestError(
                f"Invalid value: '{value}'. Supported values are: 'none', 'auto', and 'required'.",
                param="tool_choice",
                code="invalid_value",
            )
        return ToolChoice(value)
    if not isinstance(value, dict):
        raise _wrong_type("tool_choice", "a string or an object", value)
    kind = value.get("type")
    if kind == "function":
        name = required_string(
            required_object(value, "function", "tool_choice"), "name", "tool_choice.function"
        )
        _check_offered(name, offered, "tool_choice.function.name")
        return ToolChoice("required", (name,))
    if kind == "allowed_tools":
        return _parse_allowed_tools(required_object(value, "allowed_tools", "tool_choice"), offered)
    raise RequestError(
        f"Invalid value: '{kind}'. Supported values are: 'function' and 'allowed_tools'.",
        param="tool_choice.type",
        code="invalid_value",
    )


def _parse_allowed_tools(spec: JSONDict, offered: set[str]) -> ToolChoice:
    where = "tool_choice.allowed_tools"
    mode = spec.get("mode")
    if not isinstance(mode, str) or mode not in ("auto", "required"):
        raise RequestError(
            f"Invalid value: '{mode}'. Supported values are: 'auto' and 'required'.",
            param=f"{where}.mode",
            code="invalid_value",
        )
    entries = spec.get("tools")
    if not isinstance(entries, list) or not entries:
        raise _missing(f"{where}.tools")
    names: list[str] = []
    for index, entry in enumerate(entries):
        path = f"{where}.tools[{index}]"
        if not isinstance(entry, dict):
            raise _wrong_type(path, "an object", entry)
        name = required_string(required_object(entry, "function", path), "name", f"{path}.function")
        _check_offered(name, offered, f"{path}.function.name")
        names.append(name)
    return ToolChoice(mode, tuple(names))


def _check_offered(name: str, offered: set[str], where: str) -> None:
    if name not in offered:
        raise RequestError(
            f"Invalid value for '{where}': the function '{name}' is not in 'tools'.",
            param=where,
            code="invalid_value",
        )


def _parse_flag(raw: Mapping[str, JSONValue], key: str, *, default: bool) -> bool:
    value = raw.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _wrong_type(key, "a boolean", value)
    return value


def required_string(container: JSONDict, key: str, where: str) -> str:
    value = container.get(key)
    if value is None:
        raise _missing(f"{where}.{key}")
    if not isinstance(value, str):
        raise _wrong_type(f"{where}.{key}", "a string", value)
    return value


def required_object(container: JSONDict, key: str, where: str) -> JSONDict:
    value = container.get(key)
    if value is None:
        raise _missing(f"{where}.{key}")
    if not isinstance(value, dict):
        raise _wrong_type(f"{where}.{key}", "an object", value)
    return value


def _missing(param: str) -> RequestError:
    return RequestError(
        f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter"
    )


def _wrong_type(param: str, expected: str, value: JSONValue) -> RequestError:
    return RequestError(
        f"Invalid type for '{param}': expected {expected}, but got {_json_type_name(value)} instead.",
        param=param,
        code="invalid_type",
    )


def _json_type_name(value: JSONValue) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a decimal"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


# --- The wire body -------------------------------------------------------------------------


def new_call(request: Request, index: int, name: str, arguments: JSONDict) -> Call:
    return Call(_call_id(request.fingerprint, index), name, dump(arguments))


def _call_id(fingerprint: str, index: int) -> str:
    """``call_`` + 24 base-62 characters from the request and the call's position."""
    number = int.from_bytes(hashlib.sha256(f"{fingerprint}#{index}".encode()).digest(), "big")
    characters: list[str] = []
    while len(characters) < 24:
        number, remainder = divmod(number, len(_ID_ALPHABET))
        characters.append(_ID_ALPHABET[remainder])
    return "call_" + "".join(characters)


def dump(value: JSONValue) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _canonical(value: JSONValue) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def json_or_none(text: str) -> JSONValue:
    try:
        parsed: JSONValue = json.loads(text)
    except ValueError:
        return None
    return parsed
