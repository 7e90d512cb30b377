"""Property tests for the text-reply parsers: no input makes them raise or return ill-typed
results, and a well-formed call survives a render-and-parse round trip unchanged."""

from __future__ import annotations

import json
from collections.abc import Mapping

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conversations.loop.parsing import (
    ParsedCall,
    ParseResult,
    coerce_arguments,
    parse_json_reply,
    parse_label,
    parse_xml_calls,
)
from conversations.typealias import JSONDict, JSONValue

# Every parser sees at least 10,000 generated replies. No example database: nothing is
# written into the work tree, and a failure prints its minimal example anyway.
MANY = settings(
    max_examples=10_000, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
# The round trips and odd-schema coercion build larger examples; fewer still cover them well.
SOME = settings(max_examples=500, deadline=None, database=None)

SCHEMAS: dict[str, JSONDict] = {
    "get_weather": {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer"},
            "metric": {"type": "boolean"},
            "ratio": {"type": ["number", "null"]},
            "tags": {"type": "array", "items": {"type": "string"}},
            "unit": {"enum": ["C", "F"]},
            "where": {"anyOf": [{"$ref": "#/$defs/Place"}, {"type": "null"}]},
        },
        "$defs": {"Place": {"type": "object", "properties": {"lat": {"type": "number"}}}},
    },
    "write_file": {
        "type": "object",
        "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
    },
    "get_time": {"type": "object", "properties": {}},
    "loop": {"$ref": "#", "properties": {"x": {"$ref": "#/properties/x"}}},
}

WEATHER_PARAMS = ["city", "days", "metric", "ratio", "tags", "unit", "where", "not_in_schema"]

VALID_REPLIES = [
    'Let me look.\n```xml\n<function_calls>\n<invoke name="get_weather">\n'
    '<parameter name="city">Paris</parameter>\n<parameter name="days">3</parameter>\n'
    '<parameter name="tags">["a", "b"]</parameter>\n</invoke>\n<invoke name="get_time">\n</invoke>\n'
    "</function_calls>\n```",
    '<function_calls><invoke name="write_file"><parameter name="path">a.md</parameter>'
    '<parameter name="content"><![CDATA[x </parameter> &amp; y]]></parameter></invoke></function_calls>',
    '{"tool": "get_weather", "arguments": {"city": "Paris", "days": 3, "tags": ["a"]}}',
    'Sure.\n```json\n{"tool_calls": [{"function": {"name": "get_time", "arguments": "{}"}}, '
    '{"name": "get_weather", "parameters": {"city": "Rome"}}]}\n```',
    "<think>maybe {\"tool\": \"get_time\"}</think>{'tool': 'get_weather', 'arguments': {'metric': True,}}",
]

FRAGMENTS = [
    "<function_calls>",
    "</function_calls>",
    '<invoke name="get_weather">',
    "<invoke name='write_file'>",
    "<invoke>",
    '<invoke name="get_time"/>',
    "</invoke>",
    '<parameter name="city">',
    "<parameter name='days'>",
    '<parameter name="tags">',
    '<parameter name="content">',
    '<parameter name="where"/>',
    "</parameter>",
    "<![CDATA[",
    "]]>",
    "&lt;",
    "&amp;",
    "&#x1F600;",
    "&#99999999;",
    "&#1114112;",
    "<think>",
    "</think>",
    "<thinking>",
    "<function_results>",
    "<tool_use_result>",
    "```",
    "```xml\n",
    "```json\n",
    "xml Copy code",
    "{",
    "}",
    "[",
    "]",
    '"',
    "'",
    ":",
    ",",
    "\\",
    '{"tool": "get_weather", "arguments": ',
    '{"name": "get_time"}',
    '"arguments": "{',
    '"tool_calls": [',
    '"function": {',
    "<function=get_weather>",
    "</function>",
    "Tool execution result:",
    "True",
    "None",
    "null",
    "1e3",
    "1e999",
    "007",
    "NaN",
    "\n",
    " ",
    "é",
    "🙂",
    "\x00",
    "\ud7ff",
    "[" * 40,
    "{" * 40,
]

