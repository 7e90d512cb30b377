"""The OpenAI Chat Completions provider over a real HTTP exchange with an in-process transport."""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx2
import pytest

from conversations.loop.llm import Message, ToolCall, ToolChoice, ToolDef
from conversations.loop.providers.base import Endpoint, ModelReply, ModelRequest, ProviderError
from conversations.loop.providers.openai_chat import OpenAIChatProvider, endpoint_transport
from conversations.loop.wire import MASK, WireExchange
from conversations.typealias import JSONDict, JSONValue

API_KEY = "sk-test-3f9a1c-never-store-me"
CALCULATE = ToolDef(
    server_id=1,
    server_name="demo",
    name="calculate",
    provider_name="demo__calculate",
    description="Evaluate arithmetic.",
    input_schema={
        "type": "object",
        "properties": {"expression": {"type": "string"}},
        "required": ["expression"],
    },
)
QUESTION = [Message(role="user", content="What is 6 * 7?")]


def completion(message: JSONDict, finish_reason: str = "stop") -> JSONDict:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "test-model",
        "choices": [
            {"index": 0, "finish_reason": finish_reason, "message": {"role": "assistant", **message}}
        ],
        "usage": {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16},
    }


@dataclass
class ModelServer:
    """Serves one canned response per request and keeps every request it received."""

    respond: Callable[[httpx2.Request], httpx2.Response]
    received: list[httpx2.Request] = field(default_factory=list)

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        request.read()
        self.received.append(request)
        return self.respond(request)

    def body(self, index: int = 0) -> JSONDict:
        data: JSONDict = json.loads(self.received[index].content)
        return data


def serve(respond: Callable[[httpx2.Request], httpx2.Response]) -> tuple[OpenAIChatProvider, ModelServer]:
    """A provider whose endpoint is answered by ``respond``; each call gets a fresh endpoint."""
    server = ModelServer(respond)
    # Clients are cached per endpoint, so every test needs one of its own.
    endpoint = Endpoint(
        model="test-model", base_url=f"http://model-{uuid.uuid4().hex}.test/v1", api_key=API_KEY
    )
    endpoint_transport.set(endpoint, httpx2.MockTransport(server.handle))
    return OpenAIChatProvider(endpoint), server


def answering(body: JSONDict, status: int = 200) -> Callable[[httpx2.Request], httpx2.Response]:
    return lambda request: httpx2.Response(status, json=body)


def complete(provider: OpenAIChatProvider, request: ModelRequest | None = None) -> ModelReply:
    return provider.complete(request or ModelRequest(messages=QUESTION, tools=[CALCULATE]))


def failure(provider: OpenAIChatProvider) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        complete(provider)
    return caught.value


def assert_key_is_nowhere(exchange: WireExchange) -> None:
    assert API_KEY not in repr(dataclasses.asdict(exchange))


# --- requests ------------------------------------------------------------------------------


def test_the_recorded_request_body_is_the_bytes_that_were_sent() -> None:
    provider, server = serve(answering(completion({"content": "42"})))

    reply = complete(provider)

    [sent] = server.received
    assert reply.exchange.request_body.encode() == sent.content
    assert reply.exchange.label == "POST /v1/chat/completions"
    assert reply.exchange.channel == "llm"
    assert sent.url.path == "/v1/chat/completions"


def test_tools_are_sent_in_openai_function_shape() -> None:
    provider, server = serve(answering(completion({"content": "42"})))

    complete(provider)

    assert server.body()["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "demo__calculate",
                "description": "Evaluate arithmetic.",
                "parameters": CALCULATE.input_schema,
            },
        }
    ]
    assert server.body()["model"] == "test-model"


@pytest.mark.parametrize(
    ("choice", "wire"),
    [
        (ToolChoice("auto"), "auto"),
        (ToolChoice("required"), "required"),
        (ToolChoice("none"), "none"),
        (
            ToolChoice("named", name="demo__calculate"),
            {"type": "function", "function": {"name": "demo__calculate"}},
        ),
    ],
    ids=["auto", "required", "none", "named"],
)
def test_tool_choice_is_sent_in_each_mode(choice: ToolChoice, wire: str | JSONDict) -> None:
    provider, server = serve(answering(completion({"content": "42"})))

    complete(provider, ModelRequest(messages=QUESTION, tools=[CALCULATE], tool_choice=choice))

    assert server.body()["tool_choice"] == wire


def test_without_tools_neither_tools_nor_tool_choice_is_sent() -> None:
    provider, server = serve(answering(completion({"content": "Hi."})))

    complete(provider, ModelRequest(messages=QUESTION))

    assert "tools" not in server.body()
    assert "tool_choice" not in server.body()


