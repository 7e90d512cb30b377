"""The demo model fills third-party tools' arguments from their schemas: IANA time zones for
mcp-server-time (its real tools/list), clock times, and numbers inside minimum/maximum."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from conversations.demo.arguments import candidate_argument_sets
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