fragmented = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=8)), max_size=20).map("".join)
truncated = st.sampled_from(VALID_REPLIES).flatmap(
    lambda reply: st.integers(min_value=0, max_value=len(reply)).map(lambda cut: reply[:cut])
)
replies = st.one_of(st.text(), fragmented, truncated)


def _is_json(value: object) -> bool:
    if value is None or isinstance(value, str | bool | int | float):
        return True
    if isinstance(value, list):
        return all(_is_json(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(key, str) and _is_json(item) for key, item in value.items())
    return False


def assert_well_typed(result: object) -> None:
    assert isinstance(result, ParseResult)
    assert isinstance(result.text, str) and result.text == result.text.strip()
    assert isinstance(result.diagnostics, list)
    assert all(isinstance(note, str) and note for note in result.diagnostics)
    assert not any("internal parser error" in note for note in result.diagnostics)
    assert isinstance(result.calls, list)
    for call in result.calls:
        assert isinstance(call, ParsedCall)
        assert isinstance(call.name, str) and call.name
        assert isinstance(call.arguments_text, str)
        assert call.arguments is None or (isinstance(call.arguments, dict) and _is_json(call.arguments))
        json.dumps(call.arguments, allow_nan=False)


# One generated reply feeds every parser, so each sees 10,000 inputs for one generation cost.
@MANY
@given(replies, st.one_of(st.just(list(SCHEMAS)), st.lists(st.text(max_size=6), max_size=3)))
def test_no_reply_makes_a_parser_raise_or_return_ill_typed_results(reply: str, names: list[str]) -> None:
    assert_well_typed(parse_xml_calls(reply, schemas=SCHEMAS))
    assert_well_typed(parse_json_reply(reply, schemas=SCHEMAS))

    label, diagnostics = parse_label(reply, names=names)
    assert label is None or label in names
    assert all(isinstance(note, str) and note for note in diagnostics)
    assert not any("internal parser error" in note for note in diagnostics)

    values = {name: reply for name in WEATHER_PARAMS}
    coerced, notes = coerce_arguments(values, SCHEMAS["get_weather"])
    assert set(coerced) == set(values) and _is_json(coerced)
    assert all(isinstance(note, str) for note in notes)


property_schemas = st.sampled_from(
    [
        {"type": "string"},
        {"type": "integer"},
        {"type": "number"},
        {"type": "boolean"},
        {"type": "array"},
        {"type": "object"},
        {"type": ["integer", "null"]},
        {"type": ["string", "array"]},
        {"anyOf": [{"type": "boolean"}, {"type": "null"}]},
        {"oneOf": "not a list"},
        {"enum": ["a", "b", 3]},
        {"const": True},
        {"type": 5},
        {"$ref": "#/nope"},
        {"$ref": "#"},
        True,
        None,
    ]
)


@SOME
@given(
    st.dictionaries(st.text(max_size=4), st.one_of(st.text(), fragmented), max_size=4),
    st.dictionaries(st.text(max_size=4), property_schemas, max_size=4),
)
def test_coerce_arguments_never_raises_and_keeps_every_parameter(
    values: dict[str, str], properties: dict[str, JSONValue]
) -> None:
    coerced, diagnostics = coerce_arguments(values, {"type": "object", "properties": properties})
    assert set(coerced) == set(values)
    assert _is_json(coerced)
    assert all(isinstance(note, str) for note in diagnostics)


def test_every_cut_point_of_a_valid_reply_parses_to_no_more_calls_than_the_whole() -> None:
    for reply in VALID_REPLIES:
        for parse in (parse_xml_calls, parse_json_reply):
            whole = len(parse(reply, schemas=SCHEMAS).calls)
            for cut in range(len(reply) + 1):
                result = parse(reply[:cut], schemas=SCHEMAS)
                assert_well_typed(result)
                assert len(result.calls) <= max(whole, 1), (reply[:cut], result)


# --- Round trips -----------------------------------------------------------------------------

names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.-]{0,30}", fullmatch=True)
param_names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_-]{0,15}", fullmatch=True)
# The XML convention cannot tell a value's own edge whitespace from tag layout.
strings = st.text().map(str.strip)


