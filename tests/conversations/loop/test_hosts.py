"""Host presets, rule by rule (docs/hosts.md §2): each test names the public rule it holds.

Pure functions over definitions as a server lists them; no database, no server.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from conversations.loop.hosts import HOSTS, diff, host_name, present_catalog, present_tool, tools_as_host
from conversations.loop.hosts.presets import Rule
from conversations.loop.llm import ToolDef

WEATHER: dict[str, Any] = {
    "name": "get_weather",
    "description": "The forecast for a city on a day.",
    "inputSchema": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "minLength": 1, "description": "City name."},
            "days": {"type": "integer", "minimum": 1, "default": 1, "description": "How many days."},
        },
        "required": ["city"],
    },
}


def changes(tool: Any) -> set[tuple[str, str]]:
    return {(change.kind, change.path) for change in tool.changes}


def test_every_preset_names_a_public_source_and_how_sure_it_is() -> None:
    for preset in HOSTS.values():
        for rule in preset.rules():
            assert isinstance(rule, Rule)
            assert rule.source.startswith("https://"), (preset.key, rule.text)
            assert rule.status in ("documented", "observed", "assumed"), (preset.key, rule.text)


def test_openai_non_strict_sends_the_schema_unchanged_so_the_verdict_is_ok() -> None:
    # platform.openai.com function calling: without strict the parameters go as written.
    shown = present_tool(HOSTS["openai"], "demo", WEATHER)

    assert shown.verdict == "ok" and shown.changes == []
    assert shown.wire == {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": WEATHER["description"],
            "parameters": WEATHER["inputSchema"],
        },
    }


def test_openai_names_longer_than_64_or_with_dots_are_refused() -> None:
    # Chat Completions reference: a-z, A-Z, 0-9, underscores and dashes, at most 64.
    dotted = present_tool(HOSTS["openai"], "s", {**WEATHER, "name": "weather.get"})
    long = present_tool(HOSTS["openai"], "s", {**WEATHER, "name": "w" * 65})

    assert dotted.verdict == "refused" and "'.'" in dotted.refusals[0].problem
    assert long.verdict == "refused" and "65 characters" in long.refusals[0].problem
    assert dotted.refusals[0].rule.status == "documented"


def test_openai_refuses_a_root_that_is_not_an_object_and_arrays_without_items() -> None:
    # Observed API errors: "schema must be a JSON Schema of 'type: \"object\"'" and
    # "array schema missing items".
    scalar = present_tool(HOSTS["openai"], "s", {**WEATHER, "inputSchema": {"type": "string"}})
    bare_array = present_tool(
        HOSTS["openai"],
        "s",
        {**WEATHER, "inputSchema": {"type": "object", "properties": {"ids": {"type": "array"}}}},
    )

    assert [r.rule.status for r in scalar.refusals] == ["observed"]
    assert "'string'" in scalar.refusals[0].problem
    assert bare_array.verdict == "refused" and "/properties/ids" in bare_array.refusals[0].problem


def test_openai_refuses_a_description_over_1024_characters() -> None:
    # Observed: string_above_max_length on tools[].function.description.
    shown = present_tool(HOSTS["openai"], "s", {**WEATHER, "description": "x" * 1025})
    fits = present_tool(HOSTS["openai"], "s", {**WEATHER, "description": "x" * 1024})

    assert shown.verdict == "refused" and "1025 characters" in shown.refusals[0].problem
    assert fits.verdict == "ok"


def test_openai_strict_lists_every_property_as_required_and_closes_every_object() -> None:
    # Structured outputs, supported schemas: all fields required, additionalProperties false,
    # optional ones as a union with null; minLength is outside the subset.
    shown = present_tool(HOSTS["openai-strict"], "demo", WEATHER)

    assert shown.verdict == "changed"
    schema = shown.input_schema
    assert schema["required"] == ["city", "days"]
    assert schema["additionalProperties"] is False
    assert schema["properties"]["days"]["type"] == ["integer", "null"]
    found = changes(shown)
    assert ("added", "inputSchema/additionalProperties") in found
    assert ("added", "inputSchema/required") in found
    assert ("lost", "inputSchema/properties/city/minLength") in found
    assert ("lost", "inputSchema/properties/days/default") in found
    assert ("changed", "inputSchema/properties/days/description") in found
    assert shown.wire["function"]["strict"] is True


def test_openai_strict_refuses_what_strict_mode_cannot_describe_rather_than_encoding_it() -> None:
    free_form = {"type": "object", "properties": {"tags": {"type": "object"}}}
    shown = present_tool(HOSTS["openai-strict"], "s", {**WEATHER, "inputSchema": free_form})

    assert shown.verdict == "refused"
    assert "free-form object" in shown.refusals[0].problem
    assert shown.input_schema == free_form  # shown as the server wrote it, not as a JSON string


def test_openai_strict_refuses_more_than_ten_levels_of_nesting() -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {"leaf": {"type": "string"}},
        "required": ["leaf"],
    }
    for _ in range(11):
        schema = {"type": "object", "properties": {"inner": schema}, "required": ["inner"]}
    shown = present_tool(HOSTS["openai-strict"], "s", {**WEATHER, "inputSchema": schema})

    assert shown.verdict == "refused"
    assert "levels of nesting" in shown.refusals[0].problem


def test_the_responses_api_is_strict_by_default_and_flat() -> None:
    # Responses reference: a function without strict is made strict.
    shown = present_tool(HOSTS["openai-responses"], "demo", WEATHER)

    assert shown.wire["type"] == "function" and shown.wire["name"] == "get_weather"
    assert shown.wire["strict"] is True
    assert shown.wire["parameters"]["additionalProperties"] is False


def test_anthropic_sends_input_schema_as_written_and_refuses_dots() -> None:
    # Anthropic tool use: name ^[a-zA-Z0-9_-]{1,64}$, input_schema a JSON Schema object.
    shown = present_tool(HOSTS["anthropic"], "demo", WEATHER)
    dotted = present_tool(HOSTS["anthropic"], "demo", {**WEATHER, "name": "get.weather"})

    assert shown.verdict == "ok"
    assert shown.wire == {
        "name": "get_weather",
        "description": WEATHER["description"],
        "input_schema": WEATHER["inputSchema"],
    }
    assert dotted.verdict == "refused"
    # A pattern's $ would let a trailing newline through; the whole name must match.
    assert present_tool(HOSTS["anthropic"], "demo", {**WEATHER, "name": "get_weather\n"}).verdict == "refused"


def test_gemini_parameters_drop_what_the_openapi_subset_lacks_and_mark_it_lost() -> None:
    # ai.google.dev Schema: an OpenAPI 3.0 subset; additionalProperties and $schema are not in it.
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"unit": {"type": ["string", "null"], "oneOf": [{"const": "C"}, {"const": "F"}]}},
        "additionalProperties": False,
    }
    shown = present_tool(HOSTS["gemini"], "demo", {**WEATHER, "inputSchema": schema})

    assert shown.verdict == "changed"
    found = changes(shown)
    assert ("lost", "inputSchema/$schema") in found
    assert ("lost", "inputSchema/additionalProperties") in found
    assert ("added", "inputSchema/properties/unit/nullable") in found
    assert ("lost", "inputSchema/properties/unit/oneOf") in found
    assert ("added", "inputSchema/properties/unit/anyOf") in found
    assert shown.input_schema["properties"]["unit"]["type"] == "string"
    assert any("oneOf sent as anyOf" in note for note in shown.notes)
    assert "parameters" in shown.wire


def test_gemini_inlines_refs_and_json_schema_field_keeps_them() -> None:
    schema = {
        "type": "object",
        "$defs": {"Place": {"type": "object", "properties": {"city": {"type": "string"}}}},
        "properties": {"place": {"$ref": "#/$defs/Place"}},
    }
    parameters = present_tool(HOSTS["gemini"], "s", {**WEATHER, "inputSchema": schema})
    json_schema = present_tool(HOSTS["gemini-json"], "s", {**WEATHER, "inputSchema": schema})

    assert parameters.input_schema["properties"]["place"]["properties"] == {"city": {"type": "string"}}
    assert ("lost", "inputSchema/$defs") in changes(parameters)
    assert json_schema.verdict == "ok"
    assert json_schema.wire["parametersJsonSchema"] == schema


def test_gemini_names_must_start_with_a_letter_or_underscore_and_may_hold_dots() -> None:
    # FunctionDeclaration.name: a letter or _ first, then letters, digits, _ . : -
    assert present_tool(HOSTS["gemini"], "s", {**WEATHER, "name": "get.weather"}).verdict == "ok"
    assert present_tool(HOSTS["gemini"], "s", {**WEATHER, "name": "1weather"}).verdict == "refused"


def test_claude_prefixes_mcp_server_tool_and_refuses_what_passes_64() -> None:
    # Claude Code permission rules name MCP tools mcp__<server>__<tool>.
    shown = present_tool(HOSTS["claude"], "demo", WEATHER)
    dotted = present_tool(HOSTS["claude"], "my.server", {**WEATHER, "name": "get.weather"})
    long = present_tool(HOSTS["claude"], "a-server-name", {**WEATHER, "name": "t" * 50})

    assert shown.host_name == "mcp__demo__get_weather"
    assert shown.verdict == "changed"
    assert changes(shown) == {("changed", "name")}
    assert dotted.host_name == "mcp__my_server__get_weather"
    assert long.verdict == "refused"
    assert host_name(HOSTS["claude"], "demo", "x") == "mcp__demo__x"


def test_cursor_sends_the_first_40_tools_and_filters_long_server_and_tool_names() -> None:
    # Cursor docs: only the first 40 tools are sent; observed: server + tool name of 60 filtered.
    tools = [("s", {**WEATHER, "name": f"tool_{index}"}) for index in range(42)]
    view = present_catalog(HOSTS["cursor"], tools)
    long = present_tool(HOSTS["cursor"], "s" * 10, {**WEATHER, "name": "t" * 50})
    short = present_tool(HOSTS["cursor"], "s" * 10, {**WEATHER, "name": "t" * 49})

    assert [tool.verdict for tool in view.tools[:40]] == ["ok"] * 40
    assert [tool.verdict for tool in view.tools[40:]] == ["refused", "refused"]
    assert "past the limit of 40" in view.tools[40].refusals[0].problem
    assert view.verdict == "refused"
    assert long.verdict == "refused" and "60 characters" in long.refusals[0].problem
    assert short.verdict == "ok"


def test_vscode_prefixes_mcp_server_tool_and_allows_128_tools() -> None:
    # VS Code docs: at most 128 tools enabled in one chat request.
    tools = [("demo", {**WEATHER, "name": f"t{index}"}) for index in range(129)]
    view = present_catalog(HOSTS["vscode"], tools)

    assert view.tools[0].host_name == "mcp_demo_t0"
    assert view.tools[127].verdict == "changed"
    assert view.tools[128].verdict == "refused"


def test_a_name_two_tools_share_refuses_the_later_one() -> None:
    view = present_catalog(HOSTS["anthropic"], [("a", WEATHER), ("b", WEATHER)])

    assert [tool.verdict for tool in view.tools] == ["ok", "refused"]
    assert "also named 'get_weather'" in view.tools[1].refusals[0].problem


def test_hostile_definitions_give_refusals_not_exceptions() -> None:
    # As deep as a JSON parser lets a listing arrive (each level is two nested objects).
    deep: Any = {"type": "string"}
    for _ in range(400):
        deep = {"type": "object", "properties": {"x": deep}}
    hostile = [
        ("s", "not a definition"),
        ("s", {"name": None, "inputSchema": []}),
        ("s", {"name": "deep", "inputSchema": deep}),
        ("s", {"name": "bidi\u202etool", "description": "\x00" * 3, "inputSchema": {"type": "object"}}),
    ]
    for preset in HOSTS.values():
        view = present_catalog(preset, hostile)  # type: ignore[arg-type]
        assert len(view.tools) == 4
        assert view.tools[0].verdict == "refused" or preset.root_object is None
        json.dumps(view.as_json())


def test_the_diff_is_capped_and_counts_what_it_left_out() -> None:
    before = {"inputSchema": {f"k{index}": index for index in range(300)}}
    after: dict[str, Any] = {"inputSchema": {}}
    found, left_out = diff(before, after)

    assert len(found) == 200 and left_out == 100
    assert {change.kind for change in found} == {"lost"}


def test_true_and_1_differ() -> None:
    found, _ = diff({"a": True}, {"a": 1})
    assert [(change.kind, change.path) for change in found] == [("changed", "a")]


def tooldef(server: str, name: str, schema: dict[str, Any] | None = None) -> ToolDef:
    return ToolDef(
        1, server, name, f"{server}__{name}", "A tool that does things.", schema or WEATHER["inputSchema"]
    )


def test_as_host_renames_rewrites_marks_and_withholds() -> None:
    tools = [tooldef("demo", "get_weather"), tooldef("demo", "bad.name")]
    offered, notes, problems = tools_as_host(HOSTS["openai-strict"], tools, provider="openai_chat")

    assert [tool.name for tool in offered] == ["get_weather"]
    weather = offered[0]
    assert weather.provider_name == "get_weather" and weather.server_name == "demo"
    assert weather.strict is True
    assert weather.input_schema["additionalProperties"] is False
    assert weather.host is not None and weather.host["preset"] == "openai-strict"
    assert weather.as_json()["host"]["verdict"] == "changed"
    assert ToolDef.from_json(weather.as_json()) == weather
    assert notes[0].startswith("as host openai-strict")
    assert problems and problems[0].startswith("demo/bad.name: not offered")


def test_as_host_on_another_providers_profile_rewrites_but_sends_no_wire_flag() -> None:
    offered, notes, _ = tools_as_host(HOSTS["openai-strict"], [tooldef("demo", "w")], provider="anthropic")

    assert offered[0].strict is None
    assert any("not OpenAI function calling, strict" in note for note in notes)
    gemini, _, _ = tools_as_host(HOSTS["gemini-json"], [tooldef("demo", "w")], provider="gemini")
    assert gemini[0].schema_field == "parametersJsonSchema"


@pytest.mark.parametrize("key", list(HOSTS))
def test_every_preset_sends_the_demo_weather_tool(key: str) -> None:
    shown = present_tool(HOSTS[key], "demo", WEATHER)
    assert shown.verdict in ("ok", "changed")
    json.dumps(shown.as_json())
