"""The gateway against real stdio MCP servers: the demo server, mcp-server-time, a broken one."""

from __future__ import annotations

import itertools
import json
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conversations.loop.wire import WireExchange
from servers import demo_server, gateway
from servers.gateway import CallOutcome, ServerConfig
from tests.fixtures import broken_server

REPO_ROOT = Path(__file__).resolve().parents[2]
DEMO_TOOLS = {"get_weather_forecast", "calculate", "convert_units", "write_note", "list_notes", "read_note"}
CALL_TIMEOUT = 10.0

_server_ids = itertools.count(9000)


@pytest.fixture(autouse=True)
def close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


def stdio_config(name: str, *args: str, **overrides: Any) -> ServerConfig:
    """A stdio server run by this interpreter from the repository root, with an id of its own."""
    overrides.setdefault("call_timeout", CALL_TIMEOUT)
    return ServerConfig(
        server_id=next(_server_ids),
        name=name,
        transport="stdio",
        command=sys.executable,
        args=args,
        cwd=str(REPO_ROOT),
        **overrides,
    )


def demo_config() -> ServerConfig:
    return stdio_config("demo", "-m", "servers.demo_server")


def broken_config(*extra_args: str, **overrides: Any) -> ServerConfig:
    return stdio_config("broken", "-m", "tests.fixtures.broken_server", *extra_args, **overrides)


def time_config(**overrides: Any) -> ServerConfig:
    return stdio_config("time", "-m", "mcp_server_time", "--local-timezone", "UTC", **overrides)


def text_of(outcome: CallOutcome) -> str:
    assert outcome.result is not None, outcome.error
    return "\n".join(block["text"] for block in outcome.result["content"] if block.get("type") == "text")


def labels(records: list[WireExchange]) -> list[str]:
    return [record.label for record in records]


def only(records: list[WireExchange], label: str) -> WireExchange:
    [record] = [record for record in records if record.label == label]
    return record


# --- the demo server -----------------------------------------------------------------------


def test_list_tools_returns_the_demo_tools_with_the_handshake_recorded_in_order() -> None:
    config = demo_config()

    outcome = gateway.list_tools(config)

    assert outcome.error == ""
    assert {tool["name"] for tool in outcome.tools} == DEMO_TOOLS
    assert labels(outcome.records) == ["initialize", "notifications/initialized", "tools/list"]
    initialize, initialized, tools_list = outcome.records
    for record, msg_id in ((initialize, "1"), (tools_list, "2")):
        assert record.jsonrpc_id == msg_id
        assert record.direction == "client"
        assert record.status == "ok"
        assert json.loads(record.request_body)["id"] == json.loads(record.response_body)["id"] == int(msg_id)
        assert record.duration_ms is not None and record.duration_ms > 0
    assert json.loads(initialized.request_body) == {"jsonrpc": "2.0", "method": "notifications/initialized"}
    listed = json.loads(tools_list.response_body)["result"]["tools"]
    assert {tool["name"] for tool in listed} == DEMO_TOOLS
    assert all(record.server_id == config.server_id for record in outcome.records)
    assert outcome.session is not None
    assert outcome.session.spawned is True
    assert outcome.session.server_name == "inspector-demo"
    assert (
        outcome.session.protocol_version == json.loads(initialize.response_body)["result"]["protocolVersion"]
    )


def test_call_tool_returns_the_structured_weather_forecast() -> None:
    outcome = gateway.call_tool(demo_config(), "get_weather_forecast", {"city": "Paris", "day": "tomorrow"})

    assert outcome.error == ""
    assert outcome.timed_out is False
    assert outcome.result is not None
    assert outcome.result["isError"] is False
    assert (
        outcome.result["structuredContent"]
        == demo_server.get_weather_forecast("Paris", "tomorrow").model_dump()
    )
    call = only(outcome.records, "tools/call")
    assert json.loads(call.request_body)["params"]["arguments"] == {"city": "Paris", "day": "tomorrow"}
    assert json.loads(call.response_body)["result"]["structuredContent"]["city"] == "Paris"


