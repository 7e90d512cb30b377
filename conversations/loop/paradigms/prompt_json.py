"""Prompt-structured output, JSON: tools in the system prompt, the reply is JSON or plain text.

The convention is the MCP python-sdk simple-chatbot's (docs/wire-formats.md §8): a call is a reply
that is exactly ``{"tool": NAME, "arguments": {...}}`` (a JSON list of such objects for
several calls); anything else is the final answer. Results come back as a user message::

    Tool result for NAME (call id call_1):
    <result text>

(``Tool error for …`` when the call failed). Replies are read by ``parse_json_reply``, which
tolerates fences, prose around the object, key variants and repairable JSON, and says so.

What the text-prompt paradigms share (history rendering, call ids, tool listings, the re-ask)
is in :mod:`conversations.loop.paradigms.prompting`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from conversations.loop.llm import Message, ToolChoice, ToolDef
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
    json_call,
    json_results,
    must_call,
    never,
    render_history,
    target,
    tool_catalogue,
)
from conversations.loop.parsing import parse_json_reply
from conversations.loop.providers.base import ModelReply, ModelRequest


def system_prompt(tools: Sequence[ToolDef], choice: ToolChoice, *, history: bool) -> str:
    """The JSON convention: the tools, how to call, the rules, and tool_choice in words."""
    rule = choice_rule(choice, tools, call_form="a JSON tool call")
    if not tools:
        earlier = (
            " Earlier tool calls appear in the conversation as JSON objects, and their results as "
            'user messages that start with "Tool result for".'
            if history
            else ""
        )
        return f"You are a helpful assistant. {rule}{earlier}"
    return f"""You are a helpful assistant with access to these tools:

{tool_catalogue(tools)}

## How to call a tool

To call a tool, reply with only this JSON object, and nothing before or after it:
{{"tool": "TOOL_NAME", "arguments": {{"PARAMETER_NAME": value}}}}

- "arguments" must match the tool's parameters (JSON types as in its schema); give every required parameter.
- To call several tools at once, reply with a JSON array of such objects.
- Use only the tools listed above. Do not wrap the JSON in a code fence.

## Rules

- After a tool call, stop. The host runs the call and sends the result back in a user message that starts with "Tool result for TOOL_NAME (call id call_N):" ("Tool error for …" when the call failed).
- Never write a tool result yourself.
- Do not put tool calls inside thinking or reasoning text: only your visible reply counts.
- When you have what you need, answer the user in plain text, not JSON.

{rule}"""


class PromptJsonParadigm:
    """Tools described in the system prompt; the reply is ``{"tool", "arguments"}`` JSON or prose."""

    key: ClassVar[str] = "prompt_json"
    label: ClassVar[str] = "Prompt-structured output (JSON)"
    native_tools: ClassVar[bool] = False

    def decide(self, context: DecisionContext) -> Decision:
        tools = offered(context.tools, context.choice)
        system = system_prompt(tools, context.choice, history=has_tool_history(context.messages))
        request = ModelRequest(
            messages=[
                Message(role="system", content=system),
                *render_history(context.messages, own=self.key, calls=json_call, results=json_results),
            ],
            tool_texts=catalogue_texts(tools),
        )
        schemas = {tool.provider_name: tool.input_schema for tool in context.tools}
        ids = call_ids(context.messages)

        def read(reply: ModelReply) -> Attempt:
            parsed = parse_json_reply(reply.text or "", schemas=schemas)
            return ignore_calls_when_none(attempt_from(reply, parsed, ids), context.choice)

        correction = (
            f"Correction: a tool call is required. Reply with only the JSON object that calls "
            f'{target(context.choice, tools)}, {{"tool": "TOOL_NAME", "arguments": {{...}}}}, and nothing else.'
        )
        attempt = ask_with_retry(
            context,
            request,
            title="model call",
            read=read,
            retry=call_required(correction) if must_call(context.choice, tools) else never,
        )
        return attempt.decision(self.key)