def _lists_of(inner: st.SearchStrategy[JSONValue]) -> st.SearchStrategy[JSONValue]:
    return st.lists(inner, max_size=3)


def _containers_of(inner: st.SearchStrategy[JSONValue]) -> st.SearchStrategy[JSONValue]:
    return st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3))


nested_lists = st.recursive(
    st.lists(st.one_of(st.text(), st.integers(), st.booleans()), max_size=4), _lists_of, max_leaves=10
)
argument_values = st.one_of(strings, st.integers(), st.booleans(), nested_lists)
argument_dicts = st.dictionaries(param_names, argument_values, max_size=5)
calls = st.lists(st.tuples(names, argument_dicts), min_size=1, max_size=3)


def _schema_type(value: JSONValue) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    return "array" if isinstance(value, list) else "string"


def _schemas_for(generated: list[tuple[str, JSONDict]]) -> Mapping[str, JSONDict]:
    schemas: dict[str, JSONDict] = {}
    for name, arguments in generated:
        properties: JSONDict = {key: {"type": _schema_type(value)} for key, value in arguments.items()}
        schemas[name] = {"type": "object", "properties": properties}
    return schemas


def _xml_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _xml_text(value: JSONValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _xml_escape(value)
    if isinstance(value, int):
        return str(value)
    return _xml_escape(json.dumps(value, ensure_ascii=False))


def _render_xml(generated: list[tuple[str, JSONDict]]) -> str:
    lines = ["<function_calls>"]
    for name, arguments in generated:
        lines.append(f'<invoke name="{name}">')
        lines += [
            f'<parameter name="{key}">{_xml_text(value)}</parameter>' for key, value in arguments.items()
        ]
        lines.append("</invoke>")
    lines.append("</function_calls>")
    return "\n".join(lines)


@SOME
@given(calls, st.sampled_from(["", "Let me check that.", "One moment:\n```xml\n"]))
def test_a_well_formed_xml_reply_round_trips_exactly(
    generated: list[tuple[str, JSONDict]], prose: str
) -> None:
    # Schemas are keyed by name, so a repeated name with other parameters keeps the last.
    schemas = _schemas_for(generated)
    generated = [
        (name, args) for name, args in generated if schemas[name] == _schemas_for([(name, args)])[name]
    ]
    reply = prose + _render_xml(generated) + ("\n```" if "```" in prose else "")

    result = parse_xml_calls(reply, schemas=schemas)

    assert [(call.name, call.arguments) for call in result.calls] == generated
    assert result.text == prose.replace("```xml", "").strip()
    assert all("XML entities" in note or "code fence" in note for note in result.diagnostics)


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text()),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=12,
)


@SOME
@given(
    names,
    st.dictionaries(st.text(max_size=8), json_values, max_size=5),
    st.booleans(),
    st.sampled_from(["{}", "```json\n{}\n```", "[{}]"]),
)
def test_a_well_formed_json_reply_round_trips_exactly(
    name: str, arguments: JSONDict, ascii_only: bool, shape: str
) -> None:
    schema: JSONDict = {"type": "object", "properties": {key: {} for key in arguments}}
    rendered = json.dumps({"tool": name, "arguments": arguments}, ensure_ascii=ascii_only)
    reply = shape.replace("{}", rendered)

    result = parse_json_reply(reply, schemas={name: schema})

    assert [(call.name, call.arguments) for call in result.calls] == [(name, arguments)]
    assert result.text == ""
    assert all("code fence" in note for note in result.diagnostics)
