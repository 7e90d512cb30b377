"""Answering a server's ``sampling/createMessage`` with a real model profile.

The request is turned into a plain chat request to the profile's provider; the provider call's
raw HTTP exchange is returned with the answer, so the nested model call is recorded like any
other (with the inspector's own redaction).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from conversations.llm import Message
from conversations.models import ModelProfile
from conversations.providers import PROVIDERS, ModelRequest, ProviderError
from conversations.runner import TurnSetupError, endpoint_for
from conversations.wire import WireExchange


@dataclass
class SamplingAnswer:
    """The protocol result to send back (or ``error``), and the model exchange that produced it."""

    result: dict[str, Any] | None
    error: str
    exchange: WireExchange | None


def _text(content: Any) -> str:
    blocks = content if isinstance(content, list) else [content]
    parts = []
    for block in blocks:
        if isinstance(block, dict) and block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        elif isinstance(block, dict):
            parts.append(f"[{block.get('type', 'content')} omitted]")
    return "\n".join(parts)


def sampling_messages(params: dict[str, Any]) -> list[Message]:
    """The chat messages a ``sampling/createMessage`` request describes (text only)."""
    messages: list[Message] = []
    if params.get("systemPrompt"):
        messages.append(Message(role="system", content=str(params["systemPrompt"])))
    for message in params.get("messages") or []:
        text = _text(message.get("content"))
        if message.get("role") == "assistant":
            messages.append(Message(role="assistant", content=text))
        else:
            messages.append(Message(role="user", content=text))
    return messages


def sampling_answer(*, profile: ModelProfile, params: dict[str, Any]) -> SamplingAnswer:
    """Ask ``profile``'s model what the server asked; never raises."""
    try:
        provider = PROVIDERS[profile.provider](endpoint_for(profile))
        reply = provider.complete(ModelRequest(messages=sampling_messages(params)))
    except TurnSetupError as exc:
        return SamplingAnswer(None, f"the sampling model cannot be used: {exc}", None)
    except ProviderError as exc:
        return SamplingAnswer(None, f"the sampling model failed: {exc.message}", exc.exchange)
    result = {
        "role": "assistant",
        "content": {"type": "text", "text": reply.text or ""},
        "model": profile.model,
        "stopReason": "endTurn" if reply.finish_reason in {"stop", "end_turn", ""} else reply.finish_reason,
    }
    return SamplingAnswer(result, "", reply.exchange)
