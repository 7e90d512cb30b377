"""OpenAI Chat Completions: the demo's own form, so requests pass as they are; replies, the
``chat.completion.chunk`` event stream and OpenAI's error envelope.

Pure Python: no Django, no I/O.
"""

from __future__ import annotations

from conversations.demo.base import Answer, Dialect, as_object, pieces, sse
from conversations.demo.model import openai_error_body
from conversations.typealias import JSONDict

# --- OpenAI Chat Completions (the demo's own form) ----------------------------------------------


def _chat_to_chat(body: JSONDict, model: str | None) -> JSONDict:
    return {key: value for key, value in body.items() if key not in ("stream", "stream_options")}


def _chat_from_chat(completion: JSONDict, body: JSONDict) -> JSONDict:
    return completion


def _chat_events(completion: JSONDict, body: JSONDict) -> str:
    """``chat.completion.chunk`` events ending in ``[DONE]`` (docs/wire-formats.md §1.3)."""
    answer = Answer.of(completion)
    include_usage = as_object(body.get("stream_options")).get("include_usage") is True
    head: JSONDict = {
        "id": answer.id,
        "object": "chat.completion.chunk",
        "created": answer.created,
        "model": answer.model,
        "system_fingerprint": "demo",
    }

    def chunk(delta: JSONDict, finish_reason: str | None = None) -> str:
        choice: JSONDict = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        data: JSONDict = {**head, "choices": [choice]}
        if include_usage:
            data["usage"] = None
        return sse(data)

    out = [chunk({"role": "assistant", "content": None})]
    if answer.text:
        out += [chunk({"content": piece}) for piece in pieces(answer.text)]
    if answer.refusal:
        out += [chunk({"refusal": piece}) for piece in pieces(answer.refusal)]
    for index, call in enumerate(answer.calls):
        call_id, name, arguments = Answer.call_parts(call)
        first: JSONDict = {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        out.append(chunk({"tool_calls": [first]}))
        out += [
            chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            for piece in pieces(arguments)
        ]
    out.append(chunk({}, answer.finish_reason))
    if include_usage:
        out.append(sse({**head, "choices": [], "usage": answer.usage}))
    out.append("data: [DONE]\n\n")
    return "".join(out)


def openai_error(status: int, message: str) -> JSONDict:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return openai_error_body(message, error_type=kind)


CHAT = Dialect("openai_chat", _chat_to_chat, _chat_from_chat, _chat_events, openai_error, openai_errors=True)
