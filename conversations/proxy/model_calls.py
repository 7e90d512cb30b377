"""What the recorder reads out of a host's model call: the question it asks, the model it names
and the reply it got (parsed by the loop's own providers, ``Provider.recorded_reply``).

Nothing here fails on what a host or an upstream sent: a body that is not what its format says
becomes a diagnostic, and the raw exchange is stored whatever it holds.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from conversations.loop.providers import PROVIDERS, ProviderError
from conversations.loop.providers.base import is_event_stream
from conversations.loop.wire import WireExchange
from conversations.typealias import JSONDict, JSONValue

FORMATS = ("openai_chat", "openai_responses", "anthropic", "gemini")
# The model in a Gemini path: /v1beta/models/{model}:generateContent
_GEMINI_MODEL = re.compile(r"/models/([^/:?]+)")


@dataclass
class ReadCall:
    """A model call as the recorder shows it."""

    question: str
    model: str
    text: str = ""
    calls: list[JSONDict] = field(default_factory=list)
    usage: JSONDict = field(default_factory=dict)
    diagnostics: list[str] = field(default_factory=list)
    # The reply could not be read (an error status, an unreadable body): the step is an error.
    error: str = ""
    request: JSONDict = field(default_factory=dict)


def read_model_call(fmt: str, exchange: WireExchange) -> ReadCall:
    """The question, model and parsed reply of one recorded model call."""
    request = _json_object(exchange.request_body)
    read = ReadCall(
        question=host_question(fmt, request), model=_model(fmt, request, exchange.label), request=request
    )
    provider = PROVIDERS.get(fmt)
    if provider is None:
        read.error = f"not a model format the proxy knows: {fmt!r}"
        return read
    if exchange.error and not exchange.response_body:
        read.error = exchange.error
        return read
    status = exchange.status
    if status.isdigit() and not 200 <= int(status) < 300:
        read.error = f"the upstream answered HTTP {status}"
        return read
    stream = is_event_stream(exchange) or exchange.response_body.lstrip().startswith(("data:", "event:"))
    try:
        reply = provider.recorded_reply(exchange.response_body, exchange, stream=stream)
    except ProviderError as exc:
        read.error = exc.message
        return read
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        # RecursionError: JSON nested deeper than Python's parser recurses.
        read.error = f"the reply could not be read as {provider.label}: {type(exc).__name__}: {exc}"
        return read
    read.text = reply.text or ""
    read.calls = [_parsed(call.as_json()) for call in reply.tool_calls]
    read.usage = reply.usage
    read.diagnostics = list(reply.notes)
    if exchange.error:
        read.diagnostics.append(f"the proxy noted: {exchange.error}")
    return read


def _parsed(call: JSONDict) -> JSONDict:
    """A call marked as recorded by the proxy (``proxied``: nothing here checked or ran it), with
    its arguments read from their text when the provider left them unparsed (the loop reads them
    when it checks a call)."""
    call["proxied"] = True
    text = call.get("arguments_text")
    if call.get("arguments") is None and isinstance(text, str):
        found = _json_object(text) if text.strip().startswith("{") else None
        if found or text.strip() == "{}":
            call["arguments"] = found
    return call


def _json_object(text: str) -> JSONDict:
    try:
        value = json.loads(text) if text else {}
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def _model(fmt: str, request: JSONDict, label: str) -> str:
    model = request.get("model")
    if isinstance(model, str):
        return model
    found = _GEMINI_MODEL.search(label) if fmt == "gemini" else None
    return found.group(1) if found else ""


def _texts(content: JSONValue, kinds: tuple[str, ...]) -> str:
    """The text of a message's content: a string, or its parts of the given types joined."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts: list[str] = []
    for part in content:
        if isinstance(part, dict) and part.get("type", "text") in kinds:
            text = part.get("text")
            if isinstance(text, str):
                parts.append(text)
    return "\n".join(parts)


def host_question(fmt: str, request: JSONDict) -> str:
    """The last user text of a model request: what the host asked (a request that carries
    tool results back still ends in the same question). "" when there is none."""
    if fmt == "gemini":
        items = request.get("contents")
        for item in reversed(items if isinstance(items, list) else []):
            if isinstance(item, dict) and item.get("role", "user") == "user":
                text = _texts(item.get("parts"), ("text",))
                if text:
                    return text
        return ""
    if fmt == "openai_responses":
        given = request.get("input")
        if isinstance(given, str):
            return given
        items = given if isinstance(given, list) else []
    else:
        messages = request.get("messages")
        items = messages if isinstance(messages, list) else []
    for item in reversed(items):
        if isinstance(item, dict) and item.get("role") == "user":
            text = _texts(item.get("content"), ("text", "input_text"))
            if text:
                return text
    return ""
