"""Native function calling: tools go in the provider's ``tools`` field, calls come back typed."""

from __future__ import annotations

from typing import ClassVar

from conversations.llm import Message, ToolCall, ToolChoice, ToolDef
from conversations.paradigms.base import Decision, parse_arguments
from conversations.providers.base import ModelReply, ModelRequest


class NativeParadigm:
    key: ClassVar[str] = "native"
    label: ClassVar[str] = "Native function calling"

    def build_request(
        self, *, messages: list[Message], tools: list[ToolDef], choice: ToolChoice
    ) -> ModelRequest:
        return ModelRequest(messages=list(messages), tools=list(tools), tool_choice=choice)

    def parse(self, reply: ModelReply, tools: list[ToolDef]) -> Decision:
        diagnostics: list[str] = []
        calls = [parse_arguments(call, diagnostics) for call in reply.tool_calls]
        if reply.refusal:
            diagnostics.append(f"the model refused: {reply.refusal}")
        if not calls and reply.finish_reason == "tool_calls":
            diagnostics.append("finish_reason is 'tool_calls' but the message carries no tool call")
        if reply.finish_reason == "length":
            diagnostics.append("the reply was cut at the token limit (finish_reason 'length')")
        return Decision(text=reply.text, calls=calls, diagnostics=diagnostics)

    def assistant_message(self, reply: ModelReply, decision: Decision) -> Message:
        return Message(role="assistant", content=reply.text, tool_calls=list(decision.calls))

    def result_message(self, call: ToolCall, text: str, *, is_error: bool) -> Message:
        return Message(role="tool", content=text, tool_call_id=call.id, name=call.name, is_error=is_error)
