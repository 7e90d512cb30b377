"""Every provider format, streamed and not, end to end: ``manage.py ask`` through the real loop,
the demo model served in-process in that provider's wire format, the demo MCP server over stdio."""

from __future__ import annotations

import json
from collections.abc import Iterator
from io import StringIO
from typing import Any

import httpx2
import pytest
from django.core.management import call_command
from django.core.wsgi import get_wsgi_application
from pytest_django.fixtures import Settings

from conversations.loop.llm import Message, ToolDef
from conversations.loop.providers import PROVIDERS, Endpoint, ModelRequest
from conversations.loop.providers.gemini import GeminiProvider
from conversations.loop.providers.http import endpoint_transport
from conversations.models import ModelProfile
from servers import gateway
from tests.factories import UserFactory

WEATHER = "What will the weather be like in Beijing tomorrow?"
# The first request of each format, and where its tool definitions sit.
LABELS = {
    "openai_chat": "POST /demo-model/v1/chat/completions",
    "openai_responses": "POST /demo-model/v1/responses",
    "anthropic": "POST /demo-model/v1/messages",
    "gemini": "POST /demo-model/v1beta/models/demo:generateContent",
}
FORECAST = ToolDef(
    server_id=1,
    server_name="demo",
    name="get_weather_forecast",
    provider_name="demo__get_weather_forecast",
    description="Get the weather forecast for a city.",
    input_schema={"type": "object", "properties": {"city": {"type": "string"}, "day": {"type": "string"}}},
)
STREAM_LABELS = {**LABELS, "gemini": "POST /demo-model/v1beta/models/demo:streamGenerateContent"}

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _admin() -> None:
    """The superuser ``make run`` creates, whom ``ask`` runs as by default."""
    UserFactory(username="admin", is_superuser=True, is_staff=True)


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    """Pooled stdio sessions would otherwise outlive the test (and its database)."""
    yield
    gateway.close_all()


@pytest.fixture(autouse=True)
def _gemini_routes(settings: Settings) -> None:
    settings.ROOT_URLCONF = "tests.conversations.demo_urls"


def _profile(provider: str, *, stream: bool) -> ModelProfile:
    return ModelProfile.objects.create(
        name=f"demo-{provider}-{'stream' if stream else 'whole'}",
        provider=provider,
        model="demo",
        api_key_env="DEMO_MODEL_API_KEY",
        is_demo=True,
        stream=stream,
    )


def _ask(*args: str) -> dict[str, Any]:
    out = StringIO()
    call_command("ask", *args, "--json", stdout=out)
    transcript: dict[str, Any] = json.loads(out.getvalue())
    turn: dict[str, Any] = transcript["turns"][0]
    return turn


def _exchanges(turn: dict[str, Any], channel: str) -> list[dict[str, Any]]:
    return [e for step in turn["steps"] for e in step["exchanges"] if e["channel"] == channel]


def _tool_names(provider: str, body: dict[str, Any]) -> list[str]:
    if provider == "openai_chat":
        return [tool["function"]["name"] for tool in body["tools"]]
    if provider == "gemini":
        return [d["name"] for d in body["tools"][0]["functionDeclarations"]]
    return [tool["name"] for tool in body["tools"]]


def _result_sent_back(provider: str, body: dict[str, Any]) -> bool:
    """Whether the follow-up request carries the tool result in the provider's own shape."""
    if provider == "openai_chat":
        return any(m["role"] == "tool" and m["tool_call_id"] for m in body["messages"])
    if provider == "openai_responses":
        calls = {i["call_id"] for i in body["input"] if i.get("type") == "function_call"}
        outputs = {i["call_id"] for i in body["input"] if i.get("type") == "function_call_output"}
        return bool(calls) and calls == outputs
    if provider == "anthropic":
        last = body["messages"][-1]
        return last["role"] == "user" and last["content"][0]["type"] == "tool_result"
    last = body["contents"][-1]
    return last["role"] == "user" and "output" in last["parts"][0]["functionResponse"]["response"]


