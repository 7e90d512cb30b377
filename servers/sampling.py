"""Answering a server's ``sampling/createMessage`` with a real model profile.

The request is turned into a plain chat request to the profile's provider, carrying the
generation options the server asked for where that provider's request can (``maxTokens``,
``temperature``, ``stopSequences``); what cannot be honoured (``modelPreferences``,
``includeContext``, ``metadata``, an option the provider lacks) is listed as such with the
answer. The provider call's raw HTTP exchange is returned with the answer, so the nested model
call is recorded like any other (with the inspector's own redaction). See docs/mcp-client.md §5.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from conversations.loop.llm import Message
from conversations.loop.providers import PROVIDERS, ModelRequest, ProviderError
from conversations.loop.wire import WireExchange
from conversations.models import ModelProfile
from conversations.runner import TurnSetupError, endpoint_for
from conversations.typealias import JSONList


@dataclass
class SamplingAnswer:
    """The protocol result to send back (or ``error``), and the model exchange that produced it."""

    result: dict[str, Any] | None
    error: str
    exchange: WireExchange | None
    # Each parameter the request carried: {"name", "value", "honoured", "note"}.
    parameters: JSONList = field(default_factory=list)


# The provider field each generation option is sent as; absent: that provider cannot carry it.
OPTION_FIELDS: dict[str, dict[str, str]] = {
    "openai_chat": {"maxTokens": "max_tokens", "temperature": "temperature", "stopSequences": "stop"},
    "openai_responses": {"maxTokens": "max_output_tokens", "temperature": "temperature"},
    "anthropic": {"maxTokens": "max_tokens", "temperature": "temperature", "stopSequences": "stop_sequences"},
    "gemini": {
        "maxTokens": "generationConfig.maxOutputTokens",
        "temperature": "generationConfig.temperature",
        "stopSequences": "generationConfig.stopSequences",
    },
}
# The loop's finish reasons as MCP's stopReason (the rest pass as they are).
STOP_REASONS = {"stop": "endTurn", "end_turn": "endTurn", "": "endTurn", "length": "maxTokens"}
NOT_HONOURED = {
    "modelPreferences": "not honoured: the server's sampling model profile decides the model",
    "includeContext": "not honoured: no other context is added to the messages",
    "metadata": "not honoured: no provider request carries it",
}


def sampling_parameters(params: dict[str, Any], provider: str) -> JSONList:
    """What became of each parameter of a sampling request on ``provider``'s wire."""
    fields = OPTION_FIELDS.get(provider, {})
    shown: JSONList = []
    for name in ("maxTokens", "temperature", "stopSequences", *NOT_HONOURED):
        if name not in params:
            continue
        value = params[name]
        if name == "includeContext" and value == "none":
            note, honoured = "nothing to add (none)", True
        elif name in NOT_HONOURED:
            note, honoured = NOT_HONOURED[name], False
        elif name in fields:
            note, honoured = f"sent as {fields[name]}", True
        else:
            note, honoured = f"not honoured: the {provider} request has no field for it", False
        shown.append({"name": name, "value": value, "honoured": honoured, "note": note})
    return shown


def _options(params: dict[str, Any], provider: str) -> dict[str, Any]:
    """The ``ModelRequest`` options for the parameters ``provider`` can carry."""
    fields = OPTION_FIELDS.get(provider, {})
    options: dict[str, Any] = {}
    if "maxTokens" in fields and isinstance(params.get("maxTokens"), int):
        options["max_tokens"] = params["maxTokens"]
    if "temperature" in fields and isinstance(params.get("temperature"), int | float):
        options["temperature"] = float(params["temperature"])
    stop = params.get("stopSequences")
    if "stopSequences" in fields and isinstance(stop, list):
        options["stop"] = [str(item) for item in stop]
    return options


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
    parameters = sampling_parameters(params, profile.provider)
    request = ModelRequest(messages=sampling_messages(params), **_options(params, profile.provider))
    try:
        provider = PROVIDERS[profile.provider](endpoint_for(profile))
        reply = provider.complete(request)
    except TurnSetupError as exc:
        return SamplingAnswer(None, f"the sampling model cannot be used: {exc}", None, parameters)
    except ProviderError as exc:
        return SamplingAnswer(None, f"the sampling model failed: {exc.message}", exc.exchange, parameters)
    result = {
        "role": "assistant",
        "content": {"type": "text", "text": reply.text or ""},
        "model": profile.model,
        "stopReason": STOP_REASONS.get(reply.finish_reason, reply.finish_reason),
    }
    return SamplingAnswer(result, "", reply.exchange, parameters)
