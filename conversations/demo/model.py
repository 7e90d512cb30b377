"""The demo model: a deterministic, offline model behind the OpenAI Chat Completions wire format.

(The HTTP views also speak OpenAI Responses, Anthropic Messages and Gemini, streamed or not: each
request is converted into this module's form and the answer back, by the format's
:class:`~conversations.demo.base.Dialect`.)

This module is the entry point; the steps live beside it in the package (see
:mod:`conversations.demo`).

It lets a class run the real client code, the raw capture, the parser, the validator and the
repair loop with no API key and no network. It is no language model: it picks a tool by word
overlap with the tools' names and descriptions, calls it only when the tool's description fits
the question (says it takes what the question gives and refuses none of it: the description
rule of :mod:`conversations.demo.fit`, docs/evals.md §8), fills arguments with a few patterns guided by each
tool's JSON Schema, and writes answers from fixed templates labelled ``[demo model]``.

Contract of :func:`complete`:

* A request a real endpoint would refuse gets a 400 with an OpenAI-style error body, worded like
  OpenAI's where the wording is known.
* It reads the request as an open-weight model behind vLLM reads it: rendered with its chat
  template (Qwen2.5-7B-Instruct's), the messages and tools read back from that text
  (:mod:`conversations.demo.prompt`); ``tool_choice``, ``parallel_tool_calls`` and
  ``response_format`` from the request, as an engine applies them.
* With no tool results after the last user message, it decides: call tools, or answer in text.
* With tool results, it repairs once after an error result, else writes the final answer.
* It speaks the format the request asks for (:data:`conversations.demo.conventions._FORMATS`):
  native ``tool_calls``; the ``tool_decision`` structured-output schema; or, read from the
  system prompt the inspector's text paradigms write, the XML or JSON call convention, an intent
  label, or bare arguments. Tools, tool_choice, calls and results are read back from that prompt
  and that history.
* Markers in the user's question make it misbehave on purpose
  (:data:`conversations.demo.scenarios.MARKERS`), in every format; the call-breaking ones only on
  the first attempt at a decision (a re-ask or a repair is answered properly).
* The same request gives the same body, apart from ``created``.

Pure Python: no Django, no I/O, no randomness.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass

from conversations.chat_templates import DEMO_TOKENIZER
from conversations.demo.conventions import Written, check_response_format, format_type, understand
from conversations.demo.prompt import through_template
from conversations.demo.request import Request, RequestError, parse_request
from conversations.demo.scenarios import DRIP_MARKER_CAP_SECONDS, SLOW_MARKER_CAP_SECONDS
from conversations.demo.understanding import Question, read_question
from conversations.loop.splicing.tokens import count_tokens
from conversations.typealias import JSONDict, JSONValue


@dataclass(frozen=True)
class DemoReply:
    """One HTTP answer: ``status`` 200 with a ``chat.completion`` body, or an error status with
    an OpenAI-style ``{"error": {"message", "type", "param", "code"}}`` body."""

    status: int
    body: JSONDict


def openai_error_body(
    message: str,
    *,
    error_type: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
) -> JSONDict:
    """The error envelope OpenAI's API returns, so clients raise their usual exceptions."""
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


def complete(request: Mapping[str, JSONValue]) -> DemoReply:
    """Answer one Chat Completions request body (already decoded from JSON).

    Never raises for bad input: invalid requests become a 400 reply, ``[demo:http-500]`` a 500.
    The request is rendered with the demo's chat template and the demo decides from that text
    (:mod:`conversations.demo.prompt`): what the page shows as the prompt is what it reads.
    """
    try:
        speaking, parsed = understand(through_template(request, parse_request(request)))
    except RequestError as error:
        return DemoReply(400, openai_error_body(error.message, param=error.param, code=error.code))
    question = read_question(parsed.messages)
    if "http-500" in question.markers:
        message = (
            "The server had an error while processing your request. Sorry about that! (demo: [demo:http-500])"
        )
        return DemoReply(500, openai_error_body(message, error_type="server_error"))
    refusal = _refusal(request, parsed, question)
    if refusal is not None:
        return DemoReply(400, refusal)
    try:
        check_response_format(parsed.response_format)
    except RequestError as error:
        return DemoReply(400, openai_error_body(error.message, param=error.param, code=error.code))
    written = speaking.encode(parsed, speaking.respond(parsed, question))
    return DemoReply(200, _completion_body(parsed, written))


def simulated_delay(request: Mapping[str, JSONValue]) -> float:
    """Seconds asked for by a ``[demo:slow=SECONDS]`` marker in the current question, capped at
    :data:`SLOW_MARKER_CAP_SECONDS`; 0 when there is none or the request is invalid."""
    try:
        _, parsed = understand(parse_request(request))
    except RequestError:
        return 0.0
    return min(read_question(parsed.messages).slow_seconds, SLOW_MARKER_CAP_SECONDS)


def stream_delay(request: Mapping[str, JSONValue]) -> float:
    """Seconds between streamed events asked for by a ``[demo:drip=SECONDS]`` marker in the current
    question, capped at :data:`DRIP_MARKER_CAP_SECONDS`; 0 when there is none or the request is
    invalid."""
    try:
        _, parsed = understand(parse_request(request))
    except RequestError:
        return 0.0
    return min(read_question(parsed.messages).drip_seconds, DRIP_MARKER_CAP_SECONDS)


def _refusal(raw: Mapping[str, JSONValue], request: Request, question: Question) -> JSONDict | None:
    """The 400 a server without the capability gives, when a marker asks the demo to be one."""
    if "no-native-tools" in question.markers and raw.get("tools"):
        # Ollama's wording for a model whose template has no tool support (docs/wire-formats.md §6).
        return openai_error_body(f"registry.ollama.ai/library/{request.model} does not support tools")
    if "no-structured" in question.markers and format_type(request.response_format) == "json_schema":
        # xAI's wording when response_format is not available for a model.
        return openai_error_body(
            "The response_format parameter is unsupported at the moment. Leave it unset.",
            param="response_format",
        )
    return None


def _completion_body(request: Request, turn: Written) -> JSONDict:
    message: JSONDict = {"role": "assistant", "content": turn.content, "refusal": None, "annotations": []}
    if turn.calls:
        tool_calls: list[JSONValue] = [
            {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
            for call in turn.calls
        ]
        message["tool_calls"] = tool_calls
    prompt_tokens = count_tokens(request.prompt, DEMO_TOKENIZER)
    completion_tokens = count_tokens(_generated(turn), DEMO_TOKENIZER)
    return {
        "id": "chatcmpl-demo" + hashlib.sha256(request.messages_fingerprint.encode()).hexdigest()[:24],
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.model,
        "system_fingerprint": "demo",
        "service_tier": "default",
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if turn.calls else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def _generated(turn: Written) -> str:
    """The text a model of the template's family generates for ``turn``: its content, each call
    in the template's ``<tool_call>`` form, and the end of its turn (what a serving engine counts
    as completion tokens)."""
    calls = [
        f'<tool_call>\n{{"name": {json.dumps(call.name)}, "arguments": {_arguments(call.arguments)}}}\n</tool_call>'
        for call in turn.calls
    ]
    return "\n".join(filter(None, [turn.content or "", *calls])) + "<|im_end|>"


def _arguments(text: str) -> str:
    """A call's arguments as the template writes them (``tojson``: JSON, non-ASCII kept)."""
    try:
        return json.dumps(json.loads(text), ensure_ascii=False)
    except ValueError:
        return json.dumps(text, ensure_ascii=False)
