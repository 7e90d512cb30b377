"""Which format a reply speaks, and writing it in that format.

The inspector's text paradigms put the tools in the system prompt and the calls and results in
the message text; the demo reads them back from there by the phrases those prompts contain,
decides as usual (:mod:`conversations.demo.replies`), and writes the reply in the convention it
was taught: XML or JSON calls, an intent label, bare arguments, the ``tool_decision`` structured
output, or native ``tool_calls`` (:data:`_FORMATS`, most specific first). Also the checks a
strict structured-output endpoint makes on the schema it is given.

Pure Python: no Django, no I/O, no randomness.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from xml.sax.saxutils import escape as xml_escape

from conversations.demo.replies import (
    Turn,
    decide,
    is_error_result,
    needs_repair,
    repair,
    respond_to,
    rounds_after,
)
from conversations.demo.request import (
    Call,
    Message,
    Request,
    RequestError,
    Tool,
    ToolChoice,
    dump,
    json_or_none,
    required_object,
    required_string,
)
from conversations.demo.scenarios import truncate_arguments
from conversations.demo.understanding import Question, last_user_index
from conversations.typealias import JSONDict, JSONValue

# --- Speaking each paradigm's format ---------------------------------------------------------
#
# The inspector's text paradigms put the tools in the system prompt and the calls and results
# in the message text. The demo reads them back from there, as a model would, by the phrases
# those prompts contain, decides as usual, and writes the reply in the convention it was taught.


@dataclass(frozen=True)
class Written:
    """The reply as it goes on the wire: text content, native tool calls, or both."""

    content: str | None
    calls: tuple[Call, ...] = ()


def _text_reply(request: Request, turn: Turn) -> Written:
    return Written(turn.content or "")


@dataclass(frozen=True)
class _Format:
    """One way a request asks the demo to speak.

    ``detects`` recognises the request (its ``response_format``, or a phrase of the system
    prompt); ``decode`` reads tools, tool_choice, calls and results back out of it into the form
    the responder works on; ``respond`` decides; ``encode`` writes the decision.
    """

    key: str
    detects: Callable[[Request], bool]
    decode: Callable[[Request], Request]
    encode: Callable[[Request, Turn], Written] = _text_reply
    respond: Callable[[Request, Question], Turn] = respond_to


def understand(request: Request) -> tuple[_Format, Request]:
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


def _system_text(request: Request) -> str:
    return "\n".join(message.text for message in request.messages if message.role in ("system", "developer"))


def _says(*phrases: str) -> Callable[[Request], bool]:
    def detects(request: Request) -> bool:
        system = _system_text(request)
        return any(phrase in system for phrase in phrases)

    return detects


def _always(request: Request) -> bool:
    return True


def _as_is(request: Request) -> Request:
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
    messages: Sequence[Message], read_results: Callable[[str], list[_Posted]]
) -> tuple[Message, ...]:
    """Messages with posted results turned back into tool messages (answering calls of the
    assistant message before them) and corrections into instructions, not questions."""
    decoded: list[Message] = []
    # Where the last assistant message is in ``decoded`` (None: none yet), kept as it is read.
    last_assistant: int | None = None
    for message in messages:
        posted = read_results(message.text) if message.role == "user" else []
        if posted:
            if last_assistant is not None:
                _attach_calls(decoded, last_assistant, posted)
            decoded.extend(Message("tool", result_text(item), tool_call_id=item.call_id) for item in posted)
        elif message.role == "user" and _CORRECTION.match(message.text):
            decoded.append(Message("system", message.text))
        else:
            if message.role == "assistant":
                last_assistant = len(decoded)
            decoded.append(message)
    return tuple(decoded)


def _attach_calls(decoded: list[Message], index: int, posted: Sequence[_Posted]) -> None:
    # The results name their calls, so the calls need not be parsed out of the reply text
    # (which may be broken on purpose).
    calls = tuple(Call(item.call_id, item.name, "{}") for item in posted)
    decoded[index] = replace(decoded[index], calls=decoded[index].calls + calls)


def result_text(item: _Posted) -> str:
    if item.is_error and not is_error_result(item.text):
        return f"Error: {item.text}"
    return item.text


def _tools_listed(system: str) -> tuple[Tool, ...]:
    """Tools from a ``<tools>`` block: one JSON object per line (name, description, parameters)."""
    match = _TOOLS_BLOCK.search(system)
    tools: list[Tool] = []
    for line in match.group(1).splitlines() if match else []:
        parsed = json_or_none(line)
        if isinstance(parsed, dict) and isinstance(parsed.get("name"), str):
            description = parsed.get("description")
            parameters = parsed.get("parameters")
            tools.append(
                Tool(
                    str(parsed["name"]),
                    description if isinstance(description, str) else "",
                    parameters if isinstance(parameters, dict) else {},
                )
            )
    return tuple(tools)


def _tools_named(system: str) -> tuple[Tool, ...]:
    """Tools from ``- name: description`` lines (a label prompt has no schemas)."""
    return tuple(Tool(match.group(1), match.group(2), {}) for match in _LABEL_LINE.finditer(system))


def _no_tools(system: str) -> tuple[Tool, ...]:
    return ()


def _prompted(
    read_tools: Callable[[str], tuple[Tool, ...]],
    read_results: Callable[[str], list[_Posted]],
    *,
    required: bool = False,
) -> Callable[[Request], Request]:
    """A decoder for a text paradigm: tools from its system prompt, results from its messages."""

    def decode(request: Request) -> Request:
        system = _system_text(request)
        tools = read_tools(system)
        if not tools:
            choice = ToolChoice("none")
        elif required or _REQUIRED_PHRASE in system:
            choice = ToolChoice("required")
        else:
            choice = ToolChoice("auto")
        return replace(
            request, messages=_text_history(request.messages, read_results), tools=tools, choice=choice
        )

    return decode


# The structured paradigm's schema: {"decision": anyOf [call_tool branches..., final_answer]}.


@dataclass(frozen=True)
class _Branch:
    tool: Tool
    keys: tuple[str, ...]  # every argument the strict schema lists (optional ones are nullable)
    encoded: bool  # arguments travel as a JSON string in "arguments_json"


def format_type(response_format: JSONDict | None) -> str | None:
    kind = response_format.get("type") if response_format else None
    return kind if isinstance(kind, str) else None


def _json_schema_of(response_format: JSONDict | None) -> JSONDict:
    spec = response_format.get("json_schema") if response_format else None
    return spec if isinstance(spec, dict) else {}


def _asks_structured(request: Request) -> bool:
    return (
        format_type(request.response_format) == "json_schema"
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
        schema = json_or_none(text.partition("JSON Schema: ")[2])
        return _Branch(Tool(name, description, schema if isinstance(schema, dict) else {}), (), True)
    arguments = _path(properties, "arguments")
    listed = _path(arguments, "properties")
    optional = {key for key, value in listed.items() if isinstance(value, dict) and _accepts_null(value)}
    # A strict schema lists every property as required; the nullable ones are really optional.
    required: list[JSONValue] = [key for key in listed if key not in optional]
    return _Branch(Tool(name, description, {**arguments, "required": required}), tuple(listed), False)


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


def _decode_structured(request: Request) -> Request:
    branches, answer = _decision_branches(request.response_format)
    tools = tuple(branch.tool for branch in branches.values())
    if not tools:
        choice = ToolChoice("none")
    else:
        choice = ToolChoice("auto" if answer else "required")
    return replace(
        request, messages=_text_history(request.messages, _json_results), tools=tools, choice=choice
    )


# Writers. Form misbehaviours (``Turn.flaws``) are applied here, each format its own way.


def _with_fence(text: str, language: str, flaws: frozenset[str]) -> str:
    return f"```{language}\n{text}\n```" if "code-fence" in flaws else text


def _cut_closers(text: str, flaws: frozenset[str]) -> str:
    # A reply cut off before its closing brackets, as when a stream ends early.
    return text.rstrip("}]") if "malformed-json" in flaws else text


def _native_reply(request: Request, turn: Turn) -> Written:
    calls = turn.calls
    if calls and "code-fence" in turn.flaws:
        # The call written as text: what a server whose tool parser missed the call returns.
        shown: list[JSONValue] = [
            {"name": call.name, "arguments": json_or_none(call.arguments)} for call in calls
        ]
        return Written(_with_fence(dump(shown[0] if len(shown) == 1 else shown), "json", turn.flaws))
    if calls and "malformed-json" in turn.flaws:
        calls = (truncate_arguments(calls[0]), *calls[1:])
    return Written(turn.content, calls)


def _xml_reply(request: Request, turn: Turn) -> Written:
    if not turn.calls:
        return Written(turn.content or "")
    invokes = "\n".join(_xml_invoke(call) for call in turn.calls)
    text = f"<function_calls>\n{invokes}\n</function_calls>"
    if "malformed-json" in turn.flaws:
        text = text[: text.rfind("</invoke>")].rstrip()
    return Written(_with_fence(text, "xml", turn.flaws))


def _xml_invoke(call: Call) -> str:
    arguments = json_or_none(call.arguments)
    parameters = "".join(
        f'<parameter name="{xml_escape(name)}">{xml_escape(value if isinstance(value, str) else dump(value))}'
        "</parameter>\n"
        for name, value in (arguments.items() if isinstance(arguments, dict) else ())
    )
    return f'<invoke name="{xml_escape(call.name)}">\n{parameters}</invoke>'


def _json_reply(request: Request, turn: Turn) -> Written:
    if not turn.calls:
        return Written(turn.content or "")
    shown = [{"tool": call.name, "arguments": json_or_none(call.arguments)} for call in turn.calls]
    text = json.dumps(shown[0] if len(shown) == 1 else shown, ensure_ascii=False)
    return Written(_with_fence(_cut_closers(text, turn.flaws), "json", turn.flaws))


def _structured_reply(request: Request, turn: Turn) -> Written:
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
            arguments = json_or_none(call.arguments)
            given = arguments if isinstance(arguments, dict) else {}
            # Strict mode makes every key present; what the demo leaves out is written as null.
            keys = branch.keys if branch is not None else tuple(given)
            decision["arguments"] = {key: given.get(key) for key in keys}
    text = json.dumps({"decision": decision}, ensure_ascii=False)
    return Written(_with_fence(_cut_closers(text, turn.flaws), "json", turn.flaws))


def _label_reply(request: Request, turn: Turn) -> Written:
    return Written(turn.calls[0].name if turn.calls else "none")


def _arguments_reply(request: Request, turn: Turn) -> Written:
    if not turn.calls:
        return Written(turn.content or "")
    return Written(_with_fence(_cut_closers(turn.calls[0].arguments, turn.flaws), "json", turn.flaws))


def _respond_with_arguments(request: Request, question: Question) -> Turn:
    """For a fill prompt the tool is already chosen: repair a failed call, else decide anew."""
    rounds = rounds_after(request.messages, last_user_index(request.messages))
    if rounds and needs_repair(rounds):
        return repair(request, question, rounds[-1])
    return decide(request, question)


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


def check_response_format(response_format: JSONDict | None) -> None:
    """Refuse a ``response_format`` OpenAI would refuse, with its wording where known.

    Raises:
        RequestError: an unknown type, a missing schema name, or a strict schema outside the
            strict subset (docs/wire-formats.md §2).
    """
    if response_format is None:
        return
    kind = format_type(response_format)
    if kind not in ("text", "json_object", "json_schema"):
        raise RequestError(
            f"Invalid value: '{kind}'. Supported values are: 'text', 'json_object', and 'json_schema'.",
            param="response_format.type",
            code="invalid_value",
        )
    if kind != "json_schema":
        return
    spec = required_object(response_format, "json_schema", "response_format")
    name = required_string(spec, "name", "response_format.json_schema")
    schema = spec.get("schema")
    if spec.get("strict") is True and isinstance(schema, dict):
        problem = _strict_problem(schema)
        if problem:
            raise RequestError(
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
