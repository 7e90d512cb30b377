"""The demo model over HTTP: keyed access, OpenAI-style errors, and the models list."""

from __future__ import annotations

import json
import threading
import time
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
    real_sleep, test_thread = time.sleep, threading.get_ident()

    def sleep(seconds: float) -> None:
        # time.sleep is the time module's, shared by the process's other threads (the turn
        # lifecycle thread sleeps between its passes): only the view's sleep, in this thread.
        if threading.get_ident() == test_thread:
            slept.append(seconds)
        else:
            real_sleep(seconds)

    monkeypatch.setattr("conversations.demo.views.time.sleep", sleep)
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


# --- the other wire formats ----------------------------------------------------------------

BEIJING = "What will the weather be like in Beijing tomorrow?"
ARGUMENTS = {"city": "Beijing", "day": "tomorrow"}
PARAMETERS = WEATHER["function"]["parameters"]  # type: ignore[index]


@pytest.fixture
def gemini_routes(settings: Settings) -> None:
    settings.ROOT_URLCONF = "tests.conversations.demo_urls"


def events_of(response: Any) -> list[tuple[str, Any]]:
    """(event name, decoded data) of every event in a text/event-stream response."""
    assert response["Content-Type"].startswith("text/event-stream")
    out = []
    for block in response.content.decode().strip().split("\n\n"):
        name, data = "message", ""
        for line in block.split("\n"):
            field, _, value = line.partition(": ")
            if field == "event":
                name = value
            elif field == "data":
                data = value
        out.append((name, data if data == "[DONE]" else json.loads(data)))
    return out


def test_chat_completions_streams_chunks_with_the_arguments_over_several_fragments(client: Client) -> None:
    response = post(client, {**QUESTION, "stream": True, "stream_options": {"include_usage": True}})

    events = [data for _, data in events_of(response)]
    assert events[-1] == "[DONE]"
    fragments = [
        call["function"]["arguments"]
        for chunk in events[:-1]
        for choice in chunk["choices"]
        for call in choice["delta"].get("tool_calls", [])
        if "id" not in call
    ]
    assert len(fragments) > 1
    assert json.loads("".join(fragments)) == ARGUMENTS
    assert [c["finish_reason"] for chunk in events[:-1] for c in chunk["choices"] if c["finish_reason"]] == [
        "tool_calls"
    ]
    assert events[-2]["choices"] == [] and events[-2]["usage"]["total_tokens"] > 0


RESPONSES_URL = "/demo-model/v1/responses"
RESPONSES_QUESTION = {
    "model": "demo",
    "input": [{"role": "user", "content": BEIJING}],
    "tools": [
        {"type": "function", "name": "demo__get_weather_forecast", "parameters": PARAMETERS, "strict": False}
    ],
}


def post_responses(client: Client, body: Any, key: str | None = KEY) -> Any:
    headers = {"HTTP_AUTHORIZATION": f"Bearer {key}"} if key is not None else {}
    return client.post(RESPONSES_URL, data=json.dumps(body), content_type="application/json", **headers)


def test_responses_answers_with_a_function_call_item(client: Client) -> None:
    response = post_responses(client, RESPONSES_QUESTION)

    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "response" and body["status"] == "completed"
    [item] = body["output"]
    assert item["type"] == "function_call" and item["id"].startswith("fc_")
    assert item["call_id"].startswith("call_")
    assert json.loads(item["arguments"]) == ARGUMENTS


def test_responses_needs_the_bearer_key(client: Client) -> None:
    assert post_responses(client, RESPONSES_QUESTION, key=None).status_code == 401


def test_responses_reads_back_function_call_outputs_and_answers(client: Client) -> None:
    call = post_responses(client, RESPONSES_QUESTION).json()["output"][0]
    follow_up = {
        **RESPONSES_QUESTION,
        "input": [
            *RESPONSES_QUESTION["input"],  # type: ignore[misc]
            {key: call[key] for key in ("type", "call_id", "name", "arguments")},
            {"type": "function_call_output", "call_id": call["call_id"], "output": "Sunny, 24°C"},
        ],
    }

    body = post_responses(client, follow_up).json()

    [message] = body["output"]
    assert message["type"] == "message"
    assert "Sunny, 24°C" in message["content"][0]["text"]


