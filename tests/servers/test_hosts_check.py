"""``server check``'s findings on definitions no real test server has (docs/hosts.md §4): pure
functions, no database."""

from __future__ import annotations

from typing import Any

from conversations.loop.hosts import HOSTS, Change
from servers.hosts.check import EXIT_READY, EXIT_REFUSED, EXIT_WARNINGS, meaningful_losses, server_check

GOOD: dict[str, Any] = {
    "name": "lookup",
    "description": "Look a word up in the dictionary.",
    "inputSchema": {
        "type": "object",
        "properties": {"word": {"type": "string", "description": "The word."}},
        "required": ["word"],
    },
    "annotations": {"readOnlyHint": True, "openWorldHint": False},
}
ALL = list(HOSTS.values())


def levels(tools: list[Any], *areas: str) -> list[tuple[str, str, str]]:
    report = server_check("dict", tools, ALL)
    return [(f.level, f.area, f.tool) for f in report.findings if not areas or f.area in areas]


def test_a_clean_tool_is_ready_even_with_strict() -> None:
    report = server_check("dict", [GOOD], ALL)
    assert report.exit_code(strict=True) == EXIT_READY
    assert {f.level for f in report.findings} <= {"note"}


def test_two_tools_with_one_name_are_an_error() -> None:
    assert ("error", "names", "lookup") in levels([GOOD, GOOD], "names")
    assert server_check("dict", [GOOD, GOOD], ALL).exit_code(strict=False) == EXIT_REFUSED


def test_an_output_schema_that_is_not_valid_json_schema_is_an_error() -> None:
    broken = {**GOOD, "outputSchema": {"type": "object", "properties": {"n": {"type": "integr"}}}}
    scalar = {**GOOD, "name": "scalar", "outputSchema": {"type": "string"}}
    found = levels([broken, scalar], "outputSchema")

    assert found == [("error", "outputSchema", "lookup"), ("error", "outputSchema", "scalar")]


def test_annotations_missing_contradictory_or_not_booleans_are_warnings() -> None:
    bare = {key: value for key, value in GOOD.items() if key != "annotations"}
    odd = {**GOOD, "name": "odd", "annotations": {"readOnlyHint": "yes"}}
    both = {**GOOD, "name": "both", "annotations": {"readOnlyHint": True, "destructiveHint": True}}
    report = server_check("dict", [bare, odd, both], ALL)
    messages = {(f.tool, f.message.split(":")[0]) for f in report.findings if f.area == "annotations"}

    assert ("lookup", "no annotations") in messages
    assert ("odd", "readOnlyHint is 'yes', not a boolean") in messages
    assert any(tool == "both" and "both true" in message for tool, message in messages)
    assert report.exit_code(strict=False) == EXIT_READY
    assert report.exit_code(strict=True) == EXIT_WARNINGS


def test_missing_descriptions_and_names_outside_the_mcp_form_are_warnings() -> None:
    thin = {**GOOD, "name": "look up!", "description": ""}
    found = levels([thin], "description", "names")

    assert ("warning", "description", "look up!") in found
    assert ("warning", "names", "look up!") in found
    assert ("error", "portability", "look up!") in levels([thin], "portability")


def test_only_meaningful_losses_warn() -> None:
    changes = [
        Change("lost", "inputSchema/$schema", "x"),
        Change("lost", "inputSchema/properties/a/type", ["boolean", "string"]),
        Change("added", "inputSchema/properties/a/anyOf", None, []),
        Change("lost", "inputSchema/properties/b/default", 1),
        Change("changed", "inputSchema/properties/b/description", "B.", "B. (default: 1)"),
        Change("lost", "inputSchema/properties/c/minLength", 1),
    ]
    assert [change.path for change in meaningful_losses(changes)] == ["inputSchema/properties/c/minLength"]
