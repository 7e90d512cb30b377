"""The demo model fills third-party tools' arguments from their schemas: IANA time zones for
mcp-server-time (its real tools/list), clock times, and numbers inside minimum/maximum."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from conversations.demo.arguments import candidate_argument_sets, repaired_arguments
from conversations.demo.model import complete
from conversations.demo.request import Tool
from conversations.demo.understanding import read_facts
from servers import gateway
from servers.gateway.config import ServerConfig


@pytest.fixture(scope="module")
def time_tools() -> dict[str, Tool]:
    config = ServerConfig(
        server_id=987_001,
        name="time",
        transport="stdio",
        command=sys.executable,
        args=("-m", "mcp_server_time", "--local-timezone", "UTC"),
    )
    try:
        outcome = gateway.list_tools(config)
    finally:
        gateway.close_all()
    assert not outcome.error, outcome.error
    return {
        tool["name"]: Tool(tool["name"], tool.get("description", ""), tool["inputSchema"])
        for tool in outcome.tools
    }


def fill(tool: Tool, question: str) -> list[dict[str, Any]]:
    return candidate_argument_sets(tool, read_facts(question), None)


@pytest.mark.slow
def test_mcp_server_time_gets_iana_zones_and_a_clock_time(time_tools: dict[str, Tool]) -> None:
    current = time_tools["get_current_time"]
    convert = time_tools["convert_time"]

    assert fill(current, "What time is it in Tokyo?") == [{"timezone": "Asia/Tokyo"}]
    assert fill(current, "What time is it in New York and Paris?") == [
        {"timezone": "America/New_York"},
        {"timezone": "Europe/Paris"},
    ]
    assert fill(current, "What time is it?") == [{"timezone": "UTC"}]
    assert fill(convert, "Convert 12:00 from London to Tokyo") == [
        {"source_timezone": "Europe/London", "time": "12:00", "target_timezone": "Asia/Tokyo"}
    ]


def test_numbers_respect_minimum_and_maximum() -> None:
    thinking = Tool(
        "sequentialthinking",
        "Think step by step.",
        {
            "type": "object",
            "properties": {
                "thought": {"type": "string"},
                "thoughtNumber": {"type": "integer", "minimum": 1},
                "totalThoughts": {"type": "integer", "minimum": 1},
                "confidence": {"type": "number", "minimum": 0, "maximum": 1},
            },
            "required": ["thought", "thoughtNumber", "totalThoughts", "confidence"],
        },
    )

    [arguments] = fill(thinking, "Think about 500 reasons")

    assert arguments["thoughtNumber"] == 500 and arguments["totalThoughts"] == 1
    assert arguments["confidence"] == 0
    [clamped] = fill(thinking, "Think about 0 and 0 and 7 things")
    assert (clamped["thoughtNumber"], clamped["totalThoughts"], clamped["confidence"]) == (1, 1, 1)


TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "time__get_current_time",
        "description": "Get current time in a specific timezones",
        "parameters": {
            "type": "object",
            "properties": {"timezone": {"type": "string", "description": "IANA timezone name"}},
            "required": ["timezone"],
        },
    },
}


@pytest.mark.slow
def test_after_the_servers_validation_error_the_named_field_is_repaired_not_repeated() -> None:
    config = ServerConfig(
        server_id=987_002,
        name="time",
        transport="stdio",
        command=sys.executable,
        args=("-m", "mcp_server_time", "--local-timezone", "UTC"),
    )
    try:
        refused = gateway.call_tool(config, "get_current_time", {"timezone": "Tokyo"})
    finally:
        gateway.close_all()
    error = "\n".join(block.get("text", "") for block in (refused.result or {}).get("content", []))
    assert "Tokyo" in error  # the server names the value it rejected
    request: dict[str, Any] = {
        "model": "demo",
        "messages": [
            {"role": "user", "content": "What time is it in Tokyo?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "time__get_current_time", "arguments": '{"timezone": "Tokyo"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": f"Error: {error}"},
        ],
        "tools": [TIME_TOOL],
    }

    reply = complete(request)

    calls = reply.body["choices"][0]["message"]["tool_calls"]
    assert [json.loads(call["function"]["arguments"]) for call in calls] == [{"timezone": "Asia/Tokyo"}]


def test_a_number_the_schema_refused_is_moved_inside_its_bounds() -> None:
    thinking = Tool(
        "think",
        "Think.",
        {
            "type": "object",
            "properties": {"totalThoughts": {"type": "integer", "minimum": 1, "maximum": 9}},
            "required": ["totalThoughts"],
        },
    )

    repaired = repaired_arguments(
        thinking, {"totalThoughts": 0}, "Invalid arguments: totalThoughts: 0 is less than the minimum of 1"
    )

    assert repaired == {"totalThoughts": 1}
    assert repaired_arguments(thinking, {"totalThoughts": 3}, "Error: upstream timeout") is None
