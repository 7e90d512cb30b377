"""Native function calling: tools go in the provider's ``tools`` field, calls come back typed."""

from __future__ import annotations

from typing import ClassVar

from conversations.loop.llm import Message
from conversations.loop.paradigms.base import CALL_LIKE_MARKERS, Decision, DecisionContext, parse_arguments
from conversations.loop.providers.base import ModelRequest


def _native(message: Message) -> Message:
    """A call written as text by a prompt paradigm is replayed once, as ``tool_calls`` only."""
    if message.format is not None and message.tool_calls:
        return Message(role=message.role, content=None, tool_calls=message.tool_calls)
    return message


class NativeParadigm:
    key: ClassVar[str] = "native"
    label: ClassVar[str] = "Native function calling"
    native_tools: ClassVar[bool] = True

    def decide(self, context: DecisionContext) -> Decision:
        request = ModelRequest(
            messages=[_native(m) for m in context.messages],
            tools=list(context.tools),
            tool_choice=context.choice,
        )
        reply = context.asker.ask(request, title="model call")
        diagnostics: list[str] = []
        calls = [parse_arguments(call, diagnostics) for call in reply.tool_calls]
        if reply.refusal:
            diagnostics.append(f"the model refused: {reply.refusal}")
        if not calls and reply.finish_reason == "tool_calls":
            diagnostics.append("finish_reason is 'tool_calls' but the message carries no tool call")
        if not calls and reply.text and any(marker in reply.text for marker in CALL_LIKE_MARKERS):
            diagnostics.append(
                "the text looks like a tool call that the provider did not parse into tool_calls "
                "(a prompt paradigm would read it)"
            )
        if reply.finish_reason == "length":
            diagnostics.append("the reply was cut at the token limit (finish_reason 'length')")
        if context.choice.mode in {"required", "named"} and not calls:
            diagnostics.append(f"tool_choice '{context.choice.mode}' was sent but the model made no call")
        return Decision(
            assistant=Message(role="assistant", content=reply.text, tool_calls=list(calls), echo=reply.echo),
            calls=calls,
            text=reply.text,
            diagnostics=diagnostics,
        )
