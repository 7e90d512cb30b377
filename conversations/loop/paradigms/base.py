"""The paradigm contract: how tools reach the model, and how its answer becomes calls.

A paradigm is one module with one class, registered in ``PARADIGMS``. The agent loop hands it
the neutral conversation and an ``Asker`` (which makes and records model calls) and gets back a
``Decision``. A paradigm may ask once (native), twice (intent: classify, then fill), re-ask
(a required call that did not come), or switch to another paradigm (auto) — the loop does not
care. The conversation history stays neutral (``Message``), so turns and downgrades can move
between paradigms freely; each paradigm renders that history into its own wire form.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from conversations.loop.llm import Message, ToolCall, ToolChoice, ToolDef
from conversations.loop.providers.base import ModelReply, ModelRequest
from conversations.typealias import JSONValue


class Asker(Protocol):
    """Makes one model call and records it as its own step (prompt, raw exchange, timing).

    ``note`` annotates the most recent call's step (what the paradigm parsed from it);
    ``fallback`` records a paradigm switch as a step of its own.

    Raises (from ``ask``):
        ProviderError: the endpoint refused or failed; the failed call is already recorded.
    """

    def ask(self, request: ModelRequest, *, title: str) -> ModelReply: ...

    def note(self, *, text: str | None = None, diagnostics: Sequence[str] = ()) -> None: ...

    def fallback(self, *, title: str, reason: str, capability: str | None = None) -> None: ...


@dataclass
class DecisionContext:
    """Everything a paradigm may use to reach one decision."""

    messages: list[Message]
    tools: list[ToolDef]
    choice: ToolChoice
    asker: Asker
    capabilities: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Decision:
    """What the model decided: calls to make, or a final text; and what the parsers noticed.

    ``assistant`` is the message appended to the neutral history (for prompt paradigms its
    content is the raw reply, tagged with the paradigm's ``format`` so it is replayed verbatim).
    """

    assistant: Message
    calls: list[ToolCall] = field(default_factory=list)
    text: str | None = None
    diagnostics: list[str] = field(default_factory=list)


class Paradigm(Protocol):
    """One way of getting a model to call tools.

    ``decide`` never raises on arbitrary model output: problems become ``diagnostics``.
    ``ProviderError`` from the asker propagates (the loop ends the turn) unless the paradigm
    handles it (auto downgrades).
    """

    key: ClassVar[str]
    label: ClassVar[str]
    # Whether the tools travel in the provider's native ``tools`` field (else in the prompt).
    native_tools: ClassVar[bool]

    def decide(self, context: DecisionContext) -> Decision: ...


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is too large for JSON to carry")
    return value


def strict_json(text: str) -> JSONValue:
    """``text`` parsed as strict JSON: what every database stores and every provider accepts.

    Raises:
        ValueError: it is not JSON, holds ``NaN``/``Infinity`` or a number that overflows (``1e999999``),
            or nests too deeply to read.
    """
    try:
        value: JSONValue = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        raise ValueError("it nests too deeply to read") from None
    return value


def parse_arguments(call: ToolCall, diagnostics: list[str]) -> ToolCall:
    """``call`` with ``arguments`` parsed from its text; a problem is noted, never raised."""
    text = call.arguments_text.strip()
    if not text:
        call.arguments = {}
        return call
    try:
        value = strict_json(text)
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


# Text that looks like a tool call the provider's own parser did not turn into tool_calls.
CALL_LIKE_MARKERS = ("<tool_call>", "[TOOL_CALLS]", '{"name":', "<function_calls>", '{"tool":')


def offered(tools: Sequence[ToolDef], choice: ToolChoice) -> list[ToolDef]:
    """The tools a prompt paradigm lists: none for ``none``, only the named one for ``named``."""
    if choice.mode == "none":
        return []
    if choice.mode == "named":
        return [tool for tool in tools if tool.provider_name == choice.name]
    return list(tools)
