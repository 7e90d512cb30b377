"""The paradigm contract: how tools reach the model, and how its answer becomes calls.

A paradigm is one module with one class, registered in ``PARADIGMS``. The agent loop talks to
it only through this protocol, so adding a way of calling tools touches no other module.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from conversations.llm import Message, ToolCall, ToolChoice, ToolDef
from conversations.providers.base import ModelReply, ModelRequest


@dataclass
class Decision:
    """What the model decided: calls to make, or a final text; and what the parser noticed."""

    text: str | None
    calls: list[ToolCall] = field(default_factory=list)
    diagnostics: list[str] = field(default_factory=list)


class Paradigm(Protocol):
    """One way of getting a model to call tools.

    ``build_request`` shapes the messages and tools for one model call; ``parse`` reads the
    reply and never raises on arbitrary model output (problems become ``diagnostics``);
    ``assistant_message`` and ``result_message`` extend the conversation so the next request
    carries the call and its result in the form this paradigm taught the model.
    """

    key: ClassVar[str]
    label: ClassVar[str]

    def build_request(
        self, *, messages: list[Message], tools: list[ToolDef], choice: ToolChoice
    ) -> ModelRequest: ...

    def parse(self, reply: ModelReply, tools: list[ToolDef]) -> Decision: ...

    def assistant_message(self, reply: ModelReply, decision: Decision) -> Message: ...

    def result_message(self, call: ToolCall, text: str, *, is_error: bool) -> Message: ...


def parse_arguments(call: ToolCall, diagnostics: list[str]) -> ToolCall:
    """``call`` with ``arguments`` parsed from its text; a problem is noted, never raised."""
    text = call.arguments_text.strip()
    if not text:
        call.arguments = {}
        return call
    try:
        value = json.loads(text)
    except ValueError as exc:
        diagnostics.append(f"{call.name}: arguments are not valid JSON ({exc})")
        call.arguments = None
        return call
    if not isinstance(value, dict):
        diagnostics.append(f"{call.name}: arguments are JSON but not an object ({type(value).__name__})")
        call.arguments = None
        return call
    call.arguments = value
    return call
