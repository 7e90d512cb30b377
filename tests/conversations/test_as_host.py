"""A conversation run "as host H" (docs/hosts.md §5): a real turn on the demo model served by the
app and the bundled stdio server, through a profile whose ``host_preset`` is set. The record
shows the rewritten definitions and the preset's mark, the request carries them, and the call the
model makes by the host's name is run as the server's own tool."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User

from conversations.models import Exchange, ModelProfile, Step, Turn
from conversations.runner import turn_run
from conversations.services import conversation_start
from servers import gateway
from servers.services import demo_server_ensure

WEATHER = "What will the weather be like in Beijing tomorrow?"
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


def profile_as(host: str, provider: str = "openai_chat") -> ModelProfile:
    return ModelProfile.objects.create(
        name=f"demo as {host} ({provider})",
        provider=provider,
        model="demo",
        api_key_env="DEMO_MODEL_API_KEY",
        is_demo=True,
        native_tools="yes",
        structured_output="yes",
        parallel_calls="yes",
        host_preset=host,
    )


def run(profile: ModelProfile) -> Turn:
    owner = User.objects.create_user(f"alice-{profile.pk}")
    _, turn = conversation_start(
        owner=owner, model_profile=profile, question=WEATHER, servers=[demo_server_ensure()], dispatch=False
    )
    turn_run(turn_id=turn.pk)
    turn.refresh_from_db()
    return turn


def model_requests(turn: Turn) -> list[dict]:
    bodies = (
        Exchange.objects.filter(step__turn=turn, channel="llm")
        .order_by("pk")
        .values_list("request_body", flat=True)
    )
    return [json.loads(body) for body in bodies]


def test_as_claude_the_model_sees_mcp_prefixed_names_and_the_call_maps_back() -> None:
    turn = run(profile_as("claude"))

    assert turn.status == Turn.Status.DONE, turn.error
    weather = next(tool for tool in turn.tools if tool["name"] == "get_weather_forecast")
    assert weather["provider_name"] == "mcp__demo__get_weather_forecast"
    assert weather["host"]["preset"] == "claude" and weather["host"]["verdict"] == "changed"
    assert {
        "kind": "changed",
        "path": "name",
        "before": "get_weather_forecast",
        "after": "mcp__demo__get_weather_forecast",
    } in weather["host"]["changes"]
    connect = Step.objects.get(turn=turn, kind="connect")
    assert (
        "as host claude (Claude Desktop / Claude Code): its naming and schema rules applied" in connect.text
    )
    sent = [tool["function"]["name"] for tool in model_requests(turn)[0]["tools"]]
    assert "mcp__demo__get_weather_forecast" in sent
    assert not any(name.startswith("demo__") for name in sent)
    decide = Step.objects.filter(turn=turn, kind="decide").order_by("seq").first()
    assert decide is not None
    call = decide.calls[0]
    assert call["name"] == "mcp__demo__get_weather_forecast" and call["tool"] == "get_weather_forecast"
    tool_step = Step.objects.get(turn=turn, kind="tool")
    assert tool_step.tool_name == "get_weather_forecast" and tool_step.status == "ok"
    mcp_call = tool_step.exchanges.get(label="tools/call")
    assert json.loads(mcp_call.request_body)["params"]["name"] == "get_weather_forecast"


def test_as_openai_strict_the_request_carries_strict_closed_schemas() -> None:
    turn = run(profile_as("openai-strict"))

    assert turn.status == Turn.Status.DONE, turn.error
    tools = model_requests(turn)[0]["tools"]
    weather = next(tool["function"] for tool in tools if tool["function"]["name"] == "get_weather_forecast")
    assert weather["strict"] is True
    assert weather["parameters"]["additionalProperties"] is False
    assert sorted(weather["parameters"]["required"]) == sorted(weather["parameters"]["properties"])
    recorded = next(tool for tool in turn.tools if tool["name"] == "get_weather_forecast")
    assert recorded["strict"] is True and recorded["inputSchema"] == weather["parameters"]


def test_without_a_preset_nothing_changes() -> None:
    turn = run(profile_as(""))

    assert turn.status == Turn.Status.DONE, turn.error
    assert all("host" not in tool and "strict" not in tool for tool in turn.tools)
    weather = next(
        tool["function"] for tool in model_requests(turn)[0]["tools"] if "weather" in tool["function"]["name"]
    )
    assert "strict" not in weather and weather["name"] == "demo__get_weather_forecast"
