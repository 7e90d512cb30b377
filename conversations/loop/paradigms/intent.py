"""Intent recognition + predefined functions: classify first, then fill one tool's arguments.

Two model calls per decision, each recorded as its own step:

1. ``intent: classify`` — a short prompt with each tool's name and a one-line description; the
   reply is one tool name or ``none`` (read by ``parse_label``). With tool results already in
   the conversation, ``none`` means "answer now".
2. ``intent: fill arguments for NAME`` — only that tool's full schema; the reply is the bare
   JSON object of arguments. Or, after ``none``, ``intent: answer`` — a plain-text answer.

The model never sees all schemas at once, which keeps each prompt small (the point of the
paradigm); the price is a second call and no parallel calls (one call per decision).

tool_choice: ``named`` skips the classification; ``required`` forbids ``none`` (asked once
more if it comes anyway); ``none`` goes straight to the answer call. A label that names no
offered tool is also asked for once more, since there is nothing to fill.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import ClassVar

from conversations.loop.llm import Message, ToolCall, ToolDef
from conversations.loop.paradigms.base import Decision, DecisionContext, offered, strict_json
from conversations.loop.paradigms.prompting import (
    Attempt,
    Retry,
    ask_with_retry,
    call_ids,
    has_tool_history,
    json_call,
    json_results,
    one_line,
    parameter_lines,
    render_history,
    repaired_object,
    tool_line,
    tools_block,
    unfence,
)
from conversations.loop.parsing import parse_json_reply, parse_label
from conversations.loop.providers.base import ModelReply, ModelRequest
from conversations.typealias import JSONDict, JSONValue

# parse_label's fixed phrase for a reply that is neither a tool name nor "none".
_UNKNOWN_LABEL = "not among the offered tools"


def classify_lines(tools: Sequence[ToolDef]) -> dict[str, str]:
    """Each tool's line in the classification prompt (its name and one-line description), by name."""
    return {tool.provider_name: f"- {tool.provider_name}: {one_line(tool.description)}" for tool in tools}


def classify_prompt(tools: Sequence[ToolDef], *, required: bool, results: bool) -> str:
    """Names and one-line descriptions only; the answer is a label."""
    listing = "\n".join(classify_lines(tools).values())
    if required:
        ask = "A tool call is required: reply with exactly one tool name from the list (none is not allowed)."
    else:
        ask = "Reply with exactly one tool name from the list, or none if no tool is needed."
    lines = [f"You route a user's request to one tool. The tools:\n{listing}", "", ask]
    if results:
        lines.append(
            "The conversation already holds tool results: if they answer the request, reply none; "
            "if a call failed or something is still missing, name the tool to call."
        )
    lines.append("Reply with the name only, with no other words.")
    return "\n".join(lines)


def fill_definition(tool: ToolDef) -> str:
    """What the fill prompt writes of the chosen tool: its description, parameters and schema line."""
    parameters = parameter_lines(tool.input_schema) or ["(none)"]
    return (
        f"{tool.provider_name}: {tool.description.strip() or '(no description)'}\n"
        "Parameters:\n" + "\n".join(parameters) + "\n" + tool_line(tool)
    )


def fill_prompt(tool: ToolDef) -> str:
    """Only the chosen tool, with its full schema; the answer is the bare arguments object."""
    parameters = parameter_lines(tool.input_schema) or ["(none)"]
    example = _example(tool.input_schema)
    return (
        f"You fill in the arguments for the tool {tool.provider_name}, chosen to serve the user's request.\n\n"
        f"{tool.provider_name}: {tool.description.strip() or '(no description)'}\n"
        "Parameters:\n" + "\n".join(parameters) + "\n\n"
        "The parameters as JSON Schema:\n" + tools_block([tool]) + "\n\n"
        f"Reply with only the arguments, as one JSON object such as {example}: no tool name, no other "
        "text, no code fence. Take the values from the conversation."
    )


def _example(schema: JSONDict) -> str:
    properties = schema.get("properties")
    names = list(properties)[:3] if isinstance(properties, dict) else []
    return "{" + ", ".join(f'"{name}": …' for name in names) + "}"


def answer_prompt(*, results: bool) -> str:
    earlier = (
        ' Tool calls made so far appear as JSON objects, and their results as user messages that start with "Tool result for".'
        if results
        else ""
    )
    return (
        f"You are a helpful assistant. Answer the user's request in plain text; do not call tools.{earlier}"
    )


