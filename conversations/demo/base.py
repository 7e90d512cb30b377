"""The contract of a wire dialect (:class:`Dialect`) and the helpers the dialects share: JSON
checks that raise :class:`FormatError` (a 400 in the format's own envelope), stream pieces and
Server-Sent Events, and :class:`Answer`, the demo's Chat Completions reply read back.

The demo's behaviour lives in one place, :func:`conversations.demo.model.complete`, which reads a
Chat Completions request and writes a ``chat.completion``. A dialect converts another format's
request into that form (``to_chat``), and the demo's answer back into the format's reply
(``from_chat``), its event stream (``events``) or its error envelope (``error``). Each dialect
lives in its own module (``openai_chat``, ``openai_responses``, ``anthropic``, ``gemini``); the
view of each format's route names its dialect (:mod:`conversations.demo.views`).

Streams are written whole (the demo has no token-by-token generation), but split the way the
real APIs split them: text in small pieces, and a call's arguments over several chunks
(Anthropic's ``input_json_delta``, Responses' ``function_call_arguments.delta``, Chat's
``tool_calls[index]`` fragments). Gemini sends each ``functionCall`` whole in one chunk, as the
Gemini API does (docs/wire-formats.md §5.1).

Formats whose structured output has no schema name (Anthropic ``output_config``, Gemini
``responseJsonSchema``) are named in those modules: the structured paradigm's union is recognised
by its root ``decision`` property.

Pure Python: no Django, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from conversations.demo.conventions import DECISION_SCHEMA
from conversations.typealias import JSONDict, JSONValue

PIECE = 12  # characters per streamed fragment


class FormatError(Exception):
    """A request the format's real endpoint would refuse (400); the message is for the client."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class Dialect:
    """One wire format spoken by the demo model.

    ``to_chat(body, model)`` returns the Chat Completions request (``model``: the model named by
    the URL, for formats that put it there; else None) and raises :class:`FormatError`;
    ``from_chat(completion, body)`` and ``events(completion, body)`` write the demo's
    ``chat.completion`` as this format's reply or as its ``text/event-stream`` body;
    ``error(status, message)`` is the format's error envelope.
    """

    key: str
    to_chat: Callable[[JSONDict, str | None], JSONDict]
    from_chat: Callable[[JSONDict, JSONDict], JSONDict]
    events: Callable[[JSONDict, JSONDict], str]
    error: Callable[[int, str], JSONDict]
    # The demo's own (OpenAI) error bodies are this format's: relayed whole, param and code kept.
    openai_errors: bool = False

    def error_from_chat(self, status: int, body: JSONDict) -> JSONDict:
        """The demo's error ``body`` in this format's envelope, with the same message."""
        return body if self.openai_errors else self.error(status, _error_message(body))


# --- Shared helpers --------------------------------------------------------------------------


def dump_json(value: JSONValue) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def as_object(value: JSONValue) -> JSONDict:
    return value if isinstance(value, dict) else {}


def as_list(value: JSONValue) -> list[JSONValue]:
    return value if isinstance(value, list) else []


def as_string(value: JSONValue) -> str:
    return value if isinstance(value, str) else ""


def parsed_object(text: str) -> JSONDict:
    """Arguments text as an object; text that is not one (a call cut short on purpose) is ``{}``."""
    try:
        value: JSONValue = json.loads(text) if text.strip() else {}
    except ValueError:
        return {}
    return as_object(value)


def pieces(text: str, size: int = PIECE) -> list[str]:
    return [text[start : start + size] for start in range(0, len(text), size)] or [""]


def sse(data: JSONValue, event: str | None = None) -> str:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {dump_json(data)}\n\n"


def suffix(identifier: str) -> str:
    """The distinctive part of a demo id (``chatcmpl-demo…``, ``call_…``), for other prefixes."""
    return identifier.removeprefix("chatcmpl-").removeprefix("call_")


def schema_name(schema: JSONDict) -> str:
    return DECISION_SCHEMA if "decision" in as_object(schema.get("properties")) else "response"


def _error_message(body: JSONDict) -> str:
    return as_string(as_object(body.get("error")).get("message")) or "the demo model failed"


@dataclass(frozen=True)
class Answer:
    """The parts of a ``chat.completion`` the dialects write out."""

    id: str
    model: str
    created: int
    text: str | None
    refusal: str | None
    calls: list[JSONDict]
    finish_reason: str
    usage: JSONDict

    @classmethod
    def of(cls, completion: JSONDict) -> Answer:
        choice = as_object(as_list(completion.get("choices"))[0])
        message = as_object(choice.get("message"))
        created = completion.get("created")
        return cls(
            id=as_string(completion.get("id")),
            model=as_string(completion.get("model")),
            created=created if isinstance(created, int) else 0,
            text=as_string(message.get("content")) or None,
            refusal=as_string(message.get("refusal")) or None,
            calls=[as_object(call) for call in as_list(message.get("tool_calls"))],
            finish_reason=as_string(choice.get("finish_reason")),
            usage=as_object(completion.get("usage")),
        )

    @staticmethod
    def call_parts(call: JSONDict) -> tuple[str, str, str]:
        """(id, name, arguments text) of a ``tool_calls`` item."""
        function = as_object(call.get("function"))
        return (
            as_string(call.get("id")),
            as_string(function.get("name")),
            as_string(function.get("arguments")),
        )

    def tokens(self, key: str) -> int:
        value = self.usage.get(key)
        return value if isinstance(value, int) else 0
