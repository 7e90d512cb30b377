"""What every text-prompt paradigm shares (prompt_json, prompt_xml, structured and intent).

Rendering the neutral history into plain messages (``render_history``), synthesising call ids
(``call_ids``), listing tools readably (``tools_block``, ``tool_catalogue``,
``parameter_lines``) and saying what was written for each (``catalogue_texts``), tool_choice in words (``choice_rule``, ``must_call``), the JSON way of
writing calls and results back (``json_call``, ``json_results``: the prompt_json convention of
docs/wire-formats.md §8, which intent and structured also speak), reading a reply into an
:class:`Attempt`, and asking exactly once more when a required call did not come
(``ask_with_retry``).
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import json_repair

from conversations.loop.llm import Message, ToolCall, ToolChoice, ToolDef
from conversations.loop.paradigms.base import Decision, DecisionContext
from conversations.loop.parsing import ParseResult
from conversations.loop.providers.base import ModelReply, ModelRequest
from conversations.typealias import JSONDict, JSONValue

REASK_TITLE = "re-ask: a tool call is required"
_DESCRIPTION_LIMIT = 120
_FENCE = re.compile(r"\A\s*```[\w-]*[ \t]*\n(.*?)\n?[ \t]*```\s*\Z", re.DOTALL)


@dataclass
class Attempt:
    """One reply read by a paradigm: the calls in it, else its answer text, and what was noticed."""

    reply: ModelReply
    calls: list[ToolCall]
    text: str | None
    diagnostics: list[str] = field(default_factory=list)

    def decision(self, key: str) -> Decision:
        """The decision for this reply; the raw reply is kept verbatim, tagged with ``key``."""
        assistant = Message(
            role="assistant", content=self.reply.text or "", tool_calls=list(self.calls), format=key
        )
        return Decision(assistant, list(self.calls), self.text, list(self.diagnostics))


def call_ids(messages: Sequence[Message]) -> Iterator[str]:
    """Fresh call ids ``call_N``, counting on from the calls already in the conversation.

    The models of the text paradigms give no ids, yet results must name their call; ids
    already used (say by native history) are skipped so each stays unique.
    """
    used = {call.id for message in messages for call in message.tool_calls}
    start = sum(len(message.tool_calls) for message in messages) + 1
    return (f"call_{n}" for n in itertools.count(start) if f"call_{n}" not in used)


CallsText = Callable[[Sequence[ToolCall]], str]
ResultsText = Callable[[Sequence[Message]], str]


def render_history(
    messages: Sequence[Message], *, own: str | None, calls: CallsText, results: ResultsText
) -> list[Message]:
    """The neutral history as plain text messages (no ``tools``, no ``tool`` role).

    An assistant message in the ``own`` format is replayed verbatim (its content is the raw
    reply); another assistant message with calls gets them written by ``calls`` (its prose is
    kept only when it is native prose, since a text paradigm's content is its own syntax); each
    run of tool results becomes one user message written by ``results``.
    """
    rendered: list[Message] = []
    pending: list[Message] = []
    for message in messages:
        if message.role == "tool":
            pending.append(message)
            continue
        if pending:
            rendered.append(Message(role="user", content=results(pending)))
            pending = []
        if message.role == "assistant":
            rendered.append(Message(role="assistant", content=_assistant_text(message, own, calls)))
        else:
            rendered.append(Message(role=message.role, content=message.content or ""))
    if pending:
        rendered.append(Message(role="user", content=results(pending)))
    return rendered


def _assistant_text(message: Message, own: str | None, calls: CallsText) -> str:
    if own is not None and message.format == own and message.content is not None:
        return message.content
    if not message.tool_calls:
        return message.content or ""
    prose = (message.content or "").strip() if message.format is None else ""
    written = calls(message.tool_calls)
    return f"{prose}\n\n{written}" if prose else written


def unfence(text: str) -> tuple[str, bool]:
    """The inside of a code fence that wraps the whole text, and whether there was one."""
    match = _FENCE.match(text)
    return (match.group(1), True) if match else (text, False)


def repaired_object(text: str) -> JSONDict | None:
    """``text`` read as a JSON object by json_repair (quotes, cut-off ends, prose around it), or None."""
    try:
        value = json_repair.repair_json(text, return_objects=True)
    except Exception:  # noqa: BLE001 — a third-party parser on model output: any failure means "unrepairable"
        return None
    return value if isinstance(value, dict) else None


def has_tool_history(messages: Sequence[Message]) -> bool:
    return any(message.role == "tool" or message.tool_calls for message in messages)


def shown_arguments(call: ToolCall) -> JSONValue:
    """The arguments to write back into a prompt: the object, else the raw text as a string."""
    return call.arguments if call.arguments is not None else call.arguments_text


def one_line(description: str) -> str:
    """The first sentence (or line) of a description, short enough for a one-line listing."""
    first = description.strip().split("\n", 1)[0]
    # A sentence ends before a capital letter, so "e.g. 10 km" does not end one.
    sentence = re.split(r"(?<=[.!?])\s+(?=[A-Z])", first, maxsplit=1)[0]
    return sentence if len(sentence) <= _DESCRIPTION_LIMIT else sentence[: _DESCRIPTION_LIMIT - 1] + "…"


def target(choice: ToolChoice, tools: Sequence[ToolDef]) -> str:
    """What a correction asks to call: the named tool, or any of them."""
    return tools[0].provider_name if choice.mode == "named" and tools else "one of the tools"


def tool_line(tool: ToolDef) -> str:
    """One tool as the JSON line ``tools_block`` lists it under: name, description, parameters."""
    return json.dumps(
        {"name": tool.provider_name, "description": tool.description, "parameters": tool.input_schema},
        ensure_ascii=False,
    )


def tools_block(tools: Sequence[ToolDef]) -> str:
    """Each tool as one JSON object per line inside ``<tools>``: exact, and easy to read back."""
    return "<tools>\n" + "\n".join(tool_line(tool) for tool in tools) + "\n</tools>"


def _catalogue_section(tool: ToolDef) -> str:
    lines = [f"### {tool.provider_name}", tool.description.strip() or "(no description)", "Parameters:"]
    lines += parameter_lines(tool.input_schema) or ["(none)"]
    return "\n".join(lines)


def tool_catalogue(tools: Sequence[ToolDef]) -> str:
    """The tools for a reader: name, description, one line per parameter; then the exact schemas."""
    return (
        "\n\n".join(_catalogue_section(tool) for tool in tools)
        + "\n\nThe same tools as JSON, one per line (name, description, and the JSON Schema of the "
        "parameters):\n" + tools_block(tools)
    )


def catalogue_texts(tools: Sequence[ToolDef]) -> dict[str, str]:
    """What :func:`tool_catalogue` writes for each tool (its section and its JSON line), by name:
    the tool's definition as the prompt carries it (``ModelRequest.tool_texts``)."""
    return {tool.provider_name: f"{_catalogue_section(tool)}\n{tool_line(tool)}" for tool in tools}


def parameter_lines(schema: JSONDict) -> list[str]:
    """``- name (type, required): description`` for each top-level property."""
    properties = schema.get("properties")
    required = schema.get("required")
    needed = set(required) if isinstance(required, list) else set()
    lines = []
    for name, spec in (properties if isinstance(properties, dict) else {}).items():
        spec = spec if isinstance(spec, dict) else {}
        facts = [_type_text(spec), "required" if name in needed else "optional"]
        if "default" in spec:
            facts.append(f"default {json.dumps(spec['default'], ensure_ascii=False)}")
        description = str(spec.get("description") or "").strip()
        lines.append(f"- {name} ({', '.join(facts)})" + (f": {description}" if description else ""))
    return lines


def _type_text(spec: JSONDict) -> str:
    enum = spec.get("enum")
    if isinstance(enum, list):
        return "one of " + ", ".join(json.dumps(value, ensure_ascii=False) for value in enum)
    declared = spec.get("type")
    names = [str(t) for t in declared] if isinstance(declared, list) else [str(declared)] if declared else []
    items = spec.get("items")
    if names == ["array"] and isinstance(items, dict) and isinstance(items.get("type"), str):
        return f"array of {items['type']}"
    return " or ".join(names) or "any JSON value"


def choice_rule(choice: ToolChoice, tools: Sequence[ToolDef], *, call_form: str) -> str:
    """tool_choice in words: when a call is mandatory, and which tool it must be."""
    if not tools:
        return "No tools are available for this reply: answer the user directly in plain text."
    if choice.mode == "named":
        return f"A tool call is required: your next reply must be {call_form} that calls {tools[0].provider_name}."
    if choice.mode == "required":
        return f"A tool call is required: your next reply must be {call_form}, not a text answer."
    return "Call a tool when it helps to answer; otherwise answer directly in plain text."


@dataclass(frozen=True)
class Retry:
    """Why a reply is asked for again, and the user message that asks."""

    problem: str
    correction: str
    title: str = REASK_TITLE


def call_required(correction: str) -> Callable[[Attempt], Retry | None]:
    """The retry rule of a mandatory call: a reply without one is asked for again."""

    def retry(attempt: Attempt) -> Retry | None:
        if attempt.calls:
            return None
        return Retry("a tool call is required but the reply has none", correction)

    return retry


def never(attempt: Attempt) -> Retry | None:
    return None


def ask_with_retry(
    context: DecisionContext,
    request: ModelRequest,
    *,
    title: str,
    read: Callable[[ModelReply], Attempt],
    retry: Callable[[Attempt], Retry | None] = never,
    notes: Sequence[str] = (),
) -> Attempt:
    """Ask and read the reply; when ``retry`` objects to it, ask exactly once more.

    The re-ask is its own recorded step whose prompt is the first prompt plus the reply and
    the correction. Each step is annotated with its diagnostics; ``notes`` (about the prompt
    itself) go on every step. A second objection is diagnosed and that reply is returned as
    it is.
    """
    attempt = read(context.asker.ask(request, title=title))
    attempt.diagnostics[:0] = notes
    objection = retry(attempt)
    if objection is not None:
        attempt.diagnostics.append(f"{objection.problem}: asking once more")
        context.asker.note(diagnostics=attempt.diagnostics)
        again = ModelRequest(
            messages=[
                *request.messages,
                Message(role="assistant", content=attempt.reply.text or ""),
                Message(role="user", content=objection.correction),
            ],
            response_format=request.response_format,
            tool_texts=dict(request.tool_texts),
        )
        attempt = read(context.asker.ask(again, title=objection.title))
        attempt.diagnostics[:0] = notes
        if retry(attempt) is not None:
            attempt.diagnostics.append(
                f"still {objection.problem} after one re-ask: the reply is taken as it is"
            )
    context.asker.note(diagnostics=attempt.diagnostics)
    return attempt


def must_call(choice: ToolChoice, tools: Sequence[ToolDef]) -> bool:
    """Whether tool_choice makes a call mandatory (and there is a tool to call)."""
    return choice.mode in {"required", "named"} and bool(tools)


def ignore_calls_when_none(attempt: Attempt, choice: ToolChoice) -> Attempt:
    """tool_choice ``none`` offers no tools: a call the model writes anyway is not made."""
    if choice.mode == "none" and attempt.calls:
        names = ", ".join(call.name for call in attempt.calls)
        attempt.diagnostics.append(
            f"tool_choice is 'none' but the reply calls {names}: not made; the reply is taken as the answer"
        )
        attempt.text = attempt.reply.text or ""
        attempt.calls = []
    return attempt


# --- Calls and results in the JSON convention ------------------------------------------------


def json_call(calls: Sequence[ToolCall]) -> str:
    """Calls in the JSON convention: one object, or a list of them."""
    objects: list[JSONValue] = [{"tool": call.name, "arguments": shown_arguments(call)} for call in calls]
    return json.dumps(objects[0] if len(objects) == 1 else objects, ensure_ascii=False)


def json_results(messages: Sequence[Message]) -> str:
    """Tool results as the user message the JSON-speaking paradigms describe."""
    return "\n\n".join(
        f"Tool {'error' if message.is_error else 'result'} for {message.name} (call id {message.tool_call_id}):\n"
        f"{message.content or ''}"
        for message in messages
    )


def attempt_from(reply: ModelReply, parsed: ParseResult, ids: Iterator[str]) -> Attempt:
    """A parser's result as an attempt: calls with fresh ids, or the reply's text as the answer."""
    calls = [ToolCall(next(ids), call.name, call.arguments_text, call.arguments) for call in parsed.calls]
    text = parsed.text if calls or parsed.text else (reply.text or "")
    return Attempt(reply, calls, text, list(parsed.diagnostics))