def test_a_call_and_its_result_are_sent_back_in_openai_message_shape() -> None:
    provider, server = serve(answering(completion({"content": "42"})))
    history = [
        *QUESTION,
        Message(
            role="assistant",
            content=None,
            tool_calls=[ToolCall("call_1", "demo__calculate", '{"expression":"6*7"}')],
        ),
        Message(role="tool", content="42", tool_call_id="call_1", name="demo__calculate"),
    ]

    complete(provider, ModelRequest(messages=history, tools=[CALCULATE]))

    assert server.body()["messages"] == [
        {"role": "user", "content": "What is 6 * 7?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "demo__calculate", "arguments": '{"expression":"6*7"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "42"},
    ]


def test_the_api_key_is_sent_but_never_recorded() -> None:
    provider, server = serve(answering(completion({"content": "42"})))

    reply = complete(provider)

    assert server.received[0].headers["authorization"] == f"Bearer {API_KEY}"
    assert reply.exchange.request_headers["authorization"] == MASK
    assert_key_is_nowhere(reply.exchange)


# --- replies -------------------------------------------------------------------------------


def test_a_text_reply_is_parsed_with_its_status_usage_and_body() -> None:
    body = completion({"content": "6 * 7 = 42"})
    provider, _server = serve(answering(body))

    reply = complete(provider)

    assert reply.text == "6 * 7 = 42"
    assert reply.tool_calls == []
    assert reply.finish_reason == "stop"
    assert reply.usage == {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16}
    assert reply.exchange.status == "200"
    assert json.loads(reply.exchange.response_body) == body
    assert reply.exchange.duration_ms is not None and reply.exchange.duration_ms >= 0


def test_tool_calls_parse_into_tool_calls_with_the_raw_arguments_text() -> None:
    raw_arguments = '{"expression": "6 * 7" }'
    tool_calls: list[JSONValue] = [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "demo__calculate", "arguments": raw_arguments},
        },
        {
            "id": "call_2",
            "type": "function",
            "function": {"name": "demo__calculate", "arguments": "{not json"},
        },
    ]
    provider, _server = serve(
        answering(completion({"content": None, "tool_calls": tool_calls}, "tool_calls"))
    )

    reply = complete(provider)

    assert reply.text is None
    assert reply.finish_reason == "tool_calls"
    assert reply.tool_calls == [
        ToolCall(id="call_1", name="demo__calculate", arguments_text=raw_arguments),
        ToolCall(id="call_2", name="demo__calculate", arguments_text="{not json"),
    ]


def test_a_refusal_is_kept() -> None:
    provider, _server = serve(answering(completion({"content": None, "refusal": "I can't help with that."})))

    assert complete(provider).refusal == "I can't help with that."


# --- failures ------------------------------------------------------------------------------


def test_a_500_with_an_openai_error_body_raises_with_the_message_and_exchange() -> None:
    error_body: JSONDict = {
        "error": {"message": "The server had an error.", "type": "server_error", "code": None}
    }
    provider, server = serve(answering(error_body, status=500))

    error = failure(provider)

    assert error.message == "the model endpoint answered 500: The server had an error."
    assert error.status == 500
    assert error.exchange is not None
    assert error.exchange.status == "500"
    assert error.exchange.error == "The server had an error."
    assert json.loads(error.exchange.response_body) == error_body
    assert error.exchange.request_body.encode() == server.received[0].content
    assert len(server.received) == 1, "a failed exchange is never retried"
    assert_key_is_nowhere(error.exchange)


def test_a_400_raises_with_the_endpoint_message() -> None:
    error_body: JSONDict = {
        "error": {
            "message": "Invalid schema for function 'demo__calculate'.",
            "type": "invalid_request_error",
        }
    }
    provider, _server = serve(answering(error_body, status=400))

    error = failure(provider)

    assert error.message == "the model endpoint answered 400: Invalid schema for function 'demo__calculate'."
    assert error.status == 400
    assert error.exchange is not None and error.exchange.status == "400"


def test_an_error_status_without_a_json_body_still_raises_with_the_exchange() -> None:
    provider, _server = serve(lambda request: httpx2.Response(502, text="Bad Gateway"))

    error = failure(provider)

    assert error.message.startswith("the model endpoint answered 502: ")
    assert error.exchange is not None
    assert error.exchange.response_body == "Bad Gateway"


def test_a_200_that_is_not_json_raises_an_unreadable_response_error() -> None:
    provider, _server = serve(
        lambda request: httpx2.Response(
            200, content=b"<html>oops</html>", headers={"content-type": "application/json"}
        )
    )

    error = failure(provider)

    assert error.message.startswith("the model endpoint sent an unreadable response: ")
    assert error.exchange is not None
    assert error.exchange.status == "200"
    assert error.exchange.response_body == "<html>oops</html>"
    assert error.exchange.error.startswith("unreadable response: ")


def test_a_200_without_choices_raises() -> None:
    provider, _server = serve(answering({**completion({"content": "x"}), "choices": []}))

    error = failure(provider)

    assert error.message == "the model endpoint sent an unreadable response: no choices in the response"


def test_a_connection_error_raises_with_the_exchange_that_was_attempted() -> None:
    def refuse(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("connection refused", request=request)

    provider, _server = serve(refuse)

    error = failure(provider)

    assert error.message.startswith("the model endpoint could not be reached: ")
    assert "connection refused" in error.message
    assert error.exchange is not None
    assert error.exchange.status == "error"
    assert json.loads(error.exchange.request_body)["model"] == "test-model"
    assert error.exchange.response_body == ""
    assert error.exchange.request_headers["authorization"] == MASK
    assert_key_is_nowhere(error.exchange)


def test_a_read_timeout_raises_a_timed_out_error() -> None:
    def stall(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ReadTimeout("read timed out", request=request)

    provider, _server = serve(stall)

    error = failure(provider)

    assert error.message.startswith("the model endpoint timed out: ")
    assert error.exchange is not None
    assert error.exchange.status == "timeout"