class IntentParadigm:
    """Classify the request to one tool (or none), then fill only that tool's arguments."""

    key: ClassVar[str] = "intent"
    label: ClassVar[str] = "Intent recognition + predefined functions"
    native_tools: ClassVar[bool] = False

    def decide(self, context: DecisionContext) -> Decision:
        tools = offered(context.tools, context.choice)
        # Intent's own content is the bare arguments (no tool name), so history is always
        # rendered from the calls, never replayed verbatim.
        history = render_history(context.messages, own=None, calls=json_call, results=json_results)
        if not tools:
            reason = "tool_choice is 'none'" if context.choice.mode == "none" else "no tool is offered"
            return self._answer(context, history, [f"classification skipped: {reason}"])
        if context.choice.mode == "named":
            return self._fill(
                context, tools[0], history, ["classification skipped: tool_choice names the tool"]
            )
        label, notes = self._classify(context, tools, history)
        chosen = next((tool for tool in tools if tool.provider_name == label), None)
        if chosen is None:
            return self._answer(context, history, notes)
        return self._fill(context, chosen, history, [])

    def _classify(
        self, context: DecisionContext, tools: Sequence[ToolDef], history: list[Message]
    ) -> tuple[str | None, list[str]]:
        required = context.choice.mode == "required"
        system = classify_prompt(tools, required=required, results=has_tool_history(context.messages))
        request = ModelRequest(
            messages=[Message(role="system", content=system), *history], tool_texts=classify_lines(tools)
        )
        names = [tool.provider_name for tool in tools]

        def read(reply: ModelReply) -> Attempt:
            label, diagnostics = parse_label(reply.text or "", names=names)
            return Attempt(reply, [], label, diagnostics)

        def retry(attempt: Attempt) -> Retry | None:
            listed = ", ".join(names)
            if attempt.text is None and any(_UNKNOWN_LABEL in note for note in attempt.diagnostics):
                return Retry(
                    "the label names no offered tool",
                    f"Correction: that is not one of the tools. Reply with exactly one of: {listed}"
                    + ("." if required else ", or none."),
                    title="re-ask: the label is not a tool name",
                )
            if attempt.text is None and required:
                return Retry(
                    "a tool call is required but the label is none",
                    f"Correction: a tool call is required, so none is not allowed. Reply with exactly one of: {listed}.",
                )
            return None

        attempt = ask_with_retry(context, request, title="intent: classify", read=read, retry=retry)
        context.asker.note(text=attempt.text or "none", diagnostics=attempt.diagnostics)
        if attempt.text is None:
            return None, ["the classification is none: answering in text"]
        return attempt.text, []

    def _fill(
        self, context: DecisionContext, tool: ToolDef, history: list[Message], notes: list[str]
    ) -> Decision:
        request = ModelRequest(
            messages=[Message(role="system", content=fill_prompt(tool)), *history],
            tool_texts={tool.provider_name: fill_definition(tool)},
        )
        ids = call_ids(context.messages)

        def read(reply: ModelReply) -> Attempt:
            return _arguments_attempt(reply, tool, ids)

        def retry(attempt: Attempt) -> Retry | None:
            if attempt.calls:
                return None
            return Retry(
                "the reply holds no JSON object of arguments",
                f"Correction: reply with only the JSON object of arguments for {tool.provider_name}, "
                f"such as {_example(tool.input_schema)}, and nothing else.",
                title="re-ask: a JSON object of arguments is required",
            )

        attempt = ask_with_retry(
            context,
            request,
            title=f"intent: fill arguments for {tool.provider_name}",
            read=read,
            retry=retry,
            notes=notes,
        )
        return attempt.decision(self.key)

    def _answer(self, context: DecisionContext, history: list[Message], notes: list[str]) -> Decision:
        system = answer_prompt(results=has_tool_history(context.messages))
        request = ModelRequest(messages=[Message(role="system", content=system), *history])
        reply = context.asker.ask(request, title="intent: answer")
        context.asker.note(diagnostics=notes)
        text = reply.text or ""
        return Decision(Message(role="assistant", content=text, format=self.key), [], text, list(notes))


def _arguments_attempt(reply: ModelReply, tool: ToolDef, ids: Iterator[str]) -> Attempt:
    """The fill reply as one call of ``tool``, or no call when it holds no JSON object."""
    text = reply.text or ""
    arguments, diagnostics = read_arguments(text, tool)
    if arguments is None:
        return Attempt(reply, [], text, diagnostics)
    call = ToolCall(next(ids), tool.provider_name, text.strip(), arguments)
    return Attempt(reply, [call], "", diagnostics)


def read_arguments(text: str, tool: ToolDef) -> tuple[JSONDict | None, list[str]]:
    """The arguments object in a fill reply, typed by the tool's schema, and what was tolerated.

    The reply should be the bare object; a ``{"tool": …, "arguments": …}`` wrapper is accepted
    too. Fences are stripped and broken JSON repaired (each noted). Never raises.
    """
    name = tool.provider_name
    schemas = {name: tool.input_schema}
    wrapped = parse_json_reply(text, schemas=schemas)
    if wrapped.calls:
        call = wrapped.calls[0]
        notes = [
            f"the reply wraps the arguments in a call of {call.name}; used its arguments",
            *wrapped.diagnostics,
        ]
        return call.arguments, notes
    value, notes = _bare_object(text)
    if value is None:
        return None, notes
    typed = parse_json_reply(json.dumps({"tool": name, "arguments": value}), schemas=schemas)
    return typed.calls[0].arguments if typed.calls else value, notes + typed.diagnostics


def _bare_object(text: str) -> tuple[JSONDict | None, list[str]]:
    notes: list[str] = []
    body, fenced = unfence(text)
    body = body.strip()
    if fenced:
        notes.append("stripped a code fence around the arguments")
    if not body:
        return None, [*notes, "empty reply"]
    try:
        value: JSONValue = strict_json(body)
    except ValueError as exc:
        value = repaired_object(body)
        # Prose repairs to an empty object; only text that opened one may be read as "no arguments".
        if value is None or (not value and "{" not in body):
            return None, [*notes, f"the reply is not a JSON object of arguments ({exc})"]
        notes.append(f"repaired the arguments: not valid JSON ({exc})")
    if not isinstance(value, dict):
        return None, [*notes, f"the reply is JSON but not an object ({type(value).__name__})"]
    return value, notes