def test_a_session_opened_after_a_settings_change_records_with_the_new_body_limit(settings: Any) -> None:
    # The process's pool is made once; a session it opens later must follow the settings then,
    # not those of the first session (a cut at an old, smaller limit would lose the body).
    config = broken_config()
    settings.EXCHANGE_BODY_LIMIT = 1000
    small = gateway.call_tool(config, "echo", {"text": "x" * 5000})
    gateway.close_all()
    settings.EXCHANGE_BODY_LIMIT = 100_000

    whole = gateway.call_tool(config, "echo", {"text": "x" * 5000})

    assert "[cut: " in only(small.records, "tools/call").response_body
    assert text_of(whole) == "x" * 5000
    assert "[cut: " not in only(whole.records, "tools/call").response_body


def test_the_session_is_reused_and_keeps_server_state_between_calls() -> None:
    config = demo_config()

    listed = gateway.list_tools(config)
    written = gateway.call_tool(config, "write_note", {"title": "Shopping", "text": "milk, eggs"})
    read = gateway.call_tool(config, "read_note", {"title": "shopping"})

    assert listed.session is not None and listed.session.spawned is True
    assert written.session is not None and written.session.spawned is False
    assert read.session is not None and read.session.spawned is False
    assert read.session.generation == listed.session.generation == 1
    assert gateway.spawn_count(config.server_id) == 1
    assert text_of(read) == "milk, eggs"
    assert "initialize" not in labels(read.records)


def test_a_tool_error_is_an_is_error_result_not_a_gateway_error() -> None:
    outcome = gateway.call_tool(demo_config(), "calculate", {"expression": "1 / 0"})

    assert outcome.error == ""
    assert outcome.result is not None
    assert outcome.result["isError"] is True
    assert "Division by zero" in text_of(outcome)
    assert only(outcome.records, "tools/call").status == "ok"


# --- mcp-server-time -----------------------------------------------------------------------


@pytest.mark.slow
def test_the_time_server_lists_its_tools_and_tells_the_time_in_utc() -> None:
    config = time_config()

    listed = gateway.list_tools(config)
    called = gateway.call_tool(config, "get_current_time", {"timezone": "UTC"})

    assert listed.error == ""
    assert {tool["name"] for tool in listed.tools} == {"get_current_time", "convert_time"}
    assert called.error == ""
    assert called.result is not None
    assert called.result["isError"] is False
    assert called.result["structuredContent"]["timezone"] == "UTC"
    assert called.result["structuredContent"]["datetime"].endswith("+00:00")


@pytest.mark.slow
def test_the_time_server_speaks_the_2026_era_when_the_client_probes() -> None:
    outcome = gateway.list_tools(time_config(era="auto"))

    assert outcome.error == ""
    assert outcome.session is not None
    assert outcome.session.protocol_version == "2026-07-28"
    assert labels(outcome.records)[0] == "server/discover"
    assert "initialize" not in labels(outcome.records)
    assert only(outcome.records, "server/discover").status == "ok"
    assert {tool["name"] for tool in outcome.tools} == {"get_current_time", "convert_time"}


# --- failure paths -------------------------------------------------------------------------


def test_a_server_that_dies_mid_call_is_reported_and_respawned_on_the_next_call() -> None:
    config = broken_config()

    crashed = gateway.call_tool(config, "crash", {})
    after = gateway.call_tool(config, "echo", {"text": "still here"})

    assert crashed.result is None
    assert "closed the connection" in crashed.error
    assert "Connection closed" in crashed.error
    assert only(crashed.records, "tools/call").status == "no response"
    assert broken_server.CRASH_STDERR_LINE in only(crashed.records, "stderr").response_body
    assert after.error == ""
    assert text_of(after) == "still here"
    assert after.session is not None
    assert after.session.spawned is True
    assert after.session.generation == 2
    assert "the previous session died" in after.session.respawn_reason
    assert gateway.spawn_count(config.server_id) == 2
    assert labels(after.records)[:2] == ["initialize", "notifications/initialized"]