def test_responses_streams_named_events_with_argument_deltas(client: Client) -> None:
    events = events_of(post_responses(client, {**RESPONSES_QUESTION, "stream": True}))

    names = [name for name, _ in events]
    assert names[0] == "response.created" and names[-1] == "response.completed"
    assert all(name == data["type"] for name, data in events)
    deltas = [data["delta"] for name, data in events if name == "response.function_call_arguments.delta"]
    assert len(deltas) > 1 and json.loads("".join(deltas)) == ARGUMENTS
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))


MESSAGES_URL = "/demo-model/v1/messages"
MESSAGES_QUESTION = {
    "model": "demo",
    "max_tokens": 1024,
    "messages": [{"role": "user", "content": BEIJING}],
    "tools": [{"name": "demo__get_weather_forecast", "input_schema": PARAMETERS}],
}


def post_messages(
    client: Client, body: Any, key: str | None = KEY, version: str | None = "2023-06-01"
) -> Any:
    headers = {}
    if key is not None:
        headers["HTTP_X_API_KEY"] = key
    if version is not None:
        headers["HTTP_ANTHROPIC_VERSION"] = version
    return client.post(MESSAGES_URL, data=json.dumps(body), content_type="application/json", **headers)


def test_messages_answers_with_a_tool_use_block(client: Client) -> None:
    response = post_messages(client, MESSAGES_QUESTION)

    assert response.status_code == 200
    body = response.json()
    assert body["type"] == "message" and body["stop_reason"] == "tool_use"
    [block] = body["content"]
    assert block["type"] == "tool_use" and block["id"].startswith("toolu_")
    assert block["input"] == ARGUMENTS


@pytest.mark.parametrize(
    ("key", "version", "status", "error_type"),
    [
        (None, "2023-06-01", 401, "authentication_error"),
        ("sk-ant-wrong", "2023-06-01", 401, "authentication_error"),
        (KEY, None, 400, "invalid_request_error"),
    ],
    ids=["no-key", "wrong-key", "no-version"],
)
def test_messages_checks_the_key_and_version_in_anthropics_envelope(
    client: Client, key: str | None, version: str | None, status: int, error_type: str
) -> None:
    response = post_messages(client, MESSAGES_QUESTION, key=key, version=version)

    assert response.status_code == status
    assert response.json()["type"] == "error"
    assert response.json()["error"]["type"] == error_type
    assert "sk-ant-wrong" not in response.content.decode()


@pytest.mark.parametrize(("bearer", "status"), [(KEY, 200), ("sk-ant-wrong", 401)], ids=["right", "wrong"])
def test_messages_takes_the_key_as_a_bearer_token_as_the_anthropic_sdk_sends_it_from_2_0(
    client: Client, bearer: str, status: int
) -> None:
    response = client.post(
        MESSAGES_URL,
        data=json.dumps(MESSAGES_QUESTION),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {bearer}",
        HTTP_ANTHROPIC_VERSION="2023-06-01",
    )

    assert response.status_code == status
    assert "sk-ant-wrong" not in response.content.decode()


def test_messages_refuses_tool_use_without_results_in_anthropics_words(client: Client) -> None:
    block = post_messages(client, MESSAGES_QUESTION).json()["content"][0]
    body = {
        **MESSAGES_QUESTION,
        "messages": [
            *MESSAGES_QUESTION["messages"],  # type: ignore[misc]
            {"role": "assistant", "content": [block]},
            {"role": "user", "content": "Well?"},
        ],
    }

    response = post_messages(client, body)

    assert response.status_code == 400
    assert response.json()["error"]["message"].startswith(
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_"
    )


def test_messages_without_max_tokens_is_refused(client: Client) -> None:
    body = {key: value for key, value in MESSAGES_QUESTION.items() if key != "max_tokens"}

    assert post_messages(client, body).json()["error"]["message"] == "max_tokens: Field required"


def test_messages_streams_input_json_deltas_between_block_start_and_stop(client: Client) -> None:
    events = events_of(post_messages(client, {**MESSAGES_QUESTION, "stream": True}))

    names = [name for name, _ in events]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    fragments = [data["delta"]["partial_json"] for name, data in events if name == "content_block_delta"]
    assert len(fragments) > 1 and json.loads("".join(fragments)) == ARGUMENTS
    assert (
        names.index("content_block_start")
        < names.index("content_block_delta")
        < names.index("content_block_stop")
    )


def test_a_demo_error_arrives_in_anthropics_envelope_with_the_same_status(client: Client) -> None:
    body = {
        **MESSAGES_QUESTION,
        "messages": [{"role": "user", "content": "[demo:no-native-tools] weather in Oslo"}],
    }

    response = post_messages(client, body)

    assert response.status_code == 400
    assert response.json() == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "registry.ollama.ai/library/demo does not support tools",
        },
    }