def _weather_turn(provider: str, *, stream: bool) -> None:
    profile = _profile(provider, stream=stream)
    variant = f"{provider}, {'streamed' if stream else 'whole'}"

    turn = _ask(WEATHER, "--model", profile.name)

    assert turn["status"] == "done", (variant, turn["error"])
    assert "Beijing" in turn["answer"], variant
    [call] = [e for e in _exchanges(turn, "mcp") if e["label"] == "tools/call"]
    params = json.loads(call["request_body"])["params"]
    assert params["name"] == "get_weather_forecast", variant
    assert params["arguments"]["city"] == "Beijing", variant
    assert params["arguments"]["day"] == "tomorrow", variant
    first, second = _exchanges(turn, "llm")
    assert first["label"] == (STREAM_LABELS if stream else LABELS)[provider], variant
    assert "demo__get_weather_forecast" in _tool_names(provider, json.loads(first["request_body"])), variant
    if stream:
        assert first["response_body"].startswith(("data: ", "event: ")), variant
    else:
        json.loads(first["response_body"])
    assert second["status"] == "200", variant
    assert _result_sent_back(provider, json.loads(second["request_body"])), variant


@pytest.mark.parametrize("provider", list(PROVIDERS))
def test_a_weather_turn_calls_the_forecast_tool_in_every_format_streamed_or_not(provider: str) -> None:
    # Both variants in one test: one demo MCP server session serves them (spawning is the slow part).
    _weather_turn(provider, stream=False)
    _weather_turn(provider, stream=True)


@pytest.mark.parametrize("provider", ["openai_responses", "anthropic", "gemini"])
def test_the_structured_paradigm_sends_the_schema_in_each_formats_own_field(provider: str) -> None:
    profile = _profile(provider, stream=False)

    turn = _ask(WEATHER, "--model", profile.name, "--paradigm", "structured")

    assert turn["status"] == "done", turn["error"]
    [call] = [e for e in _exchanges(turn, "mcp") if e["label"] == "tools/call"]
    assert json.loads(call["request_body"])["params"]["arguments"]["city"] == "Beijing"
    body = json.loads(_exchanges(turn, "llm")[0]["request_body"])
    schema = {
        "openai_responses": lambda: body["text"]["format"]["schema"],
        "anthropic": lambda: body["output_config"]["format"]["schema"],
        "gemini": lambda: body["generationConfig"]["responseJsonSchema"],
    }[provider]()
    assert "decision" in schema["properties"]


def test_auto_downgrades_on_a_refusal_worded_by_the_provider_and_recorded_verbatim() -> None:
    profile = _profile("anthropic", stream=True)

    turn = _ask(f"[demo:no-native-tools] {WEATHER}", "--model", profile.name, "--paradigm", "auto")

    assert turn["status"] == "done", turn["error"]
    refused = _exchanges(turn, "llm")[0]
    assert refused["status"] == "400"
    assert json.loads(refused["response_body"])["error"]["message"].endswith("does not support tools")
    assert any(step["kind"] == "fallback" for step in turn["steps"])


def test_a_gemini_thought_signature_from_the_demo_is_echoed_on_the_next_request(settings: Settings) -> None:
    endpoint = Endpoint(
        model="demo",
        base_url=GeminiProvider.demo_base_url,
        api_key=settings.DEMO_MODEL_API_KEY,
        stream=True,
        in_process=True,
    )
    endpoint_transport.set(endpoint, httpx2.WSGITransport(app=get_wsgi_application()))
    provider = GeminiProvider(endpoint)
    question = [Message(role="user", content=WEATHER)]

    first = provider.complete(ModelRequest(messages=question, tools=[FORECAST]))
    [call] = first.tool_calls
    history = [
        *question,
        Message(role="assistant", tool_calls=first.tool_calls, echo=first.echo),
        Message(role="tool", content="Sunny, 24°C", tool_call_id=call.id, name=call.name),
    ]
    second = provider.complete(ModelRequest(messages=history, tools=[FORECAST]))

    [part] = json.loads(second.exchange.request_body)["contents"][1]["parts"]
    assert part["thoughtSignature"] and part == first.echo["gemini"]["parts"][0]  # type: ignore[index]
    assert second.text is not None and "Sunny" in second.text
