"""Prompt-structured output, XML: tools in the system prompt, calls as ``<function_calls>`` blocks.

The convention is the one Anthropic models write natively and MCP-SuperAssistant teaches
(docs/wire-formats.md §8)::

    <function_calls>
    <invoke name="TOOL_NAME">
    <parameter name="PARAMETER_NAME">value</parameter>
    </invoke>
    </function_calls>

Scalars are written as plain text and typed afterwards by the tool's schema; arrays and objects
as JSON. Several ``<invoke>`` elements are several (parallel) calls. Results come back in a
user message as ``<function_result call_id="…" name="…">…</function_result>``. Replies are
read by ``parse_xml_calls`` (fences, truncation, invented results, calls in ``<think>``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import ClassVar
from xml.sax.saxutils import escape, quoteattr

from conversations.loop.llm import Message, ToolCall, ToolChoice, ToolDef
from conversations.loop.paradigms.base import Decision, DecisionContext, offered
from conversations.loop.paradigms.prompting import (
    Attempt,
    ask_with_retry,
    attempt_from,
    call_ids,
    call_required,
    catalogue_texts,
    choice_rule,
    has_tool_history,
    ignore_calls_when_none,
    must_call,
    never,
    render_history,
    target,
    tool_catalogue,
)
from conversations.loop.parsing import parse_xml_calls
from conversations.loop.providers.base import ModelReply, ModelRequest


def xml_calls(calls: Sequence[ToolCall]) -> str:
    """Calls written in the convention (for history from another paradigm)."""
    invokes = [_invoke(call) for call in calls]
    return "<function_calls>\n" + "\n".join(invokes) + "\n</function_calls>"


def _invoke(call: ToolCall) -> str:
    if call.arguments is None:
        # Arguments that never parsed: shown as the model sent them, so the history stays true.
        body = f'<parameter name="arguments">{escape(call.arguments_text)}</parameter>\n'
    else:
        body = "".join(
            f"<parameter name={quoteattr(name)}>{escape(_value_text(value))}</parameter>\n"
            for name, value in call.arguments.items()
        )
    return f"<invoke name={quoteattr(call.name)}>\n{body}</invoke>"


def _value_text(value: object) -> str:
    """Strings as they are, everything else as JSON (numbers and booleans read the same)."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def xml_results(messages: Sequence[Message]) -> str:
    """Tool results as ``<function_result>`` elements, one per call, in one user message."""
    return "\n".join(
        f"<function_result call_id={quoteattr(message.tool_call_id or '')} name={quoteattr(message.name or '')}"
        + (' is_error="true"' if message.is_error else "")
        + f">\n{message.content or ''}\n</function_result>"
        for message in messages
    )


def system_prompt(tools: Sequence[ToolDef], choice: ToolChoice, *, history: bool) -> str:
    """The XML convention: the tools, how to call, the rules, and tool_choice in words."""
    rule = choice_rule(choice, tools, call_form="a <function_calls> block")
    if not tools:
        earlier = (
            " Earlier tool calls appear in the conversation as <function_calls> blocks and their "
            "results as <function_result> elements."
            if history
            else ""
        )
        return f"You are a helpful assistant. {rule}{earlier}"
    return f"""You are a helpful assistant with access to these tools:

{tool_catalogue(tools)}

## How to call a tool

To call a tool, write this block:

<function_calls>
<invoke name="TOOL_NAME">
<parameter name="PARAMETER_NAME">value</parameter>
</invoke>
</function_calls>

- One <parameter> per argument, named as in the tool's parameters; give every required parameter.
- Write a string, number or boolean value as plain text, without quotes; write an array or object value as JSON.
- To call several tools at once, put one <invoke> per call inside the same <function_calls> block.
- Use only the tools listed above. Do not wrap the block in a code fence.

## Rules

- Stop right after </function_calls>. The host runs the calls and sends each result back in a user message as <function_result call_id="call_N" name="TOOL_NAME">…</function_result> (with is_error="true" when the call failed).
- Never write <function_result> yourself, and never invent a result.
- Do not put tool calls inside thinking or reasoning text: only your visible reply counts.
- When you have what you need, answer the user in plain text, without any <function_calls> block.

{rule}"""


class PromptXmlParadigm:
    """Tools described in the system prompt; calls read from ``<function_calls>`` in the reply."""

    key: ClassVar[str] = "prompt_xml"
    label: ClassVar[str] = "Prompt-structured output (XML)"
    native_tools: ClassVar[bool] = False

    def decide(self, context: DecisionContext) -> Decision:
        tools = offered(context.tools, context.choice)
        system = system_prompt(tools, context.choice, history=has_tool_history(context.messages))
        request = ModelRequest(
            messages=[
                Message(role="system", content=system),
                *render_history(context.messages, own=self.key, calls=xml_calls, results=xml_results),
            ],
            tool_texts=catalogue_texts(tools),
        )
        schemas = {tool.provider_name: tool.input_schema for tool in context.tools}
        ids = call_ids(context.messages)

        def read(reply: ModelReply) -> Attempt:
            parsed = parse_xml_calls(reply.text or "", schemas=schemas)
            return ignore_calls_when_none(attempt_from(reply, parsed, ids), context.choice)

        correction = (
            "Correction: a tool call is required. Reply with a <function_calls> block that calls "
            f"{target(context.choice, tools)}, and nothing else."
        )
        attempt = ask_with_retry(
            context,
            request,
            title="model call",
            read=read,
            retry=call_required(correction) if must_call(context.choice, tools) else never,
        )
        return attempt.decision(self.key)