def test_a_call_that_outlives_its_timeout_is_cancelled_and_the_next_call_gets_a_fresh_session() -> None:
    config = broken_config(call_timeout=1.0)

    hung = gateway.call_tool(config, "hang", {})
    after = gateway.call_tool(config, "echo", {"text": "awake"})

    assert hung.timed_out is True
    assert "timed out" in hung.error
    assert hung.result is None
    assert only(hung.records, "tools/call").status == "no response"
    cancelled = only(hung.records, "notifications/cancelled")
    assert json.loads(cancelled.request_body)["params"]["requestId"] == int(
        only(hung.records, "tools/call").jsonrpc_id
    )
    assert after.error == ""
    assert text_of(after) == "awake"
    # A session whose request timed out is retired (a server may be hung: docs/mcp-client.md §9b).
    assert after.session is not None and after.session.spawned is True
    assert gateway.spawn_count(config.server_id) == 2


def test_a_failing_tool_comes_back_as_an_is_error_result() -> None:
    outcome = gateway.call_tool(broken_config(), "fail", {})

    assert outcome.error == ""
    assert outcome.result is not None
    assert outcome.result["isError"] is True
    assert broken_server.FAILURE_TEXT in text_of(outcome)


def test_a_command_that_does_not_exist_is_an_error_outcome_not_an_exception() -> None:
    config = ServerConfig(
        server_id=next(_server_ids),
        name="ghost",
        transport="stdio",
        command=f"/nonexistent/mcp-server-{uuid.uuid4().hex}",
        call_timeout=CALL_TIMEOUT,
    )

    outcome = gateway.call_tool(config, "anything", {})

    assert outcome.error.startswith("could not connect to ghost")
    assert outcome.result is None
    assert outcome.session is None


def test_garbage_on_stdout_is_recorded_as_a_transport_error_and_the_session_keeps_working() -> None:
    config = broken_config()

    noisy = gateway.call_tool(config, "noisy", {})
    after = gateway.call_tool(config, "echo", {"text": "clean"})

    assert noisy.error == ""
    assert text_of(noisy) == "made some noise"
    assert after.error == ""
    assert text_of(after) == "clean"
    assert after.session is not None and after.session.spawned is False
    seen = [*noisy.records, *noisy.unclaimed, *after.records, *after.unclaimed]
    [garbage] = [record for record in seen if record.label == "transport error"]
    assert garbage.status == "error"
    assert broken_server.NOISE_LINE in garbage.response_body


def test_an_env_reference_reaches_the_server_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TCI_TEST_FIXTURE_TOKEN", "s3cret")
    config = broken_config(env=(("FIXTURE_TOKEN", "Bearer ${TCI_TEST_FIXTURE_TOKEN}"),))

    outcome = gateway.call_tool(config, "env_value", {"name": "FIXTURE_TOKEN"})

    assert outcome.error == ""
    assert text_of(outcome) == "Bearer s3cret"


def test_a_missing_env_reference_fails_the_connect_promptly_with_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TCI_TEST_UNSET_VARIABLE", raising=False)
    config = broken_config(env=(("FIXTURE_TOKEN", "${TCI_TEST_UNSET_VARIABLE}"),))

    started = time.monotonic()
    outcome = gateway.call_tool(config, "env_value", {"name": "FIXTURE_TOKEN"})
    elapsed = time.monotonic() - started

    assert "TCI_TEST_UNSET_VARIABLE" in outcome.error
    assert "not set" in outcome.error
    assert outcome.result is None
    assert elapsed < 5, f"took {elapsed:.1f} s: the error should not wait for the connect timeout"


def test_a_slow_starting_server_connects_even_when_its_call_timeout_is_short() -> None:
    # Startup (e.g. ``npx``/``uvx`` fetching a package) is bounded by the connect timeout;
    # ``call_timeout`` bounds tool calls. Here the handshake takes longer than a call may.
    config = broken_config("--startup-delay", "2.5", call_timeout=1.0)

    outcome = gateway.call_tool(config, "echo", {"text": "eventually"})

    assert outcome.error == ""
    assert text_of(outcome) == "eventually"
