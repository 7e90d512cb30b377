"""A fake model endpoint for provider tests: canned answers over ``httpx2.MockTransport``."""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import httpx2

from conversations.loop.llm import Message, ToolDef
from conversations.loop.providers.base import Endpoint, Provider
from conversations.loop.providers.http import endpoint_transport
from conversations.loop.wire import WireExchange
from conversations.typealias import JSONDict, JSONValue

API_KEY = "sk-test-3f9a1c-never-store-me"
WEATHER = ToolDef(
    server_id=1,
    server_name="demo",
    name="get_weather_forecast",
    provider_name="demo__get_weather_forecast",
    description="Get the weather forecast for a city.",
    input_schema={
        "type": "object",
        "properties": {"city": {"type": "string"}, "day": {"type": "string"}},
        "required": ["city"],
    },
)
CLOCK = ToolDef(
    server_id=1,
    server_name="demo",
    name="current_time",
    provider_name="demo__current_time",
    description="The current time.",
    input_schema={"type": "object", "properties": {}},
)
QUESTION = [Message(role="user", content="What will the weather be like in Beijing tomorrow?")]


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


def serve(
    provider_class: Callable[[Endpoint], Provider],
    respond: Callable[[httpx2.Request], httpx2.Response],
    *,
    stream: bool = False,
    base_url: str | None = None,
    model: str = "test-model",
) -> tuple[Provider, ModelServer]:
    """A provider whose endpoint is answered by ``respond``; each call gets a fresh endpoint."""
    server = ModelServer(respond)
    endpoint = Endpoint(
        model=model,
        base_url=base_url or f"http://model-{uuid.uuid4().hex}.test",
        api_key=API_KEY,
        stream=stream,
    )
    endpoint_transport.set(endpoint, httpx2.MockTransport(server.handle))
    return provider_class(endpoint), server


def answering(body: JSONValue, status: int = 200) -> Callable[[httpx2.Request], httpx2.Response]:
    return lambda request: httpx2.Response(status, json=body)


def streaming(text: str) -> Callable[[httpx2.Request], httpx2.Response]:
    return lambda request: httpx2.Response(
        200, content=text.encode(), headers={"content-type": "text/event-stream"}
    )


def sse(events: Sequence[JSONValue | tuple[str, JSONValue]], *, done: bool = False) -> str:
    """An event stream: ``(name, data)`` items get an ``event:`` line, bare data items do not."""
    lines = []
    for item in events:
        if isinstance(item, tuple):
            name, data = item
            lines.append(f"event: {name}\ndata: {json.dumps(data)}\n\n")
        else:
            lines.append(f"data: {json.dumps(item)}\n\n")
    if done:
        lines.append("data: [DONE]\n\n")
    return "".join(lines)


def assert_key_is_nowhere(exchange: WireExchange) -> None:
    assert API_KEY not in repr(dataclasses.asdict(exchange))