GENERATE_URL = "/demo-model/v1beta/models/demo:generateContent"
STREAM_URL = "/demo-model/v1beta/models/demo:streamGenerateContent?alt=sse"
GEMINI_QUESTION = {
    "contents": [{"role": "user", "parts": [{"text": BEIJING}]}],
    "tools": [{"functionDeclarations": [{"name": "demo__get_weather_forecast", "parameters": PARAMETERS}]}],
}


def post_gemini(client: Client, body: Any, url: str = GENERATE_URL, key: str | None = KEY) -> Any:
    headers = {"HTTP_X_GOOG_API_KEY": key} if key is not None else {}
    return client.post(url, data=json.dumps(body), content_type="application/json", **headers)


@pytest.mark.usefixtures("gemini_routes")
def test_generate_content_answers_with_a_function_call_part_without_an_id(client: Client) -> None:
    response = post_gemini(client, GEMINI_QUESTION)

    assert response.status_code == 200
    candidate = response.json()["candidates"][0]
    assert candidate["finishReason"] == "STOP"
    [part] = candidate["content"]["parts"]
    assert part["functionCall"] == {"name": "demo__get_weather_forecast", "args": ARGUMENTS}
    assert part["thoughtSignature"]


@pytest.mark.usefixtures("gemini_routes")
@pytest.mark.parametrize(("key", "status"), [(None, 403), ("AIza-wrong", 400)], ids=["no-key", "wrong-key"])
def test_generate_content_checks_the_key_in_geminis_envelope(
    client: Client, key: str | None, status: int
) -> None:
    response = post_gemini(client, GEMINI_QUESTION, key=key)

    assert response.status_code == status
    assert response.json()["error"]["code"] == status


@pytest.mark.usefixtures("gemini_routes")
def test_generate_content_reads_function_responses_and_answers(client: Client) -> None:
    call_part = post_gemini(client, GEMINI_QUESTION).json()["candidates"][0]["content"]["parts"][0]
    follow_up = {
        **GEMINI_QUESTION,
        "contents": [
            *GEMINI_QUESTION["contents"],  # type: ignore[misc]
            {"role": "model", "parts": [call_part]},
            {
                "role": "user",
                "parts": [
                    {
                        "functionResponse": {
                            "name": "demo__get_weather_forecast",
                            "response": {"output": "Sunny"},
                        }
                    }
                ],
            },
        ],
    }

    body = post_gemini(client, follow_up).json()

    assert "Sunny" in body["candidates"][0]["content"]["parts"][0]["text"]


@pytest.mark.usefixtures("gemini_routes")
def test_a_function_response_without_a_call_turn_is_refused_in_geminis_words(client: Client) -> None:
    body = {
        "contents": [
            {"role": "user", "parts": [{"functionResponse": {"name": "x", "response": {"output": "1"}}}]},
        ]
    }

    response = post_gemini(client, body)

    assert response.status_code == 400
    assert response.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert (
        "function response turn comes immediately after a function call turn"
        in response.json()["error"]["message"]
    )


@pytest.mark.usefixtures("gemini_routes")
def test_stream_generate_content_sends_whole_response_chunks_as_sse(client: Client) -> None:
    body = {
        **GEMINI_QUESTION,
        "contents": [{"role": "user", "parts": [{"text": "Hello there, how are you today?"}]}],
    }

    events = [data for _, data in events_of(post_gemini(client, body, url=STREAM_URL))]

    assert len(events) > 1
    text = "".join(part["text"] for chunk in events for part in chunk["candidates"][0]["content"]["parts"])
    assert text.startswith("[demo model]")
    assert [chunk["candidates"][0].get("finishReason") for chunk in events][-1] == "STOP"
    assert "usageMetadata" in events[-1]


@pytest.mark.usefixtures("gemini_routes")
def test_stream_generate_content_needs_alt_sse(client: Client) -> None:
    response = post_gemini(client, GEMINI_QUESTION, url=STREAM_URL.removesuffix("?alt=sse"))

    assert response.status_code == 400


@pytest.mark.usefixtures("gemini_routes")
@pytest.mark.parametrize("url", [GENERATE_URL, STREAM_URL])
def test_gemini_answers_under_v1_too_as_the_google_gen_ai_sdk_calls_it_from_3_0(
    client: Client, url: str
) -> None:
    response = post_gemini(client, GEMINI_QUESTION, url=url.replace("/v1beta/", "/v1/"))

    assert response.status_code == 200
