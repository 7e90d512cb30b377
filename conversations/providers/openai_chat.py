"""OpenAI Chat Completions (``POST {base}/chat/completions``) through the official SDK.

The SDK does the HTTP; the exact request bytes and the response body are taken from the
httpx2 request/response objects the SDK exposes (``with_raw_response``), so what is recorded is
what crossed the wire. Any OpenAI-compatible server (Ollama, vLLM, llama.cpp) and the demo model
speak this format.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime
from typing import Any, ClassVar

import httpx2
import openai
from openai.types.chat import ChatCompletion

from conversations.llm import Message, ToolCall, ToolChoice, ToolDef
from conversations.providers.base import Endpoint, ModelReply, ModelRequest, ProviderError
from inspector.typealias import JSONDict
from inspector.wire import WireExchange, decode_body, safe_headers

_clients: dict[Endpoint, openai.OpenAI] = {}
_clients_lock = threading.Lock()


def _client(endpoint: Endpoint) -> openai.OpenAI:
    """One SDK client (and connection pool) per endpoint, shared by all threads."""
    with _clients_lock:
        client = _clients.get(endpoint)
        if client is None:
            http_client = httpx2.Client(
                transport=endpoint_transport.get(endpoint), timeout=endpoint.timeout, follow_redirects=False
            )
            client = openai.OpenAI(
                base_url=endpoint.base_url,
                api_key=endpoint.api_key or "no-key",
                # One attempt per exchange: a retry would be a second, unrecorded exchange.
                max_retries=0,
                timeout=endpoint.timeout,
                http_client=http_client,
            )
            _clients[endpoint] = client
        return client


class _TransportRegistry:
    """In-process transports for endpoints served by this app (the demo model), by endpoint."""

    def __init__(self) -> None:
        self._transports: dict[Endpoint, httpx2.BaseTransport] = {}

    def set(self, endpoint: Endpoint, transport: httpx2.BaseTransport) -> None:
        self._transports.setdefault(endpoint, transport)

    def get(self, endpoint: Endpoint) -> httpx2.BaseTransport | None:
        return self._transports.get(endpoint)


endpoint_transport = _TransportRegistry()


def wire_tool(tool: ToolDef) -> JSONDict:
    function: JSONDict = {"name": tool.provider_name, "parameters": tool.input_schema}
    if tool.description:
        function["description"] = tool.description
    return {"type": "function", "function": function}


def wire_tool_choice(choice: ToolChoice) -> str | JSONDict:
    if choice.mode == "named":
        return {"type": "function", "function": {"name": choice.name or ""}}
    return choice.mode


def wire_message(message: Message) -> JSONDict:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id or "", "content": message.content or ""}
    if message.role == "assistant" and message.tool_calls:
        return {
            "role": "assistant",
            "content": message.content,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments_text},
                }
                for call in message.tool_calls
            ],
        }
    return {"role": message.role, "content": message.content or ""}


def request_body(model: str, request: ModelRequest) -> dict[str, Any]:
    """The keyword arguments of ``chat.completions.create`` for this request."""
    body: dict[str, Any] = {"model": model, "messages": [wire_message(m) for m in request.messages]}
    if request.tools:
        body["tools"] = [wire_tool(t) for t in request.tools]
        body["tool_choice"] = wire_tool_choice(request.tool_choice)
        if request.parallel_tool_calls is not None:
            body["parallel_tool_calls"] = request.parallel_tool_calls
    if request.response_format is not None:
        body["response_format"] = request.response_format
    return body


def _exchange(request: httpx2.Request, started: datetime, t0: float) -> WireExchange:
    return WireExchange(
        channel="llm",
        label=f"{request.method} {request.url.path}",
        started_at=started,
        request_headers=safe_headers(request.headers.multi_items()),
        request_body=decode_body(request.content),
        duration_ms=(time.monotonic() - t0) * 1000,
    )


def _with_response(exchange: WireExchange, response: httpx2.Response) -> WireExchange:
    exchange.status = str(response.status_code)
    exchange.response_headers = safe_headers(response.headers.multi_items())
    exchange.response_body = decode_body(response.content)
    return exchange


def _error_message(body: str, fallback: str) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return fallback
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])
    if isinstance(error, str):
        return error
    return fallback


class OpenAIChatProvider:
    key: ClassVar[str] = "openai_chat"
    label: ClassVar[str] = "OpenAI Chat Completions"

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint

    def complete(self, request: ModelRequest) -> ModelReply:
        client = _client(self.endpoint)
        started = datetime.now(UTC)
        t0 = time.monotonic()
        try:
            raw = client.chat.completions.with_raw_response.create(
                **request_body(self.endpoint.model, request)
            )
        except openai.APIStatusError as exc:
            exchange = _with_response(_exchange(exc.response.request, started, t0), exc.response)
            detail = _error_message(exchange.response_body, str(exc))
            exchange.error = detail
            raise ProviderError(
                f"the model endpoint answered {exc.status_code}: {detail}",
                exchange=exchange,
                status=exc.status_code,
            ) from exc
        except openai.APIConnectionError as exc:
            exchange = _exchange(exc.request, started, t0)
            kind = "timed out" if isinstance(exc, openai.APITimeoutError) else "could not be reached"
            exchange.status = "timeout" if isinstance(exc, openai.APITimeoutError) else "error"
            exchange.error = f"{type(exc).__name__}: {exc.__cause__ or exc}"
            raise ProviderError(f"the model endpoint {kind}: {exchange.error}", exchange=exchange) from exc
        exchange = _with_response(_exchange(raw.http_request, started, t0), raw.http_response)
        try:
            completion = raw.parse()
            if not isinstance(completion, ChatCompletion) or not completion.choices:
                raise ValueError("no choices in the response")
        except Exception as exc:  # noqa: BLE001 — a malformed 200 is the endpoint's error, recorded
            exchange.error = f"unreadable response: {exc}"
            raise ProviderError(
                f"the model endpoint sent an unreadable response: {exc}", exchange=exchange
            ) from exc
        choice = completion.choices[0]
        message = choice.message
        calls = [
            ToolCall(id=call.id, name=call.function.name, arguments_text=call.function.arguments or "")
            for call in message.tool_calls or []
            if call.type == "function"
        ]
        return ModelReply(
            text=message.content,
            tool_calls=calls,
            finish_reason=str(choice.finish_reason or ""),
            exchange=exchange,
            usage=completion.usage.model_dump(mode="json", exclude_none=True) if completion.usage else {},
            refusal=message.refusal,
        )
