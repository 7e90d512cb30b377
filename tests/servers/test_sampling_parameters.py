"""Sampling forwards what the server asked for: maxTokens, temperature and stopSequences reach
the model call where the provider's request can carry them; modelPreferences, includeContext and
metadata are shown as not honoured; the operation page lists each with what became of it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from conversations.loop.llm import Message
from conversations.loop.providers import ModelRequest, anthropic, gemini, openai_chat, openai_responses
from conversations.services import demo_profile_ensure
from servers import selectors
from servers.models import McpServer, Operation
from servers.sampling import sampling_answer, sampling_parameters
from tests.servers.test_third_party import everything as everything  # noqa: F401 — the fixture
from tests.servers.test_third_party import exchange

PARAMS: dict[str, Any] = {
    "messages": [{"role": "user", "content": {"type": "text", "text": "name a colour"}}],
    "systemPrompt": "Be brief.",
    "maxTokens": 40,
    "temperature": 0.2,
    "stopSequences": ["\n\n"],
    "modelPreferences": {"hints": [{"name": "claude-3"}], "intelligencePriority": 0.9},
    "includeContext": "thisServer",
    "metadata": {"trace": "x"},
}


@pytest.mark.django_db
def test_every_parameter_is_forwarded_or_marked_not_honoured_on_the_demo_models_wire() -> None:
    answer = sampling_answer(profile=demo_profile_ensure(), params=PARAMS)

    assert answer.result is not None and answer.exchange is not None
    body = json.loads(answer.exchange.request_body)
    assert (body["max_tokens"], body["temperature"], body["stop"]) == (40, 0.2, ["\n\n"])
    shown = {item["name"]: item for item in answer.parameters}
    assert list(shown) == [
        "maxTokens",
        "temperature",
        "stopSequences",
        "modelPreferences",
        "includeContext",
        "metadata",
    ]
    assert shown["maxTokens"] == {
        "name": "maxTokens",
        "value": 40,
        "honoured": True,
        "note": "sent as max_tokens",
    }
    assert shown["stopSequences"]["note"] == "sent as stop"
    assert not shown["modelPreferences"]["honoured"] and "profile" in shown["modelPreferences"]["note"]
    assert not shown["includeContext"]["honoured"] and not shown["metadata"]["honoured"]


def test_each_provider_carries_the_sampling_options_in_its_own_fields() -> None:
    request = ModelRequest(
        messages=[Message(role="user", content="hi")], max_tokens=40, temperature=0.2, stop=["END"]
    )

    chat = openai_chat.request_body("m", request)
    responses = openai_responses.request_body("m", request)
    claude = anthropic.request_body("m", request)
    google = gemini.request_body(request)

    assert (chat["max_tokens"], chat["temperature"], chat["stop"]) == (40, 0.2, ["END"])
    assert (responses["max_output_tokens"], responses["temperature"]) == (40, 0.2) and "stop" not in responses
    assert (claude["max_tokens"], claude["temperature"], claude["stop_sequences"]) == (40, 0.2, ["END"])
    assert google["generationConfig"] == {"maxOutputTokens": 40, "temperature": 0.2, "stopSequences": ["END"]}
    on_responses = {p["name"]: p for p in sampling_parameters(PARAMS, "openai_responses")}
    assert not on_responses["stopSequences"]["honoured"]
    assert on_responses["maxTokens"]["note"] == "sent as max_output_tokens"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_server_everythings_sampling_request_reaches_the_model_with_its_max_tokens_and_temperature(
    client: Client,
    workbench: None,
    bob: User,
    everything: McpServer,  # noqa: F811
) -> None:
    client.force_login(bob)
    client.post(f"/servers/{everything.name}/list/tools")
    response = client.post(
        f"/servers/{everything.name}/tools/trigger-sampling-request",
        {"arguments": json.dumps({"prompt": "name a colour", "maxTokens": 50})},
    )
    page = client.get(response["Location"]).content.decode()

    operation = Operation.objects.get(kind="tools/call")
    assert operation.status == "ok", operation.error
    model_call = next(e for e in selectors.operation_exchanges(operation=operation) if e.channel == "llm")
    sent = json.loads(model_call.request_body)
    assert (sent["max_tokens"], sent["temperature"]) == (50, 0.7)
    assert json.loads(exchange(operation, "sampling/createMessage").request_body)["params"]["maxTokens"] == 50
    assert operation.sampling[0]["exchange"] == model_call.seq
    # Written as they were sent (docs/mcp-client.md §9): the call and the server's request are on
    # the wire, pending, before the model call that answers it.
    order = [(e.channel, e.label) for e in selectors.operation_exchanges(operation=operation)]
    assert (
        order.index(("mcp", "tools/call"))
        < order.index(("mcp", "sampling/createMessage"))
        < order.index(("llm", model_call.label))
    )
    assert "Sampling parameters" in page and "sent as max_tokens" in page
