"""The demo model: a deterministic, offline model behind the OpenAI Chat Completions wire format.

(The HTTP views also speak OpenAI Responses, Anthropic Messages and Gemini, streamed or not: each
request is converted into this module's form and the answer back, by :mod:`conversations.demo.dialects`.)

It lets a class run the real client code, the raw capture, the parser, the validator and the
repair loop with no API key and no network. It is no language model: it picks a tool by word
overlap with the tools' names and descriptions, fills arguments with a few patterns guided by
each tool's JSON Schema, and writes answers from fixed templates labelled ``[demo model]``.

Contract of :func:`complete`:

* A request a real endpoint would refuse gets a 400 with an OpenAI-style error body, worded like
  OpenAI's where the wording is known.
* With no tool results after the last user message, it decides: call tools, or answer in text.
* With tool results, it repairs once after an error result, else writes the final answer.
* It speaks the format the request asks for (:data:`_FORMATS`): native ``tool_calls``; the
  ``tool_decision`` structured-output schema; or, read from the system prompt the inspector's
  text paradigms write, the XML or JSON call convention, an intent label, or bare arguments.
  Tools, tool_choice, calls and results are read back from that prompt and that history.
* Markers in the user's question make it misbehave on purpose (:data:`MARKERS`), in every
  format; the call-breaking ones only on the first attempt at a decision (a re-ask or a repair
  is answered properly).
* The same request gives the same body, apart from ``created``.

Pure Python: no Django, no I/O, no randomness.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
import string
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from xml.sax.saxutils import escape as xml_escape

from conversations.typealias import JSONDict, JSONValue

SLOW_MARKER_CAP_SECONDS = 30.0
DRIP_MARKER_CAP_SECONDS = 2.0
MAX_TOOLS = 128
MAX_TOOL_NAME_LENGTH = 64
ANSWER_PREFIX = "[demo model] "

MARKERS: Mapping[str, str] = {
    "[demo:malformed-json]": "the first tool call is cut short: invalid JSON arguments (native), "
    "a JSON reply without its closing brackets, an XML block without its closing tags",
    "[demo:unknown-tool]": "the first tool call names a tool that was not offered",
    "[demo:missing-argument]": "the first tool call leaves out a required argument",
    "[demo:code-fence]": "the call is wrapped in a ```xml / ```json code fence (native: written as "
    "fenced JSON text instead of tool_calls)",
    "[demo:no-tool]": "answer in text even when a tool fits",
    "[demo:no-native-tools]": "refuse any request with native 'tools' (400, as Ollama does for a model "
    "without tool support)",
    "[demo:no-structured]": "refuse a json_schema response_format (400)",
    "[demo:http-500]": "fail with HTTP 500 on every request for this question",
    "[demo:slow=SECONDS]": "wait SECONDS (at most 30) before answering; applied by the HTTP view",
    "[demo:drip=SECONDS]": "when streaming, wait SECONDS (at most 2) between events, so the reply "
    "visibly grows; applied by the HTTP view",
}

_QUOTE_LIMIT = 500
_ID_ALPHABET = string.digits + string.ascii_letters


@dataclass(frozen=True)
class DemoReply:
    """One HTTP answer: ``status`` 200 with a ``chat.completion`` body, or an error status with
    an OpenAI-style ``{"error": {"message", "type", "param", "code"}}`` body."""

    status: int
    body: JSONDict


def openai_error_body(
    message: str,
    *,
    error_type: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
) -> JSONDict:
    """The error envelope OpenAI's API returns, so clients raise their usual exceptions."""
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


def complete(request: Mapping[str, JSONValue]) -> DemoReply:
    """Answer one Chat Completions request body (already decoded from JSON).

    Never raises for bad input: invalid requests become a 400 reply, ``[demo:http-500]`` a 500.
    """
    try:
        speaking, parsed = _understand(_parse_request(request))
    except _RequestError as error:
        return DemoReply(400, openai_error_body(error.message, param=error.param, code=error.code))
    question = _read_question(parsed.messages)
    if "http-500" in question.markers:
        message = (
            "The server had an error while processing your request. Sorry about that! (demo: [demo:http-500])"
        )
        return DemoReply(500, openai_error_body(message, error_type="server_error"))
    refusal = _refusal(request, parsed, question)
    if refusal is not None:
        return DemoReply(400, refusal)
    try:
        _check_response_format(parsed.response_format)
    except _RequestError as error:
        return DemoReply(400, openai_error_body(error.message, param=error.param, code=error.code))
    written = speaking.encode(parsed, speaking.respond(parsed, question))
    return DemoReply(200, _completion_body(parsed, written))


def simulated_delay(request: Mapping[str, JSONValue]) -> float:
    """Seconds asked for by a ``[demo:slow=SECONDS]`` marker in the current question, capped at
    :data:`SLOW_MARKER_CAP_SECONDS`; 0 when there is none or the request is invalid."""
    try:
        _, parsed = _understand(_parse_request(request))
    except _RequestError:
        return 0.0
    return min(_read_question(parsed.messages).slow_seconds, SLOW_MARKER_CAP_SECONDS)


def stream_delay(request: Mapping[str, JSONValue]) -> float:
    """Seconds between streamed events asked for by a ``[demo:drip=SECONDS]`` marker in the current
    question, capped at :data:`DRIP_MARKER_CAP_SECONDS`; 0 when there is none or the request is
    invalid."""
    try:
        _, parsed = _understand(_parse_request(request))
    except _RequestError:
        return 0.0
    return min(_read_question(parsed.messages).drip_seconds, DRIP_MARKER_CAP_SECONDS)


def _refusal(raw: Mapping[str, JSONValue], request: _Request, question: _Question) -> JSONDict | None:
    """The 400 a server without the capability gives, when a marker asks the demo to be one."""
    if "no-native-tools" in question.markers and raw.get("tools"):
        # Ollama's wording for a model whose template has no tool support (docs/wire-formats.md §6).
        return openai_error_body(f"registry.ollama.ai/library/{request.model} does not support tools")
    if "no-structured" in question.markers and _format_type(request.response_format) == "json_schema":
        # xAI's wording when response_format is not available for a model.
        return openai_error_body(
            "The response_format parameter is unsupported at the moment. Leave it unset.",
            param="response_format",
        )
    return None


# --- Request validation -------------------------------------------------------------------


class _RequestError(Exception):
    """A request the endpoint refuses with 400; fields as in OpenAI's error object."""

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code


@dataclass(frozen=True)
class _Call:
    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class _Message:
    role: str
    text: str
    calls: tuple[_Call, ...] = ()
    tool_call_id: str | None = None


@dataclass(frozen=True)
class _Tool:
    name: str
    description: str
    parameters: JSONDict


@dataclass(frozen=True)
class _ToolChoice:
    mode: str  # "none", "auto" or "required"
    names: tuple[str, ...] | None = None  # set by a named or an allowed_tools choice


@dataclass(frozen=True)
class _Request:
    model: str
    messages: tuple[_Message, ...]
    tools: tuple[_Tool, ...]
    choice: _ToolChoice
    parallel: bool
    fingerprint: str
    messages_fingerprint: str
    response_format: JSONDict | None = None

    @property
    def can_call(self) -> bool:
        return bool(self.tools) and self.choice.mode != "none"

    def candidates(self) -> tuple[_Tool, ...]:
        if self.choice.names is None:
            return self.tools
        return tuple(tool for tool in self.tools if tool.name in self.choice.names)


_ROLES = ("system", "developer", "user", "assistant", "tool", "function")
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]+$")


def _parse_request(raw: Mapping[str, JSONValue]) -> _Request:
    model = raw.get("model")
    if not model:
        raise _RequestError("you must provide a model parameter")
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
        raise _RequestError(
            "The demo model does not stream; send 'stream': false.", param="stream", code="unsupported_value"
        )
    return _Request(
        model=model,
        messages=messages,
        tools=tools,
        choice=choice,
        parallel=parallel,
        fingerprint=_canonical(dict(raw)),
        messages_fingerprint=_canonical(raw.get("messages")),
        response_format=response_format,
    )


def _parse_messages(raw: Mapping[str, JSONValue]) -> tuple[_Message, ...]:
    items = raw.get("messages")
    if items is None:
        raise _missing("messages")
    if not isinstance(items, list):
        raise _wrong_type("messages", "an array of objects", items)
    if not items:
        raise _RequestError(
            "Invalid 'messages': empty array. Expected an array with minimum length 1, "
            "but got an empty array instead.",
            param="messages",
            code="empty_array",
        )
    messages = tuple(_parse_message(f"messages[{index}]", item) for index, item in enumerate(items))
    _check_tool_replies(messages)
    return messages


