"""The demo model fills third-party tools' arguments from their schemas: IANA time zones for
mcp-server-time (its real tools/list), clock times, numbers inside minimum/maximum, counts that
make sense, formats (email, date, date-time, uri, time), defaults, examples and enums, paths
for file tools, arrays and objects; and after an error it repairs the fields the error names."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from jsonschema import Draft202012Validator

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
        "think",
        "Think.",
        {
            "type": "object",
            "properties": {
                "thought": {"type": "string"},
                "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                "steps": {"type": "integer", "minimum": 2, "maximum": 9},
            },
            "required": ["thought", "confidence", "steps"],
        },
    )

    [arguments] = fill(thinking, "Think about 500 reasons in 0 steps")

    assert (arguments["confidence"], arguments["steps"]) == (1, 2)


SEQUENTIAL_THINKING = Tool(
    "sequentialthinking",
    "A detailed tool for dynamic and reflective problem-solving through thoughts.",
    {
        "type": "object",
        "properties": {
            "thought": {"type": "string", "description": "Your current thinking step"},
            "nextThoughtNeeded": {
                "description": "Whether another thought step is needed",
                "type": ["boolean", "string"],
            },
            "thoughtNumber": {
                "type": "integer",
                "minimum": 1,
                "description": "Current thought number (numeric value, e.g., 1, 2, 3)",
            },
            "totalThoughts": {
                "type": "integer",
                "minimum": 1,
                "description": "Estimated total thoughts needed (numeric value, e.g., 5, 10)",
            },
            "revisesThought": {
                "description": "Which thought is being reconsidered",
                "type": "integer",
                "minimum": 1,
            },
        },
        "required": ["thought", "nextThoughtNeeded", "thoughtNumber", "totalThoughts"],
    },
)


@pytest.mark.parametrize(
    ("question", "total"),
    [
        ("Think about 500 reasons to learn Rust", 5),  # no count of thoughts: its description's example
        ("Think it through in 3 thoughts: why is the sky blue?", 3),
        ("Think about 0 and 0 and 7 things in 1 thought", 1),
    ],
)
def test_a_sequential_thinking_call_starts_at_thought_one_of_a_sensible_total(
    question: str, total: int
) -> None:
    [arguments] = fill(SEQUENTIAL_THINKING, question)

    assert arguments["thoughtNumber"] == 1
    assert arguments["totalThoughts"] == total
    assert arguments["nextThoughtNeeded"] is (total > 1)
    assert isinstance(arguments["thought"], str) and arguments["thought"]
    assert "revisesThought" not in arguments


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


def tool(name: str, properties: dict[str, Any], required: list[str], description: str = "") -> Tool:
    return Tool(name, description, {"type": "object", "properties": properties, "required": required})


def test_formats_give_real_values_from_the_question() -> None:
    invite = tool(
        "send_invite",
        {
            "attendee": {"type": "string", "format": "email"},
            "start": {"type": "string", "format": "date-time"},
            "day": {"type": "string", "format": "date"},
            "agenda": {"type": "string", "format": "uri"},
            "at": {"type": "string", "format": "time"},
        },
        ["attendee", "start", "day", "agenda", "at"],
    )

    [arguments] = fill(
        invite, "Invite bob.smith@example.org on 2026-03-14 at 15:30, agenda https://example.org/a?b=1."
    )

    assert arguments == {
        "attendee": "bob.smith@example.org",
        "start": "2026-03-14T15:30:00Z",
        "day": "2026-03-14",
        "agenda": "https://example.org/a?b=1",
        "at": "15:30:00",
    }
    datetime.fromisoformat(str(arguments["start"]))


def test_a_format_the_question_does_not_give_is_still_a_real_value_of_that_format() -> None:
    invite = tool(
        "send_invite",
        {
            "attendee": {"type": "string", "format": "email"},
            "start": {"type": "string", "format": "date-time"},
            "day": {"type": "string", "format": "date"},
            "when": {"type": "string", "format": "date-time"},
        },
        ["attendee", "start", "day", "when"],
    )

    [arguments] = fill(invite, "Send an invite for 2026-02-30 tomorrow")

    assert "@" in str(arguments["attendee"])
    tomorrow = (datetime.now(UTC).date() + timedelta(days=1)).isoformat()
    assert arguments["day"] == tomorrow  # 2026-02-30 is no date; tomorrow is
    assert arguments["start"] == f"{tomorrow}T00:00:00Z"
    for value in (arguments["start"], arguments["when"]):
        datetime.fromisoformat(str(value))
    assert jsonschema_errors(invite, arguments) == []


def test_the_schemas_default_examples_and_enum_fill_what_the_question_does_not_say() -> None:
    settings = tool(
        "configure",
        {
            "region": {"type": "string", "enum": ["eu-west-1", "us-east-1"], "description": "where it runs"},
            "retries": {"type": "integer", "default": 3},
            "tier": {"type": "string", "examples": ["gold", "silver"], "description": "the service tier"},
            "zone": {"type": "string", "description": "IANA zone (e.g., 'Europe/Paris')"},
            "limit": {"type": "integer", "description": "how many (e.g., 25, 50)", "maximum": 20},
        },
        ["region", "retries", "tier", "zone", "limit"],
    )

    [arguments] = fill(settings, "Configure the service")

    assert arguments == {"region": "eu-west-1", "retries": 3, "tier": "gold", "zone": "UTC", "limit": 20}
    [us] = fill(settings, "Configure the service in us-east-1 for Paris")
    assert us["region"] == "us-east-1" and us["zone"] == "Europe/Paris"


FILESYSTEM_READ = tool(
    "read_text_file",
    {
        "path": {"type": "string"},
        "head": {"type": "number", "description": "If provided, returns only the first N lines of the file"},
    },
    ["path"],
)


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("Read the file /tmp/notes.txt", {"path": "/tmp/notes.txt"}),
        ("Read the file /tmp/notes.txt, only the first 3 lines", {"path": "/tmp/notes.txt", "head": 3}),
        ("What is in ~/projects/todo.md?", {"path": "~/projects/todo.md"}),
        ("Read notes.txt please", {"path": "notes.txt"}),
    ],
)
def test_a_file_tool_gets_the_path_not_the_whole_question(question: str, expected: dict[str, Any]) -> None:
    assert fill(FILESYSTEM_READ, question) == [expected]


def test_a_move_gets_its_source_and_destination_paths_and_a_list_of_paths_gets_them_all() -> None:
    move = tool(
        "move_file",
        {"source": {"type": "string"}, "destination": {"type": "string"}},
        ["source", "destination"],
    )
    many = tool(
        "read_multiple_files",
        {
            "paths": {
                "type": "array",
                "items": {"type": "string"},
                "minItems": 1,
                "description": "Array of file paths to read.",
            }
        },
        ["paths"],
    )

    assert fill(move, "Move /tmp/a.txt to /tmp/b/a.txt") == [
        {"source": "/tmp/a.txt", "destination": "/tmp/b/a.txt"}
    ]
    assert fill(many, "Read /tmp/a.txt and /tmp/b.txt") == [{"paths": ["/tmp/a.txt", "/tmp/b.txt"]}]


def test_arrays_of_objects_are_filled_item_by_item_from_the_question() -> None:
    create = tool(
        "create_entities",
        {
            "entities": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string", "description": "The name of the entity"},
                        "entityType": {"type": "string", "description": "The type of the entity"},
                        "observations": {"type": "array", "items": {"type": "string"}},
                    },
                    "required": ["name", "entityType", "observations"],
                },
            }
        },
        ["entities"],
        "Create multiple new entities in the knowledge graph",
    )
    search = tool("search_nodes", {"query": {"type": "string", "description": "The search query"}}, ["query"])

    [created] = fill(create, "Remember that Ada Lovelace wrote the first program")

    assert created == {
        "entities": [
            {
                "name": "Ada Lovelace",
                "entityType": "entity",
                "observations": ["Remember that Ada Lovelace wrote the first program"],
            }
        ]
    }
    assert jsonschema_errors(create, created) == []
    assert fill(search, "Search the knowledge graph for Ada Lovelace") == [{"query": "Ada Lovelace"}]


def test_a_rejected_enum_value_becomes_another_option_and_a_rejected_zone_utc() -> None:
    book = tool("book_room", {"room": {"type": "string", "enum": ["Blue", "Green"]}}, ["room"])
    now = tool("get_current_time", {"timezone": {"type": "string"}}, ["timezone"])

    assert repaired_arguments(book, {"room": "Blue"}, "room Blue is fully booked") == {"room": "Green"}
    assert repaired_arguments(
        now,
        {"timezone": "Atlantis/Lost_City"},
        "Invalid timezone: 'No time zone found with key Atlantis/Lost_City'",
    ) == {"timezone": "UTC"}


def test_a_field_named_only_as_missing_keeps_the_value_that_was_sent() -> None:
    now = tool(
        "get_current_time",
        {"timezone": {"type": "string"}, "format": {"type": "string"}},
        ["timezone", "format"],
    )

    repaired = repaired_arguments(
        now,
        {"timezone": "Asia/Tokyo"},
        "'format' is a required property",
        read_facts("Time in Tokyo, ISO format"),
    )

    assert repaired is not None and repaired["timezone"] == "Asia/Tokyo" and "format" in repaired


def jsonschema_errors(definition: Tool, arguments: dict[str, Any]) -> list[str]:
    validator = Draft202012Validator(
        definition.parameters, format_checker=Draft202012Validator.FORMAT_CHECKER
    )
    return [error.message for error in validator.iter_errors(arguments)]
