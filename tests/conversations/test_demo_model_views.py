"""The demo model over HTTP: keyed access, OpenAI-style errors, and the models list."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from openai.types.chat import ChatCompletion
from pytest_django.fixtures import Settings

KEY = "demo-test-key"
COMPLETIONS = "/demo-model/v1/chat/completions"
MODELS = "/demo-model/v1/models"
WEATHER = {
    "type": "function",
    "function": {
        "name": "demo__get_weather_forecast",
        "description": "Get the weather forecast for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "day": {"type": "string", "default": "today"}},
            "required": ["city"],
        },
    },
}
QUESTION = {
    "model": "demo",
    "messages": [{"role": "user", "content": "What will the weather be like in Beijing tomorrow?"}],
    "tools": [WEATHER],
}


@pytest.fixture(autouse=True)
def demo_settings(settings: Settings) -> None:
    settings.DEMO_MODEL_API_KEY = KEY
    settings.DEMO_MODEL_LATENCY_SECONDS = 0.0


def post(client: Client, body: Any, key: str | None = KEY) -> Any:
    headers = {"HTTP_AUTHORIZATION": f"Bearer {key}"} if key is not None else {}
    payload = body if isinstance(body, str) else json.dumps(body)
    return client.post(COMPLETIONS, data=payload, content_type="application/json", **headers)


def test_the_routes_sit_under_an_openai_style_base_url() -> None:
    assert reverse("demo-model-chat-completions") == COMPLETIONS
    assert reverse("demo-model-models") == MODELS


def test_a_request_without_a_key_gets_401_invalid_api_key(client: Client) -> None:
    response = post(client, QUESTION, key=None)

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_api_key"


def test_a_wrong_key_gets_401_and_is_not_echoed(client: Client) -> None:
    response = post(client, QUESTION, key="sk-wrong-secret")

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_api_key"
    assert "sk-wrong-secret" not in response.content.decode()


def test_the_right_key_gets_a_chat_completion_without_a_login(client: Client) -> None:
    response = post(client, QUESTION)

    assert response.status_code == 200
    ChatCompletion.model_validate(response.json())
    arguments = response.json()["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(arguments) == {"city": "Beijing", "day": "tomorrow"}


def test_invalid_json_gets_400_in_openais_envelope(client: Client) -> None:
    response = post(client, "{not json")

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert "could not parse the JSON body" in error["message"]


def test_a_json_body_that_is_no_object_gets_400(client: Client) -> None:
    assert post(client, "[1, 2]").status_code == 400


def test_validation_errors_pass_through_with_their_status(client: Client) -> None:
    response = post(client, {"model": "demo", "messages": []})

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "empty_array"


def test_the_http_500_marker_gives_a_500(client: Client) -> None:
    body = {**QUESTION, "messages": [{"role": "user", "content": "[demo:http-500] weather in Oslo"}]}

    assert post(client, body).status_code == 500


def test_latency_setting_and_slow_marker_add_up(
    client: Client, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    slept: list[float] = []
    monkeypatch.setattr("conversations.demo_model_views.time.sleep", slept.append)
    settings.DEMO_MODEL_LATENCY_SECONDS = 0.5
    body = {**QUESTION, "messages": [{"role": "user", "content": "[demo:slow=99] weather in Oslo"}]}

    assert post(client, body).status_code == 200
    assert slept == [30.5]


def test_get_is_not_allowed_on_completions(client: Client) -> None:
    assert client.get(COMPLETIONS, HTTP_AUTHORIZATION=f"Bearer {KEY}").status_code == 405


def test_models_lists_the_demo_model(client: Client) -> None:
    response = client.get(MODELS, HTTP_AUTHORIZATION=f"Bearer {KEY}")

    assert response.status_code == 200
    assert response.json() == {
        "object": "list",
        "data": [{"id": "demo", "object": "model", "created": 0, "owned_by": "tool-call-inspector (demo)"}],
    }


def test_models_needs_the_key_too(client: Client) -> None:
    assert client.get(MODELS).status_code == 401