def _parse_message(where: str, item: JSONValue) -> _Message:
    if not isinstance(item, dict):
        raise _wrong_type(where, "an object", item)
    role = item.get("role")
    if role is None:
        raise _missing(f"{where}.role")
    if not isinstance(role, str) or role not in _ROLES:
        raise _RequestError(
            f"Invalid value: '{role}'. Supported values are: 'system', 'assistant', 'user', "
            "'function', 'tool', and 'developer'.",
            param=f"{where}.role",
            code="invalid_value",
        )
    text = _content_text(f"{where}.content", item.get("content"))
    if role == "assistant":
        return _Message(role, text, calls=_parse_tool_calls(f"{where}.tool_calls", item.get("tool_calls")))
    if role == "tool":
        return _Message(role, text, tool_call_id=_required_string(item, "tool_call_id", where))
    return _Message(role, text)


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
            texts.append(_required_string(part, "text", f"{where}[{index}]"))
    return "\n".join(texts)


def _parse_tool_calls(where: str, value: JSONValue) -> tuple[_Call, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise _wrong_type(where, "an array", value)
    calls: list[_Call] = []
    for index, item in enumerate(value):
        path = f"{where}[{index}]"
        if not isinstance(item, dict):
            raise _wrong_type(path, "an object", item)
        function = _required_object(item, "function", path)
        arguments = function.get("arguments")
        if arguments is not None and not isinstance(arguments, str):
            raise _wrong_type(f"{path}.function.arguments", "a string", arguments)
        calls.append(
            _Call(
                id=_required_string(item, "id", path),
                name=_required_string(function, "name", f"{path}.function"),
                arguments=arguments or "",
            )
        )
    return tuple(calls)


def _check_tool_replies(messages: Sequence[_Message]) -> None:
    """Every assistant ``tool_calls`` message must be followed at once by one tool message per
    call id, and every tool message must answer such a call (OpenAI's rule and wording)."""
    owner: int | None = None
    expected: tuple[str, ...] = ()
    answered: set[str] = set()
    for index, message in enumerate(messages):
        if message.role == "tool":
            if owner is None:
                raise _RequestError(
                    # "preceeding" is OpenAI's own spelling; clients match on this text.
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    "preceeding message with 'tool_calls'.",
                    param=f"messages.[{index}].role",
                )
            if message.tool_call_id not in expected:
                raise _RequestError(
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
        raise _RequestError(
            "An assistant message with 'tool_calls' must be followed by tool messages responding "
            "to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
            + ", ".join(missing),
            param=f"messages.[{owner}].role",
        )


def _parse_tools(value: JSONValue) -> tuple[_Tool, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise _wrong_type("tools", "an array", value)
    if len(value) > MAX_TOOLS:
        raise _RequestError(
            f"Invalid 'tools': array too long. Expected an array with maximum length {MAX_TOOLS}, "
            f"but got an array with length {len(value)} instead.",
            param="tools",
            code="array_above_max_length",
        )
    return tuple(_parse_tool(f"tools[{index}]", item) for index, item in enumerate(value))


def _parse_tool(where: str, item: JSONValue) -> _Tool:
    if not isinstance(item, dict):
        raise _wrong_type(where, "an object", item)
    kind = item.get("type")
    if kind is None:
        raise _missing(f"{where}.type")
    if kind != "function":
        raise _RequestError(
            f"Invalid value: '{kind}'. The demo model supports only 'function' tools.",
            param=f"{where}.type",
            code="invalid_value",
        )
    function = _required_object(item, "function", where)
    name = _required_string(function, "name", f"{where}.function")
    _check_tool_name(f"{where}.function.name", name)
    description = function.get("description")
    if description is not None and not isinstance(description, str):
        raise _wrong_type(f"{where}.function.description", "a string", description)
    parameters = function.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise _wrong_type(f"{where}.function.parameters", "an object", parameters)
    return _Tool(name=name, description=description or "", parameters=parameters or {})


def _check_tool_name(where: str, name: str) -> None:
    if not _TOOL_NAME.match(name):
        raise _RequestError(
            f"Invalid '{where}': string does not match pattern. Expected a string that matches "
            "the pattern '^[a-zA-Z0-9_-]+$'.",
            param=where,
            code="invalid_value",
        )
    if len(name) > MAX_TOOL_NAME_LENGTH:
        raise _RequestError(
            f"Invalid '{where}': string too long. Expected a string with maximum length "
            f"{MAX_TOOL_NAME_LENGTH}, but got a string with length {len(name)} instead.",
            param=where,
            code="string_above_max_length",
        )


def _parse_tool_choice(value: JSONValue, tools: tuple[_Tool, ...]) -> _ToolChoice:
    if value is None:
        return _ToolChoice("auto" if tools else "none")
    if not tools:
        raise _RequestError(
            "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.",
            param="tool_choice",
        )
    offered = {tool.name for tool in tools}
    if isinstance(value, str):
        if value not in ("none", "auto", "required"):
            raise _RequestError(
                f"Invalid value: '{value}'. Supported values are: 'none', 'auto', and 'required'.",
                param="tool_choice",
                code="invalid_value",
            )
        return _ToolChoice(value)
    if not isinstance(value, dict):
        raise _wrong_type("tool_choice", "a string or an object", value)
    kind = value.get("type")
    if kind == "function":
        name = _required_string(
            _required_object(value, "function", "tool_choice"), "name", "tool_choice.function"
        )
        _check_offered(name, offered, "tool_choice.function.name")
        return _ToolChoice("required", (name,))
    if kind == "allowed_tools":
        return _parse_allowed_tools(_required_object(value, "allowed_tools", "tool_choice"), offered)
    raise _RequestError(
        f"Invalid value: '{kind}'. Supported values are: 'function' and 'allowed_tools'.",
        param="tool_choice.type",
        code="invalid_value",
    )


def _parse_allowed_tools(spec: JSONDict, offered: set[str]) -> _ToolChoice:
    where = "tool_choice.allowed_tools"
    mode = spec.get("mode")
    if not isinstance(mode, str) or mode not in ("auto", "required"):
        raise _RequestError(
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
        name = _required_string(_required_object(entry, "function", path), "name", f"{path}.function")
        _check_offered(name, offered, f"{path}.function.name")
        names.append(name)
    return _ToolChoice(mode, tuple(names))


def _check_offered(name: str, offered: set[str], where: str) -> None:
    if name not in offered:
        raise _RequestError(
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


def _required_string(container: JSONDict, key: str, where: str) -> str:
    value = container.get(key)
    if value is None:
        raise _missing(f"{where}.{key}")
    if not isinstance(value, str):
        raise _wrong_type(f"{where}.{key}", "a string", value)
    return value


def _required_object(container: JSONDict, key: str, where: str) -> JSONDict:
    value = container.get(key)
    if value is None:
        raise _missing(f"{where}.{key}")
    if not isinstance(value, dict):
        raise _wrong_type(f"{where}.{key}", "an object", value)
    return value


def _missing(param: str) -> _RequestError:
    return _RequestError(
        f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter"
    )


def _wrong_type(param: str, expected: str, value: JSONValue) -> _RequestError:
    return _RequestError(
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


# --- The question and what it says ---------------------------------------------------------

_MARKER = re.compile(r"\[demo:([a-z0-9_-]+)(?:=(\d+(?:\.\d+)?))?\]", re.IGNORECASE)


@dataclass(frozen=True)
class _Question:
    text: str  # the last user message, markers removed, whitespace collapsed
    markers: frozenset[str]
    slow_seconds: float
    drip_seconds: float = 0.0


def _read_question(messages: Sequence[_Message]) -> _Question:
    index = _last_user_index(messages)
    raw = messages[index].text if index >= 0 else ""
    found = list(_MARKER.finditer(raw))
    slow = [float(match.group(2)) for match in found if match.group(1).lower() == "slow" and match.group(2)]
    drip = [float(match.group(2)) for match in found if match.group(1).lower() == "drip" and match.group(2)]
    return _Question(
        text=" ".join(_MARKER.sub(" ", raw).split()),
        markers=frozenset(match.group(1).lower() for match in found),
        slow_seconds=max(slow, default=0.0),
        drip_seconds=max(drip, default=0.0),
    )


def _last_user_index(messages: Sequence[_Message]) -> int:
    return max((index for index, message in enumerate(messages) if message.role == "user"), default=-1)


_STOPWORDS = frozenset(
    """
    a about above after again all also am an and any are as at be been before being below both
    but by can could current currently did do does doing done during each few for from further
    get gets give had has have having he her here hers him his how i if in into is it its it's
    just let like make me might more most much must my myself need no nor not now of off on once
    only or other our ours out over own please same shall she should show so some such tell than
    that the their theirs them then there these they this those through to too under until up
    us very was we were what what's whats when where which while who whom whose why will with
    would yes you your yours
    """.split()
)

# Words that stand for the same topic when matching a question against tool names.
_SYNONYM_GROUPS: tuple[frozenset[str], ...] = (
    frozenset(
        "weather forecast forecasts temperature temperatures rain raining rainy snow snowing sunny "
        "wind windy climate umbrella humid humidity hot cold".split()
    ),
    frozenset(
        "calculate calculator calculation calc compute math maths arithmetic evaluate expression "
        "plus minus times multiply multiplied divide divided sum subtract product".split()
    ),
    frozenset("convert conversion converter unit units".split()),
    frozenset("note notes remember memo memorize jot save store reminder".split()),
    frozenset("time clock timezone hour hours".split()),
    frozenset("search find lookup look query".split()),
    frozenset("echo repeat say".split()),
)
_GROUPS_OF: dict[str, frozenset[int]] = {
    word: frozenset(index for index, group in enumerate(_SYNONYM_GROUPS) if word in group)
    for group in _SYNONYM_GROUPS
    for word in group
}

_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_MONTHS = frozenset(
    "january february march april may june july august september october november december".split()
)
_DAY_WORDS = frozenset(("today", "tonight", "tomorrow", "yesterday", *_WEEKDAYS))

# Unit spellings by canonical key, to read "10 km to miles" and match enum values.
_UNIT_ALIASES: dict[str, tuple[str, ...]] = {
    "km": ("km", "kms", "kilometer", "kilometers", "kilometre", "kilometres"),
    "mi": ("mi", "mile", "miles"),
    "m": ("m", "meter", "meters", "metre", "metres"),
    "cm": ("cm", "centimeter", "centimeters", "centimetre", "centimetres"),
    "ft": ("ft", "foot", "feet"),
    "in": ("inch", "inches"),
    "kg": ("kg", "kgs", "kilogram", "kilograms", "kilo", "kilos"),
    "g": ("g", "gram", "grams"),
    "lb": ("lb", "lbs", "pound", "pounds"),
    "c": ("c", "celsius", "centigrade"),
    "f": ("f", "fahrenheit"),
    "k": ("kelvin",),
    "l": ("l", "liter", "liters", "litre", "litres"),
    "gal": ("gal", "gallon", "gallons"),
    "usd": ("usd",),
    "eur": ("eur",),
    "gbp": ("gbp",),
    "jpy": ("jpy",),
    "cny": ("cny",),
}
_UNIT_KEY: dict[str, str] = {alias: key for key, aliases in _UNIT_ALIASES.items() for alias in aliases}

# How a question may name each arithmetic operation an enum might offer.
_OPERATION_WORDS: dict[str, tuple[str, ...]] = {
    "add": ("add", "plus", "sum", "+"),
    "subtract": ("subtract", "minus", "-"),
    "multiply": ("multiply", "multiplied", "times", "*"),
    "divide": ("divide", "divided", "/"),
}

_WORD = re.compile(r"[A-Za-z][A-Za-z'’]*")
_ISO_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
_DAY = re.compile(r"\b(\d{4}-\d{2}-\d{2}|" + "|".join(sorted(_DAY_WORDS)) + r")\b", re.IGNORECASE)
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?")
_QUOTED = re.compile(r"\"([^\"]+)\"|“([^”]+)”|(?<!\w)'([^']+)'(?!\w)")
_WORD_OPERATORS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\bmultiplied by\b", re.IGNORECASE), "*"),
    (re.compile(r"\bdivided by\b", re.IGNORECASE), "/"),
    (re.compile(r"\btimes\b", re.IGNORECASE), "*"),
    (re.compile(r"\bplus\b", re.IGNORECASE), "+"),
    (re.compile(r"\bminus\b", re.IGNORECASE), "-"),
    (re.compile(r"(?<=\d)\s*[x×]\s*(?=\d)"), " * "),
    (re.compile("÷"), "/"),
)
_EXPRESSION = re.compile(r"[-(\d][\d\s.+\-*/^%()]*[\d)]")
_HAS_OPERATOR = re.compile(r"[\d)]\s*[+*/^%]\s*[-\d(]|[\d)]\s+-\s+[-\d(]")
_CONVERSION = re.compile(
    r"(?<![\w.])(-?\d+(?:\.\d+)?)\s*(?:degrees?\s+)?(°?\s*[A-Za-z]+)"
    r"\s+(?:to|in|into|as)\s+(?:degrees?\s+)?(°?\s*[A-Za-z]+)",
    re.IGNORECASE,
)
_CAPITALISED = r"[A-ZÀ-ÖØ-Þ][\w'’.-]*"
_PLACE = rf"{_CAPITALISED}(?:\s+(?:(?:de|del|da|la|le|am|upon|sur)\s+)?{_CAPITALISED})*"
_PLACE_AFTER_PREPOSITION = re.compile(rf"\b(?:in|for|at)\s+({_PLACE})")
_PLACE_ANYWHERE = re.compile(_PLACE)
_LOWERCASE_PLACE = re.compile(r"\b(?:in|for|at)\s+([a-z][a-z'-]+)")
_MORE_PLACES = re.compile(rf"\s*(?:,\s*(?:and\s+)?|\s+and\s+|\s*&\s*)(?:(?:in|for|at)\s+)?({_PLACE})")


@dataclass(frozen=True)
class _Conversion:
    amount: int | float
    source: str
    target: str


@dataclass(frozen=True)
class _Facts:
    """What the question says, read once: the words that point at a tool, and the values that
    can fill arguments."""

    text: str
    words: tuple[str, ...]  # content words in order, distinct, lowercase
    intents: tuple[str, ...]  # topic words implied by a pattern rather than said
    places: tuple[str, ...]
    day: str | None
    numbers: tuple[int | float, ...]
    expression: str | None
    conversion: _Conversion | None
    quoted: tuple[str, ...]


def _read_facts(text: str) -> _Facts:
    undated = _ISO_DATE.sub(" ", text)
    expression = _find_expression(undated)
    conversion = _find_conversion(undated)
    intents = (("calculate",) if expression else ()) + (("convert",) if conversion else ())
    return _Facts(
        text=text,
        words=tuple(dict.fromkeys(word for word in _words(text) if word not in _STOPWORDS)),
        intents=intents,
        places=_find_places(text),
        day=_find_day(text),
        numbers=tuple(_to_number(match.group()) for match in _NUMBER.finditer(undated)),
        expression=expression,
        conversion=conversion,
        quoted=tuple(next(group for group in match.groups() if group) for match in _QUOTED.finditer(text)),
    )


def _words(text: str) -> list[str]:
    """Lowercase words, possessives and stray apostrophes removed."""
    words = (match.group().lower().replace("’", "'") for match in _WORD.finditer(text))
    return [word.removesuffix("'s").strip("'") for word in words]


def _name_words(name: str) -> list[str]:
    """Words of an identifier: split on ``_``, ``-``, ``.`` and camelCase, lowercased."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", " ", name)
    return [word.lower() for word in re.split(r"[^A-Za-z0-9]+", spaced) if word and not word.isdigit()]


def _stem(word: str) -> str:
    # Synonym words stay whole so that "times" (multiply) never becomes "time" (clock).
    if word in _GROUPS_OF:
        return word
    for suffix, replacement in (("ies", "y"), ("ing", ""), ("s", "")):
        if word.endswith(suffix) and not word.endswith("ss") and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)] + replacement
    return word


def _forms(words: Iterable[str]) -> frozenset[str]:
    return frozenset(form for word in words for form in (word, _stem(word)))


def _find_day(text: str) -> str | None:
    match = _DAY.search(text)
    if match is None:
        return None
    day = match.group(1).lower()
    return "today" if day == "tonight" else day


def _find_expression(text: str) -> str | None:
    for pattern, symbol in _WORD_OPERATORS:
        text = pattern.sub(symbol, text)
    candidates = [
        match.group() for match in _EXPRESSION.finditer(text) if _HAS_OPERATOR.search(match.group())
    ]
    if not candidates:
        return None
    return " ".join(max(candidates, key=len).split())


def _find_conversion(text: str) -> _Conversion | None:
    for match in _CONVERSION.finditer(text):
        source, target = (_unit_word(match.group(group)) for group in (2, 3))
        if _unit_key(source) or _unit_key(target):
            return _Conversion(_to_number(match.group(1)), source, target)
    return None


def _unit_word(raw: str) -> str:
    return raw.replace("°", "").strip()


def _unit_key(word: str) -> str | None:
    return _UNIT_KEY.get(word.lower())


def _to_number(raw: str) -> int | float:
    return float(raw) if "." in raw else int(raw)


def _find_places(text: str) -> tuple[str, ...]:
    """Place names: capitalised words after "in"/"for"/"at" (with any joined by "and"), else a
    lowercase word after those, else the first capitalised word that is no common word."""
    for match in _PLACE_AFTER_PREPOSITION.finditer(text):
        first = _trim_place(match.group(1))
        if first:
            return (first, *_following_places(text, match.end()))
    for match in _LOWERCASE_PLACE.finditer(text):
        word = match.group(1)
        if _is_place_word(word):
            return (word.title(),)
    for match in _PLACE_ANYWHERE.finditer(text):
        place = _trim_place(match.group())
        if place:
            return (place,)
    return ()


def _following_places(text: str, position: int) -> list[str]:
    places: list[str] = []
    while (match := _MORE_PLACES.match(text, position)) is not None:
        place = _trim_place(match.group(1))
        if not place:
            break
        places.append(place)
        position = match.end()
    return places


def _trim_place(candidate: str) -> str:
    """The leading words of ``candidate`` up to the first that cannot be part of a place."""
    kept: list[str] = []
    for word in candidate.split():
        cleaned = word.rstrip(".'’-")
        if not _is_place_word(cleaned.lower()):
            break
        kept.append(cleaned)
    return " ".join(kept)


def _is_place_word(word: str) -> bool:
    return bool(word) and not (
        word in _STOPWORDS
        or word in _DAY_WORDS
        or word in _MONTHS
        or word in _UNIT_KEY
        or word in _GROUPS_OF
        or word.isdigit()
    )


# --- Choosing a tool ---------------------------------------------------------------------


@dataclass(frozen=True)
class _Terms:
    forms: frozenset[str]
    groups: frozenset[int]

    @classmethod
    def of(cls, words: Iterable[str]) -> _Terms:
        forms = _forms(words)
        return cls(forms, frozenset(group for form in forms for group in _GROUPS_OF.get(form, ())))


@dataclass(frozen=True)
class _Match:
    tool: _Tool
    score: int
    keyword: str | None  # the first question word that pointed at the tool


def _best_tool(tools: Sequence[_Tool], facts: _Facts) -> _Match:
    """The highest-scoring tool; the earliest offered wins a tie, so the choice is stable."""
    best = _score(tools[0], facts)
    for tool in tools[1:]:
        match = _score(tool, facts)
        if match.score > best.score:
            best = match
    return best


def _score(tool: _Tool, facts: _Facts) -> _Match:
    """Points per question word: 3 when it names the tool, 2 when a synonym does, 1 when the
    description mentions it or a synonym."""
    name = _Terms.of(word for word in _name_words(tool.name) if word not in _STOPWORDS)
    description = _Terms.of(word for word in _words(tool.description) if word not in _STOPWORDS)
    total = 0
    keyword: str | None = None
    for word in dict.fromkeys((*facts.words, *facts.intents)):
        said = _Terms.of([word])
        if said.forms & name.forms:
            points = 3
        elif said.groups & name.groups:
            points = 2
        elif said.forms & description.forms or said.groups & description.groups:
            points = 1
        else:
            points = 0
        if points and keyword is None and word in facts.words:
            keyword = word
        total += points
    return _Match(tool, total, keyword)


def _tool_named(name: str, tools: Sequence[_Tool]) -> _Tool:
    """The tool called ``name``, else the offered tool whose name is closest to it."""
    by_name = {tool.name: tool for tool in tools}
    if name in by_name:
        return by_name[name]
    closest = difflib.get_close_matches(name, list(by_name), n=1, cutoff=0.0)
    return by_name[closest[0]] if closest else tools[0]


# --- Filling arguments -------------------------------------------------------------------


@dataclass(frozen=True)
class _Slot:
    name: str
    schema: JSONDict
    required: bool
    kind: str


@dataclass
class _Fill:
    """State of filling one call: values such as numbers are used up in property order."""

    facts: _Facts
    keyword: str | None
    numbers: Iterator[int | float] = field(init=False)
    quoted: Iterator[str] = field(init=False)
    units_seen: int = 0

    def __post_init__(self) -> None:
        self.numbers = iter(self.facts.numbers)
        self.quoted = iter(self.facts.quoted)


@dataclass(frozen=True)
class _Filler:
    """How one kind of property gets its value.

    ``find`` returns None when the question holds nothing for it; a required property then
    gets the schema's ``default``, else ``fallback``. Optional properties are left out.
    ``keywords`` (matched against the property's name, then its description) and ``types``
    (JSON Schema types; empty means any) decide which properties are of this kind.
    """

    keywords: frozenset[str]
    types: frozenset[str]
    find: Callable[[_Slot, _Fill], JSONValue]
    fallback: Callable[[_Slot, _Fill], JSONValue]


def _find_place(slot: _Slot, fill: _Fill) -> JSONValue:
    return _within_enum(slot, fill.facts.places[0]) if fill.facts.places else None


def _find_day_value(slot: _Slot, fill: _Fill) -> JSONValue:
    return _within_enum(slot, fill.facts.day) if fill.facts.day else None


def _find_expression_value(slot: _Slot, fill: _Fill) -> JSONValue:
    return fill.facts.expression


def _find_unit(slot: _Slot, fill: _Fill) -> JSONValue:
    conversion = fill.facts.conversion
    words = set(_name_words(slot.name))
    if words & {"from", "source", "input", "origin", "original"}:
        wants_source = True
    elif words & {"to", "target", "output", "into", "destination"}:
        wants_source = False
    else:
        wants_source = fill.units_seen == 0
    fill.units_seen += 1
    if conversion is None:
        return None
    unit = conversion.source if wants_source else conversion.target
    options = _enum(slot.schema)
    if not options:
        return unit
    return next((option for option in options if _unit_key(option) == _unit_key(unit)), None)


def _find_enum(slot: _Slot, fill: _Fill) -> JSONValue:
    text = fill.facts.text.lower()
    for option in _enum(slot.schema):
        spellings = (option.lower(), *_OPERATION_WORDS.get(option.lower(), ()))
        if any(re.search(rf"(?<!\w){re.escape(spelling)}(?!\w)", text) for spelling in spellings):
            return option
    return None


def _find_number(slot: _Slot, fill: _Fill) -> JSONValue:
    number = next(fill.numbers, None)
    if isinstance(number, float) and number.is_integer() and "integer" in _types(slot.schema):
        return int(number)
    return number


def _find_quoted(slot: _Slot, fill: _Fill) -> JSONValue:
    return next(fill.quoted, None)


def _nothing(slot: _Slot, fill: _Fill) -> JSONValue:
    return None


def _first_option(slot: _Slot, fill: _Fill) -> JSONValue:
    options = _enum(slot.schema)
    return options[0] if options else ""


def _free_text(slot: _Slot, fill: _Fill) -> JSONValue:
    """The question after the word that pointed at the tool ("remember that X" gives "X"),
    else the whole question."""
    text = fill.facts.text
    if fill.keyword:
        match = re.search(rf"\b{re.escape(fill.keyword)}\w*", text, re.IGNORECASE)
        if match:
            text = text[match.end() :]
    text = re.sub(r"^(?:[\s:,;\-–—]+|(?:that|to|me|about|please|down)\b)*", "", text)
    return text.strip(" ?.!") or fill.facts.text.strip(" ?.!")


def _today(slot: _Slot, fill: _Fill) -> JSONValue:
    return "today"


def _empty_of_type(slot: _Slot, fill: _Fill) -> JSONValue:
    types = _types(slot.schema)
    if "array" in types:
        return []
    if "object" in types:
        return {}
    if types & {"number", "integer"}:
        return 0
    if "boolean" in types:
        return False
    return ""


_STRING = frozenset({"string"})
_FILLERS: dict[str, _Filler] = {
    "place": _Filler(
        frozenset(
            "city cities location place town country region address destination where village "
            "timezone area locality".split()
        ),
        _STRING,
        _find_place,
        _empty_of_type,
    ),
    "day": _Filler(frozenset("day date when weekday".split()), _STRING, _find_day_value, _today),
    "expression": _Filler(
        frozenset("expression expr formula equation calculation".split()),
        _STRING,
        _find_expression_value,
        _free_text,
    ),
    "unit": _Filler(frozenset("unit units currency".split()), _STRING, _find_unit, _first_option),
    "enum": _Filler(frozenset(), frozenset(), _find_enum, _first_option),
    "number": _Filler(frozenset(), frozenset({"number", "integer"}), _find_number, _empty_of_type),
    "boolean": _Filler(frozenset(), frozenset({"boolean"}), _nothing, _empty_of_type),
    "string": _Filler(frozenset(), _STRING, _find_quoted, _free_text),
    "other": _Filler(frozenset(), frozenset(), _nothing, _empty_of_type),
}
_KEYWORD_KINDS = ("place", "day", "expression", "unit")
_TYPE_KINDS = ("number", "boolean", "string")
# Bare names that mean a unit in a converter's schema ("from": "km", "to": "mi").
_UNIT_NAMES = frozenset({"from", "to", "source", "target"})


def _slots(tool: _Tool) -> list[_Slot]:
    properties = tool.parameters.get("properties")
    if not isinstance(properties, dict):
        return []
    required = _required_names(tool)
    slots: list[_Slot] = []
    for name, schema in properties.items():
        schema = schema if isinstance(schema, dict) else {}
        slots.append(_Slot(name, schema, name in required, _kind(name, schema)))
    return slots


def _kind(name: str, schema: JSONDict) -> str:
    """Which filler serves a property: a keyword in its name wins, then an enum, then a keyword
    in its description, then its type."""
    types = _types(schema)
    name_words = _forms(_name_words(name))
    description = schema.get("description")
    description_words = _forms(_words(description)) if isinstance(description, str) else frozenset()
    by_name = _keyword_kind(name_words, types)
    if by_name:
        return by_name
    if name.lower() in _UNIT_NAMES and not types - _STRING:
        return "unit"
    if _enum(schema):
        return "enum"
    by_description = _keyword_kind(description_words, types)
    if by_description:
        return by_description
    return next(
        (kind for kind in _TYPE_KINDS if types & _FILLERS[kind].types), "string" if not types else "other"
    )


def _keyword_kind(words: frozenset[str], types: frozenset[str]) -> str | None:
    for kind in _KEYWORD_KINDS:
        filler = _FILLERS[kind]
        if filler.keywords & words and (not types or types & filler.types):
            return kind
    return None


def _types(schema: JSONDict) -> frozenset[str]:
    declared = schema.get("type")
    if isinstance(declared, str):
        return frozenset({declared})
    if isinstance(declared, list):
        return frozenset(item for item in declared if isinstance(item, str) and item != "null")
    return frozenset()


def _enum(schema: JSONDict) -> list[str]:
    options = schema.get("enum")
    return [option for option in options if isinstance(option, str)] if isinstance(options, list) else []


def _within_enum(slot: _Slot, value: str) -> str | None:
    options = _enum(slot.schema)
    if not options:
        return value
    return next((option for option in options if option.lower() == value.lower()), None)


def _required_names(tool: _Tool) -> list[str]:
    required = tool.parameters.get("required")
    return [name for name in required if isinstance(name, str)] if isinstance(required, list) else []


def _fill_arguments(slots: Sequence[_Slot], fill: _Fill) -> JSONDict:
    arguments: JSONDict = {}
    for slot in slots:
        filler = _FILLERS[slot.kind]
        value = filler.find(slot, fill)
        if value is None:
            if not slot.required:
                continue
            value = slot.schema["default"] if "default" in slot.schema else filler.fallback(slot, fill)
        arguments[slot.name] = value
    return arguments


def _argument_sets(tool: _Tool, facts: _Facts, keyword: str | None) -> list[JSONDict]:
    """Arguments for one call, or one call per place when the question names several places
    ("in Beijing and Shanghai") and the tool takes a place."""
    slots = _slots(tool)
    arguments = _fill_arguments(slots, _Fill(facts, keyword))
    if len(facts.places) < 2:
        return [arguments]
    place_slots = [
        slot.name for slot in slots if slot.kind == "place" and arguments.get(slot.name) == facts.places[0]
    ]
    if not place_slots:
        return [arguments]
    return [arguments] + [
        {**arguments, **{name: place for name in place_slots}} for place in facts.places[1:]
    ]


# --- Misbehaving on request ----------------------------------------------------------------


def _drop_required_argument(call: _Call, tool: _Tool, offered: frozenset[str]) -> _Call:
    parsed: JSONValue = json.loads(call.arguments)
    if not isinstance(parsed, dict) or not parsed:
        return call
    victim = next((name for name in _required_names(tool) if name in parsed), next(iter(parsed)))
    del parsed[victim]
    return replace(call, arguments=_dump(parsed))


def _truncate_arguments(call: _Call) -> _Call:
    # Any proper prefix of a JSON object is invalid JSON, as a cut-off stream would be.
    return replace(call, arguments=call.arguments[: max(1, len(call.arguments) * 2 // 3)])


def _misname_tool(call: _Call, tool: _Tool, offered: frozenset[str]) -> _Call:
    prefix, separator, bare = call.name.rpartition("__")
    for candidate in (*_misspellings(bare), f"{bare}_v2", f"{bare}_v3"):
        name = f"{prefix}{separator}{candidate}"
        if name not in offered:
            return replace(call, name=name)
    return replace(call, name=f"{call.name}_unknown")


def _misspellings(word: str) -> list[str]:
    """Typos a model might make: drop the second of two vowels ("weather" → "wether"), or the
    last inner vowel ("calculate" → "calculte")."""
    typos = [re.sub(r"([aeiou])[aeiou]", r"\1", word, count=1)]
    inner = [index for index, char in enumerate(word[:-1]) if char in "aeiou"]
    if inner:
        typos.append(word[: inner[-1]] + word[inner[-1] + 1 :])
    return [typo for typo in typos if typo != word]


# Applied in this order to the first call of the first decision after the user's message.
_MISBEHAVIOURS: dict[str, Callable[[_Call, _Tool, frozenset[str]], _Call]] = {
    "missing-argument": _drop_required_argument,
    "unknown-tool": _misname_tool,
}
# Misbehaviours of form rather than content: each format's writer applies them its own way.
_FLAWS = frozenset({"malformed-json", "code-fence"})


# --- Responding ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Result:
    call: _Call
    text: str
    is_error: bool


@dataclass(frozen=True)
class _Round:
    calls: tuple[_Call, ...]
    results: tuple[_Result, ...]


@dataclass(frozen=True)
class _Turn:
    """What the demo decided, before it is written in the request's format."""

    content: str | None
    calls: tuple[_Call, ...] = ()
    flaws: frozenset[str] = frozenset()  # form misbehaviours the writer must apply


def _respond(request: _Request, question: _Question) -> _Turn:
    rounds = _rounds_after(request.messages, _last_user_index(request.messages))
    if rounds:
        if request.can_call and _needs_repair(rounds):
            return _repair(request, question, rounds[-1])
        return _Turn(_final_answer(rounds))
    if not request.can_call:
        return _Turn(_plain_answer(request, question))
    return _decide(request, question)


def _rounds_after(messages: Sequence[_Message], start: int) -> list[_Round]:
    """The tool-call rounds (assistant calls and their results) after message ``start``."""
    rounds: list[_Round] = []
    for message in messages[start + 1 :]:
        if message.role == "assistant" and message.calls:
            rounds.append(_Round(message.calls, ()))
        elif message.role == "tool" and rounds:
            latest = rounds[-1]
            call = next((call for call in latest.calls if call.id == message.tool_call_id), None)
            if call is not None:
                result = _Result(call, message.text, _is_error_result(message.text))
                rounds[-1] = replace(latest, results=(*latest.results, result))
    return rounds


_ERROR_PHRASES = re.compile(
    r"^\W*(?:tool |mcp )?error\b|\binvalid (?:arguments?|json|input|params|parameters?|value)\b"
    r"|\bunknown tool\b|\bno such tool\b|\bis a required property\b|\bvalidation (?:error|failed)\b"
    r"|\bcould not (?:parse|decode)\b",
    re.IGNORECASE,
)


def _is_error_result(text: str) -> bool:
    """Whether a tool message reports a failure, as hosts word them ("Error: invalid arguments
    for tool X: ...") or as JSON with an ``error`` or ``isError`` field."""
    if _ERROR_PHRASES.search(text):
        return True
    parsed = _json_or_none(text)
    return isinstance(parsed, dict) and (bool(parsed.get("error")) or parsed.get("isError") is True)


def _needs_repair(rounds: Sequence[_Round]) -> bool:
    """Repair once per question: only when the latest round failed and no earlier one did."""
    latest_failed = any(result.is_error for result in rounds[-1].results)
    earlier_failed = any(result.is_error for past in rounds[:-1] for result in past.results)
    return latest_failed and not earlier_failed


def _first_attempt(messages: Sequence[_Message]) -> bool:
    """Whether nothing was answered yet after the question (a re-ask follows a reply)."""
    return not any(message.role == "assistant" for message in messages[_last_user_index(messages) + 1 :])


def _decide(request: _Request, question: _Question) -> _Turn:
    if not _first_attempt(request.messages):
        # Asked again after a reply that broke the rules: this time the demo behaves.
        question = replace(question, markers=frozenset())
    facts = _read_facts(question.text)
    match = _best_tool(request.candidates(), facts)
    if "no-tool" in question.markers:
        fits = f" The tool {match.tool.name} would fit." if match.score else ""
        return _Turn(f"{ANSWER_PREFIX}I answer without calling a tool, as [demo:no-tool] asks.{fits}")
    if request.choice.mode == "auto" and match.score == 0:
        return _Turn(_no_fit_answer(question, request.candidates()))
    argument_sets = _argument_sets(match.tool, facts, match.keyword)
    if not request.parallel:
        argument_sets = argument_sets[:1]
    calls = [
        _new_call(request, index, match.tool.name, arguments) for index, arguments in enumerate(argument_sets)
    ]
    offered = frozenset(tool.name for tool in request.tools)
    for marker, misbehave in _MISBEHAVIOURS.items():
        if marker in question.markers:
            calls[0] = misbehave(calls[0], match.tool, offered)
    return _Turn(None, tuple(calls), question.markers & _FLAWS)


def _repair(request: _Request, question: _Question, latest: _Round) -> _Turn:
    """Call again each tool whose result was an error, with freshly filled arguments; a call
    to an unknown name goes to the offered tool with the closest name."""
    facts = _read_facts(question.text)
    candidates = request.candidates()
    calls: list[_Call] = []
    for result in latest.results:
        if not result.is_error:
            continue
        tool = _tool_named(result.call.name, candidates)
        argument_sets = _argument_sets(tool, facts, _score(tool, facts).keyword)
        siblings = [call.id for call in latest.calls if call.name == result.call.name]
        arguments = argument_sets[min(siblings.index(result.call.id), len(argument_sets) - 1)]
        calls.append(_new_call(request, len(calls), tool.name, arguments))
        if not request.parallel:
            break
    return _Turn(None, tuple(calls))


def _final_answer(rounds: Sequence[_Round]) -> str:
    """One sentence per tool result; failed results of earlier rounds were repaired since and
    are left out."""
    sentences = [
        _describe_result(result)
        for position, past in enumerate(rounds)
        for result in past.results
        if not (result.is_error and position < len(rounds) - 1)
    ]
    return ANSWER_PREFIX + (" ".join(sentences) or "The tools returned nothing.")


def _describe_result(result: _Result) -> str:
    name = result.call.name
    if result.is_error:
        return f"The tool {name} failed: {_quote(result.text)}."
    parsed = _json_or_none(result.text)
    if isinstance(parsed, dict) and isinstance(parsed.get("summary"), str) and str(parsed["summary"]).strip():
        return f"{name} reports: {_sentence(str(parsed['summary']))}"
    if not result.text.strip():
        return f"{name} returned nothing."
    return f"{name} returned: {_quote(result.text)}."


def _plain_answer(request: _Request, question: _Question) -> str:
    if not question.text:
        return f"{ANSWER_PREFIX}There is no user question to answer."
    reason = "no tools were offered" if not request.tools else 'tool_choice is "none"'
    return (
        f"{ANSWER_PREFIX}You asked: {_quote(question.text)}. I am an offline demo model with no "
        f"knowledge of my own, and {reason}, so I cannot look this up."
    )


def _no_fit_answer(question: _Question, tools: Sequence[_Tool]) -> str:
    names = ", ".join(tool.name for tool in tools)
    return (
        f"{ANSWER_PREFIX}None of the offered tools ({names}) fits the question "
        f"{_quote(question.text)}, so I answer without calling one."
    )


def _quote(text: str) -> str:
    """``text`` in double quotes, whitespace collapsed, cut to about 500 characters."""
    collapsed = " ".join(text.split())
    if len(collapsed) > _QUOTE_LIMIT:
        collapsed = collapsed[:_QUOTE_LIMIT].rstrip() + "…"
    return f'"{collapsed}"'


def _sentence(text: str) -> str:
    text = " ".join(text.split())
    return text if text.endswith((".", "!", "?")) else f"{text}."


# --- Speaking each paradigm's format ---------------------------------------------------------
#
# The inspector's text paradigms put the tools in the system prompt and the calls and results
# in the message text. The demo reads them back from there, as a model would, by the phrases
# those prompts contain, decides as usual, and writes the reply in the convention it was taught.


@dataclass(frozen=True)
class _Written:
    """The reply as it goes on the wire: text content, native tool calls, or both."""

    content: str | None
    calls: tuple[_Call, ...] = ()


def _text_reply(request: _Request, turn: _Turn) -> _Written:
    return _Written(turn.content or "")


@dataclass(frozen=True)
class _Format:
    """One way a request asks the demo to speak.

    ``detects`` recognises the request (its ``response_format``, or a phrase of the system
    prompt); ``decode`` reads tools, tool_choice, calls and results back out of it into the form
    the responder works on; ``respond`` decides; ``encode`` writes the decision.
    """

    key: str
    detects: Callable[[_Request], bool]
    decode: Callable[[_Request], _Request]
    encode: Callable[[_Request, _Turn], _Written] = _text_reply
    respond: Callable[[_Request, _Question], _Turn] = _respond


def _understand(request: _Request) -> tuple[_Format, _Request]:
    """The format the request asks for, and the request as the responder needs it."""
    speaking = next(candidate for candidate in _FORMATS if candidate.detects(request))
    return speaking, speaking.decode(request)


_XML_PHRASE = "<function_calls>"
_JSON_PHRASES = ('{"tool": "TOOL_NAME"', '"Tool result for')
_LABEL_PHRASE = "You route a user's request to one tool"
_FILL_PHRASE = "You fill in the arguments for the tool"
_ANSWER_PHRASE = "Answer the user's request in plain text; do not call tools"
_REQUIRED_PHRASE = "A tool call is required"
_CORRECTION = re.compile(r"\s*Correction:")
_TOOLS_BLOCK = re.compile(r"<tools>\n(.*?)\n</tools>", re.DOTALL)
_LABEL_LINE = re.compile(r"^- ([A-Za-z0-9_.-]+): (.*)$", re.MULTILINE)
_XML_RESULT = re.compile(
    r'<function_result\s+call_id="([^"]*)"\s+name="([^"]*)"(\s+is_error="true")?\s*>\n?(.*?)\n?</function_result>',
    re.DOTALL,
)
_JSON_RESULT = re.compile(r"^Tool (result|error) for (\S+) \(call id (\S*)\):\n?", re.MULTILINE)
# The structured paradigm's schema name (formats without schema names are matched by shape).
DECISION_SCHEMA = "tool_decision"


def _system_text(request: _Request) -> str:
    return "\n".join(message.text for message in request.messages if message.role in ("system", "developer"))


def _says(*phrases: str) -> Callable[[_Request], bool]:
    def detects(request: _Request) -> bool:
        system = _system_text(request)
        return any(phrase in system for phrase in phrases)

    return detects


def _always(request: _Request) -> bool:
    return True


def _as_is(request: _Request) -> _Request:
    return request


@dataclass(frozen=True)
class _Posted:
    """A tool result as a text paradigm posts it in a user message."""

    call_id: str
    name: str
    text: str
    is_error: bool


def _xml_results(text: str) -> list[_Posted]:
    return [
        _Posted(match.group(1), match.group(2), match.group(4), bool(match.group(3)))
        for match in _XML_RESULT.finditer(text)
    ]


def _json_results(text: str) -> list[_Posted]:
    headers = list(_JSON_RESULT.finditer(text))
    if not headers or headers[0].start() != 0:
        return []
    ends = [header.start() for header in headers[1:]] + [len(text)]
    return [
        _Posted(
            header.group(3),
            header.group(2),
            text[header.end() : end].rstrip("\n"),
            header.group(1) == "error",
        )
        for header, end in zip(headers, ends, strict=True)
    ]


def _text_history(
    messages: Sequence[_Message], read_results: Callable[[str], list[_Posted]]
) -> tuple[_Message, ...]:
    """Messages with posted results turned back into tool messages (answering calls of the
    assistant message before them) and corrections into instructions, not questions."""
    decoded: list[_Message] = []
    for message in messages:
        posted = read_results(message.text) if message.role == "user" else []
        if posted:
            _attach_calls(decoded, posted)
            decoded.extend(_Message("tool", _result_text(item), tool_call_id=item.call_id) for item in posted)
        elif message.role == "user" and _CORRECTION.match(message.text):
            decoded.append(_Message("system", message.text))
        else:
            decoded.append(message)
    return tuple(decoded)


def _attach_calls(decoded: list[_Message], posted: Sequence[_Posted]) -> None:
    # The results name their calls, so the calls need not be parsed out of the reply text
    # (which may be broken on purpose).
    index = max((i for i, message in enumerate(decoded) if message.role == "assistant"), default=None)
    if index is None:
        return
    calls = tuple(_Call(item.call_id, item.name, "{}") for item in posted)
    decoded[index] = replace(decoded[index], calls=decoded[index].calls + calls)


def _result_text(item: _Posted) -> str:
    if item.is_error and not _is_error_result(item.text):
        return f"Error: {item.text}"
    return item.text


def _tools_listed(system: str) -> tuple[_Tool, ...]:
    """Tools from a ``<tools>`` block: one JSON object per line (name, description, parameters)."""
    match = _TOOLS_BLOCK.search(system)
    tools: list[_Tool] = []
    for line in match.group(1).splitlines() if match else []:
        parsed = _json_or_none(line)
        if isinstance(parsed, dict) and isinstance(parsed.get("name"), str):
            description = parsed.get("description")
            parameters = parsed.get("parameters")
            tools.append(
                _Tool(
                    str(parsed["name"]),
                    description if isinstance(description, str) else "",
                    parameters if isinstance(parameters, dict) else {},
                )
            )
    return tuple(tools)


def _tools_named(system: str) -> tuple[_Tool, ...]:
    """Tools from ``- name: description`` lines (a label prompt has no schemas)."""
    return tuple(_Tool(match.group(1), match.group(2), {}) for match in _LABEL_LINE.finditer(system))


def _no_tools(system: str) -> tuple[_Tool, ...]:
    return ()


def _prompted(
    read_tools: Callable[[str], tuple[_Tool, ...]],
    read_results: Callable[[str], list[_Posted]],
    *,
    required: bool = False,
) -> Callable[[_Request], _Request]:
    """A decoder for a text paradigm: tools from its system prompt, results from its messages."""

    def decode(request: _Request) -> _Request:
        system = _system_text(request)
        tools = read_tools(system)
        if not tools:
            choice = _ToolChoice("none")
        elif required or _REQUIRED_PHRASE in system:
            choice = _ToolChoice("required")
        else:
            choice = _ToolChoice("auto")
        return replace(
            request, messages=_text_history(request.messages, read_results), tools=tools, choice=choice
        )

    return decode


# The structured paradigm's schema: {"decision": anyOf [call_tool branches..., final_answer]}.


@dataclass(frozen=True)
class _Branch:
    tool: _Tool
    keys: tuple[str, ...]  # every argument the strict schema lists (optional ones are nullable)
    encoded: bool  # arguments travel as a JSON string in "arguments_json"


def _format_type(response_format: JSONDict | None) -> str | None:
    kind = response_format.get("type") if response_format else None
    return kind if isinstance(kind, str) else None


def _json_schema_of(response_format: JSONDict | None) -> JSONDict:
    spec = response_format.get("json_schema") if response_format else None
    return spec if isinstance(spec, dict) else {}


def _asks_structured(request: _Request) -> bool:
    return (
        _format_type(request.response_format) == "json_schema"
        and _json_schema_of(request.response_format).get("name") == DECISION_SCHEMA
    )


def _decision_branches(response_format: JSONDict | None) -> tuple[dict[str, _Branch], bool]:
    """The tool branches by name, and whether a final answer is allowed."""
    schema = _json_schema_of(response_format).get("schema")
    decision = _path(schema, "properties", "decision")
    union = decision.get("anyOf") if isinstance(decision.get("anyOf"), list) else [decision]
    branches: dict[str, _Branch] = {}
    answer = False
    for item in union if isinstance(union, list) else []:
        properties = _path(item, "properties")
        action = _path(properties, "action").get("enum")
        if action == ["final_answer"]:
            answer = True
            continue
        names = _path(properties, "tool").get("enum")
        if (
            action != ["call_tool"]
            or not isinstance(names, list)
            or not names
            or not isinstance(names[0], str)
        ):
            continue
        description = item.get("description") if isinstance(item, dict) else None
        branch = _branch(names[0], description if isinstance(description, str) else "", properties)
        branches[branch.tool.name] = branch
    return branches, answer


def _branch(name: str, description: str, properties: JSONDict) -> _Branch:
    if "arguments_json" in properties:
        # The relaxation quotes the real schema after "JSON Schema: " in its description.
        text = str(_path(properties, "arguments_json").get("description", ""))
        schema = _json_or_none(text.partition("JSON Schema: ")[2])
        return _Branch(_Tool(name, description, schema if isinstance(schema, dict) else {}), (), True)
    arguments = _path(properties, "arguments")
    listed = _path(arguments, "properties")
    optional = {key for key, value in listed.items() if isinstance(value, dict) and _accepts_null(value)}
    # A strict schema lists every property as required; the nullable ones are really optional.
    required: list[JSONValue] = [key for key in listed if key not in optional]
    return _Branch(_Tool(name, description, {**arguments, "required": required}), tuple(listed), False)


def _accepts_null(schema: JSONDict) -> bool:
    declared = schema.get("type")
    if declared == "null" or (isinstance(declared, list) and "null" in declared):
        return True
    union = schema.get("anyOf")
    return isinstance(union, list) and any(isinstance(item, dict) and _accepts_null(item) for item in union)


def _path(value: JSONValue, *keys: str) -> JSONDict:
    """The object at ``keys`` inside ``value``, or an empty one."""
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value if isinstance(value, dict) else {}


def _decode_structured(request: _Request) -> _Request:
    branches, answer = _decision_branches(request.response_format)
    tools = tuple(branch.tool for branch in branches.values())
    if not tools:
        choice = _ToolChoice("none")
    else:
        choice = _ToolChoice("auto" if answer else "required")
    return replace(
        request, messages=_text_history(request.messages, _json_results), tools=tools, choice=choice
    )


# Writers. Form misbehaviours (``_Turn.flaws``) are applied here, each format its own way.


def _with_fence(text: str, language: str, flaws: frozenset[str]) -> str:
    return f"```{language}\n{text}\n```" if "code-fence" in flaws else text


def _cut_closers(text: str, flaws: frozenset[str]) -> str:
    # A reply cut off before its closing brackets, as when a stream ends early.
    return text.rstrip("}]") if "malformed-json" in flaws else text


def _native_reply(request: _Request, turn: _Turn) -> _Written:
    calls = turn.calls
    if calls and "code-fence" in turn.flaws:
        # The call written as text: what a server whose tool parser missed the call returns.
        shown: list[JSONValue] = [
            {"name": call.name, "arguments": _json_or_none(call.arguments)} for call in calls
        ]
        return _Written(_with_fence(_dump(shown[0] if len(shown) == 1 else shown), "json", turn.flaws))
    if calls and "malformed-json" in turn.flaws:
        calls = (_truncate_arguments(calls[0]), *calls[1:])
    return _Written(turn.content, calls)


def _xml_reply(request: _Request, turn: _Turn) -> _Written:
    if not turn.calls:
        return _Written(turn.content or "")
    invokes = "\n".join(_xml_invoke(call) for call in turn.calls)
    text = f"<function_calls>\n{invokes}\n</function_calls>"
    if "malformed-json" in turn.flaws:
        text = text[: text.rfind("</invoke>")].rstrip()
    return _Written(_with_fence(text, "xml", turn.flaws))


def _xml_invoke(call: _Call) -> str:
    arguments = _json_or_none(call.arguments)
    parameters = "".join(
        f'<parameter name="{xml_escape(name)}">{xml_escape(value if isinstance(value, str) else _dump(value))}'
        "</parameter>\n"
        for name, value in (arguments.items() if isinstance(arguments, dict) else ())
    )
    return f'<invoke name="{xml_escape(call.name)}">\n{parameters}</invoke>'


def _json_reply(request: _Request, turn: _Turn) -> _Written:
    if not turn.calls:
        return _Written(turn.content or "")
    shown = [{"tool": call.name, "arguments": _json_or_none(call.arguments)} for call in turn.calls]
    text = json.dumps(shown[0] if len(shown) == 1 else shown, ensure_ascii=False)
    return _Written(_with_fence(_cut_closers(text, turn.flaws), "json", turn.flaws))


def _structured_reply(request: _Request, turn: _Turn) -> _Written:
    decision: JSONDict
    if not turn.calls:
        decision = {"action": "final_answer", "answer": turn.content or ""}
    else:
        # One call per decision: the schema has a single tool slot.
        call = turn.calls[0]
        branch = _decision_branches(request.response_format)[0].get(call.name)
        decision = {"action": "call_tool", "tool": call.name}
        if branch is not None and branch.encoded:
            decision["arguments_json"] = call.arguments
        else:
            arguments = _json_or_none(call.arguments)
            given = arguments if isinstance(arguments, dict) else {}
            # Strict mode makes every key present; what the demo leaves out is written as null.
            keys = branch.keys if branch is not None else tuple(given)
            decision["arguments"] = {key: given.get(key) for key in keys}
    text = json.dumps({"decision": decision}, ensure_ascii=False)
    return _Written(_with_fence(_cut_closers(text, turn.flaws), "json", turn.flaws))


def _label_reply(request: _Request, turn: _Turn) -> _Written:
    return _Written(turn.calls[0].name if turn.calls else "none")


def _arguments_reply(request: _Request, turn: _Turn) -> _Written:
    if not turn.calls:
        return _Written(turn.content or "")
    return _Written(_with_fence(_cut_closers(turn.calls[0].arguments, turn.flaws), "json", turn.flaws))


def _respond_with_arguments(request: _Request, question: _Question) -> _Turn:
    """For a fill prompt the tool is already chosen: repair a failed call, else decide anew."""
    rounds = _rounds_after(request.messages, _last_user_index(request.messages))
    if rounds and _needs_repair(rounds):
        return _repair(request, question, rounds[-1])
    return _decide(request, question)


# Tried in order: the most specific signals first, native (the wire's own form) last.
_FORMATS: tuple[_Format, ...] = (
    _Format("structured", _asks_structured, _decode_structured, _structured_reply),
    _Format("intent-label", _says(_LABEL_PHRASE), _prompted(_tools_named, _json_results), _label_reply),
    _Format(
        "intent-arguments",
        _says(_FILL_PHRASE),
        _prompted(_tools_listed, _json_results, required=True),
        _arguments_reply,
        _respond_with_arguments,
    ),
    _Format("intent-answer", _says(_ANSWER_PHRASE), _prompted(_no_tools, _json_results)),
    _Format("prompt-xml", _says(_XML_PHRASE), _prompted(_tools_listed, _xml_results), _xml_reply),
    _Format("prompt-json", _says(*_JSON_PHRASES), _prompted(_tools_listed, _json_results), _json_reply),
    _Format("native", _always, _as_is, _native_reply),
)


# --- Structured-output schemas: what strict mode refuses ----------------------------------------

_STRICT_FORBIDDEN = ("allOf", "not", "dependentRequired", "dependentSchemas", "if", "then", "else")


def _check_response_format(response_format: JSONDict | None) -> None:
    """Refuse a ``response_format`` OpenAI would refuse, with its wording where known.

    Raises:
        _RequestError: an unknown type, a missing schema name, or a strict schema outside the
            strict subset (docs/wire-formats.md §2).
    """
    if response_format is None:
        return
    kind = _format_type(response_format)
    if kind not in ("text", "json_object", "json_schema"):
        raise _RequestError(
            f"Invalid value: '{kind}'. Supported values are: 'text', 'json_object', and 'json_schema'.",
            param="response_format.type",
            code="invalid_value",
        )
    if kind != "json_schema":
        return
    spec = _required_object(response_format, "json_schema", "response_format")
    name = _required_string(spec, "name", "response_format.json_schema")
    schema = spec.get("schema")
    if spec.get("strict") is True and isinstance(schema, dict):
        problem = _strict_problem(schema)
        if problem:
            raise _RequestError(
                f"Invalid schema for response_format '{name}': {problem}",
                param="response_format",
                code="invalid_json_schema",
            )


def _strict_problem(schema: JSONDict) -> str | None:
    if schema.get("type") != "object":
        return f"schema must be a JSON Schema of 'type: \"object\"', got 'type: \"{schema.get('type')}\"'."
    return _strict_node(schema, ())


def _strict_node(node: JSONValue, context: tuple[str, ...]) -> str | None:
    if not isinstance(node, dict):
        return None
    for keyword in _STRICT_FORBIDDEN:
        if keyword in node:
            return f"In context={context!r}, '{keyword}' is not permitted."
    properties = node.get("properties")
    if isinstance(properties, dict) or node.get("type") == "object":
        if node.get("additionalProperties") is not False:
            return (
                f"In context={context!r}, 'additionalProperties' is required to be supplied and to be false."
            )
        required = node.get("required")
        listed = required if isinstance(required, list) else []
        missing = [key for key in (properties if isinstance(properties, dict) else {}) if key not in listed]
        if missing:
            return (
                f"In context={context!r}, 'required' is required to be supplied and to be an array "
                f"including every key in properties. Missing '{missing[0]}'."
            )
    children: list[tuple[tuple[str, ...], JSONValue]] = []
    for key in ("properties", "$defs"):
        group = node.get(key)
        if isinstance(group, dict):
            children += [((*context, key, name), child) for name, child in group.items()]
    union = node.get("anyOf")
    if isinstance(union, list):
        children += [((*context, "anyOf", str(index)), child) for index, child in enumerate(union)]
    if "items" in node:
        children.append(((*context, "items"), node["items"]))
    return next((problem for path, child in children if (problem := _strict_node(child, path))), None)


# --- The wire body -------------------------------------------------------------------------


def _new_call(request: _Request, index: int, name: str, arguments: JSONDict) -> _Call:
    return _Call(_call_id(request.fingerprint, index), name, _dump(arguments))


def _call_id(fingerprint: str, index: int) -> str:
    """``call_`` + 24 base-62 characters from the request and the call's position."""
    number = int.from_bytes(hashlib.sha256(f"{fingerprint}#{index}".encode()).digest(), "big")
    characters: list[str] = []
    while len(characters) < 24:
        number, remainder = divmod(number, len(_ID_ALPHABET))
        characters.append(_ID_ALPHABET[remainder])
    return "call_" + "".join(characters)


def _completion_body(request: _Request, turn: _Written) -> JSONDict:
    message: JSONDict = {"role": "assistant", "content": turn.content, "refusal": None, "annotations": []}
    if turn.calls:
        tool_calls: list[JSONValue] = [
            {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
            for call in turn.calls
        ]
        message["tool_calls"] = tool_calls
    prompt_tokens = _approximate_tokens(request)
    completion_tokens = _count_tokens(turn.content or "") + sum(
        _count_tokens(call.name) + _count_tokens(call.arguments) for call in turn.calls
    )
    return {
        "id": "chatcmpl-demo" + hashlib.sha256(request.messages_fingerprint.encode()).hexdigest()[:24],
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.model,
        "system_fingerprint": "demo",
        "service_tier": "default",
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if turn.calls else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def _approximate_tokens(request: _Request) -> int:
    """A crude stand-in for the prompt's token count: words and punctuation marks in the
    messages, the calls they replay and the tool definitions. Not a real tokenizer."""
    texts = [message.text for message in request.messages]
    texts += [f"{call.name} {call.arguments}" for message in request.messages for call in message.calls]
    texts += [f"{tool.name} {tool.description} {_dump(tool.parameters)}" for tool in request.tools]
    return sum(_count_tokens(text) for text in texts)


def _count_tokens(text: str) -> int:
    return len(re.findall(r"\w+|[^\w\s]", text))


def _dump(value: JSONValue) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _canonical(value: JSONValue) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _json_or_none(text: str) -> JSONValue:
    try:
        parsed: JSONValue = json.loads(text)
    except ValueError:
        return None
    return parsed
