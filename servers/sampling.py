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

from conversations.escaping import hidden_characters
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


# --- the review step (McpServer.sampling_review) ---------------------------------------------

# The error a refused request is answered with: the MCP specification's sampling chapter, "Error
# Handling" (2025-06-18 and 2025-11-25), names code -1 and this message for "user rejected".
USER_REJECTED_CODE = -1
USER_REJECTED = "User rejected sampling request"
# The longest system prompt or message a reviewer may type (the form refuses more).
EDIT_MAX_CHARS = 100_000


def message_text(message: Any) -> str | None:
    """The text of a sampling message a reviewer can edit: one text block (alone or in a list);
    None for anything else (an image, audio, tool use or result, several blocks), shown as is."""
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, list) and len(content) == 1:
        content = content[0]
    if isinstance(content, dict) and content.get("type") == "text" and isinstance(content.get("text"), str):
        return str(content["text"])
    return None


def review_rows(params: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's messages as the review form shows them: {"index", "role", "text", "raw",
    "hidden"} with ``text`` None for a message that cannot be edited (its JSON is shown instead)
    and ``hidden`` true when the text holds an invisible or bidirectional character (the page
    then shows it revealed beside the editable text)."""
    messages = params.get("messages")
    rows = []
    for index, message in enumerate(messages if isinstance(messages, list) else []):
        if isinstance(message, dict):
            text = message_text(message)
            rows.append(
                {
                    "index": index,
                    "role": str(message.get("role", "")),
                    "text": text,
                    "raw": message,
                    "hidden": text is not None and hidden_characters(text),
                }
            )
    return rows


def review_edits(shown: dict[str, Any], form: Any) -> tuple[dict[str, Any], str]:
    """What the reviewer changed in the form (``form``: a QueryDict or mapping) against the
    request as it was shown (``shown``, the stored, redacted params), and an error ("" if none).

    Only what differs is kept — ``systemPrompt`` (text), ``maxTokens`` (a positive integer) and
    ``messages`` ({index: new text}) — so a part the reviewer left alone is sent as the server
    wrote it, secrets the page showed masked included.
    """
    edits: dict[str, Any] = {}
    if "systemPrompt" in form:
        text = str(form.get("systemPrompt", "")).replace("\r\n", "\n")
        if len(text) > EDIT_MAX_CHARS:
            return {}, f"the system prompt is longer than {EDIT_MAX_CHARS} characters"
        if text != str(shown.get("systemPrompt") or ""):
            edits["systemPrompt"] = text
    raw = str(form.get("maxTokens", "")).strip()
    if raw:
        if not (raw.isascii() and raw.isdigit() and len(raw) <= 7) or not 1 <= int(raw) <= 1_000_000:
            return {}, "maxTokens must be a whole number from 1 to 1000000"
        if int(raw) != shown.get("maxTokens"):
            edits["maxTokens"] = int(raw)
    changed: dict[str, str] = {}
    for row in review_rows(shown):
        name = f"message-{row['index']}"
        if row["text"] is None or name not in form:
            continue
        text = str(form.get(name, "")).replace("\r\n", "\n")
        if len(text) > EDIT_MAX_CHARS:
            return {}, f"message {row['index'] + 1} is longer than {EDIT_MAX_CHARS} characters"
        if text != row["text"]:
            changed[str(row["index"])] = text
    if changed:
        edits["messages"] = changed
    return edits, ""


def review_apply(params: dict[str, Any], edits: dict[str, Any]) -> dict[str, Any]:
    """The server's request (``params``, as received) with the reviewer's ``edits`` applied."""
    edited = dict(params)
    if "systemPrompt" in edits:
        edited["systemPrompt"] = edits["systemPrompt"]
    if "maxTokens" in edits:
        edited["maxTokens"] = edits["maxTokens"]
    changed = edits.get("messages") or {}
    messages = list(edited.get("messages") or [])
    for index, message in enumerate(messages):
        if str(index) in changed and isinstance(message, dict):
            messages[index] = {**message, "content": {"type": "text", "text": changed[str(index)]}}
    if changed:
        edited["messages"] = messages
    return edited
