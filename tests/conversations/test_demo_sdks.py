"""The official SDKs, with their default settings, against the demo model: OpenAI (Chat
Completions and Responses), Anthropic (an API key or an auth token) and google-genai (its
default API version and v1beta, each schema field), streamed and not, with tools. Each reply
and each stream event is validated strictly with the SDK's own types, from the raw bytes the
demo sent (the SDK itself builds its objects leniently)."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import openai
import pytest
from anthropic.types import Message, RawMessageStreamEvent
from django.conf import settings
from google import genai
from google.genai import types as genai_types
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

pytestmark = pytest.mark.django_db(transaction=True)

QUESTION = "What will the weather be like in Beijing tomorrow?"
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "City name"},
        "day": {"type": "string", "description": "today, tomorrow or a weekday"},
    },
    "required": ["city"],
}
DESCRIPTION = "Get the weather forecast for a city on a given day."
ARGUMENTS = {"city": "Beijing", "day": "tomorrow"}


def _events(lines: Any) -> list[dict[str, Any]]:
    """The JSON of each ``data:`` line of an event stream (not ``[DONE]``)."""
    found = []
    for line in lines:
        text = line.decode() if isinstance(line, bytes) else line
        if text.startswith("data:") and text[5:].strip() != "[DONE]":
            found.append(json.loads(text[5:]))
    return found


@pytest.fixture
def base(live_server: Any) -> str:
    return f"{live_server.url}/demo-model"


def test_openai_chat_completions_with_its_defaults(base: str) -> None:
    client = openai.OpenAI(base_url=f"{base}/v1", api_key=settings.DEMO_MODEL_API_KEY)
    tools: Any = [
        {
            "type": "function",
            "function": {"name": "get_weather_forecast", "description": DESCRIPTION, "parameters": SCHEMA},
        }
    ]
    messages: Any = [{"role": "user", "content": QUESTION}]

    raw = client.chat.completions.with_raw_response.create(model="demo", messages=messages, tools=tools)
    reply = ChatCompletion.model_validate(json.loads(raw.http_response.content), strict=True)
    call = reply.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert (call.function.name, json.loads(call.function.arguments)) == ("get_weather_forecast", ARGUMENTS)  # type: ignore[union-attr]

    with client.chat.completions.with_streaming_response.create(
        model="demo", messages=messages, tools=tools, stream=True
    ) as streamed:
        chunks = [
            ChatCompletionChunk.model_validate(event, strict=True) for event in _events(streamed.iter_lines())
        ]
    assert chunks and chunks[-1].choices[-1].finish_reason == "tool_calls"


def test_openai_responses_with_its_defaults(base: str) -> None:
    client = openai.OpenAI(base_url=f"{base}/v1", api_key=settings.DEMO_MODEL_API_KEY)
    tools: Any = [
        {
            "type": "function",
            "name": "get_weather_forecast",
            "description": DESCRIPTION,
            "parameters": SCHEMA,
            "strict": False,
        }
    ]

    for question, kind in ((QUESTION, "function_call"), ("Hello, who are you?", "message")):
        raw = client.responses.with_raw_response.create(model="demo", input=question, tools=tools)
        reply = Response.model_validate(json.loads(raw.http_response.content), strict=True)
        assert reply.output[0].type == kind
        with client.responses.with_streaming_response.create(
            model="demo", input=question, tools=tools, stream=True
        ) as streamed:
            events = _events(streamed.iter_lines())
        adapter: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
        parsed = [adapter.validate_python(event, strict=True) for event in events]
        assert parsed[0].type == "response.created" and parsed[-1].type == "response.completed"
    # The SDK's own objects, as a host reads them.
    made = client.responses.create(model="demo", input=QUESTION, tools=tools)
    assert json.loads(made.output[0].arguments) == ARGUMENTS  # type: ignore[union-attr]


@pytest.mark.parametrize("credential", ["api_key", "auth_token"])
def test_anthropic_messages_with_its_defaults(base: str, credential: str) -> None:
    client = anthropic.Anthropic(base_url=base, **{credential: settings.DEMO_MODEL_API_KEY})  # type: ignore[arg-type]
    tools: Any = [{"name": "get_weather_forecast", "description": DESCRIPTION, "input_schema": SCHEMA}]
    messages: Any = [{"role": "user", "content": QUESTION}]

    raw = client.messages.with_raw_response.create(
        model="demo", max_tokens=256, messages=messages, tools=tools
    )
    reply = Message.model_validate(json.loads(raw.http_response.content), strict=True)
    use = next(block for block in reply.content if block.type == "tool_use")
    assert (use.name, use.input) == ("get_weather_forecast", ARGUMENTS)  # type: ignore[union-attr]

    with client.messages.with_streaming_response.create(
        model="demo", max_tokens=256, messages=messages, tools=tools, stream=True
    ) as streamed:
        events = _events(streamed.iter_lines())
    adapter: TypeAdapter[Any] = TypeAdapter(RawMessageStreamEvent)
    # A ping is part of Anthropic's stream, outside the SDK's union of message events.
    parsed = [adapter.validate_python(event, strict=True) for event in events if event["type"] != "ping"]
    assert parsed[0].type == "message_start" and parsed[-1].type == "message_stop"


@pytest.mark.parametrize("version", [None, "v1beta"])
@pytest.mark.parametrize("schema_field", ["parameters", "parameters_json_schema"])
def test_google_genai_with_its_defaults(base: str, version: str | None, schema_field: str) -> None:
    options = genai_types.HttpOptions(base_url=base, **({"api_version": version} if version else {}))
    client = genai.Client(api_key=settings.DEMO_MODEL_API_KEY, http_options=options)
    declaration = genai_types.FunctionDeclaration(
        name="get_weather_forecast", description=DESCRIPTION, **{schema_field: SCHEMA}
    )
    config = genai_types.GenerateContentConfig(tools=[genai_types.Tool(function_declarations=[declaration])])

    reply = client.models.generate_content(model="demo", contents=QUESTION, config=config)
    assert [(call.name, call.args) for call in reply.function_calls or []] == [
        ("get_weather_forecast", ARGUMENTS)
    ]
    streamed = list(client.models.generate_content_stream(model="demo", contents=QUESTION, config=config))
    calls = [call for chunk in streamed for call in chunk.function_calls or []]
    assert [(call.name, call.args) for call in calls] == [("get_weather_forecast", ARGUMENTS)]


def test_gemini_reads_snake_case_fields_and_keeps_the_schemas_own_names(base: str) -> None:
    """The protobuf JSON mapping's snake_case names are the protocol's; a schema's property names
    are the caller's and are not renamed."""
    schema = {"type": "object", "properties": {"from_unit": {"type": "string"}}, "required": ["from_unit"]}
    body = {
        "contents": [{"role": "user", "parts": [{"text": "Convert from_unit celsius please"}]}],
        "tools": [
            {
                "function_declarations": [
                    {"name": "convert", "description": "Convert units", "parameters_json_schema": schema}
                ]
            }
        ],
        "tool_config": {"function_calling_config": {"mode": "ANY"}},
    }
    reply = httpx.post(
        f"{base}/v1/models/demo:generateContent",
        json=body,
        headers={"x-goog-api-key": settings.DEMO_MODEL_API_KEY},
    )
    assert reply.status_code == 200, reply.text
    call = reply.json()["candidates"][0]["content"]["parts"][0]["functionCall"]
    assert call["name"] == "convert" and set(call["args"]) == {"from_unit"}
