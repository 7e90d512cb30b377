"""Suite files: the issue's example reads as written; a bad file (JSON or YAML, malformed,
hostile) is refused with an error that names the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inspector.evals.suites import (
    MAX_NESTING,
    MAX_SUITE_CHARS,
    SuiteError,
    ToolOverride,
    parse_suite,
    suite_from_document,
)

EXAMPLE = (Path(__file__).parent / "example_suite.json").read_text()


def _error(text: str | bytes) -> SuiteError:
    with pytest.raises(SuiteError) as caught:
        parse_suite(text)
    return caught.value


def _with(**changes: object) -> str:
    document = json.loads(EXAMPLE)
    document.update(changes)
    return json.dumps(document)


def test_the_example_suite_reads_as_ten_cells_of_three_cases() -> None:
    suite = parse_suite(EXAMPLE)

    assert suite.name == "weather-basics"
    assert len(suite.cells) == 10
    assert suite.cells[:2] == [("demo", "native", "plain"), ("demo", "native", "terse")]
    assert suite.variants["terse"] == {"demo/get_weather_forecast": ToolOverride(description="Weather.")}
    assert [len(case.expect) for case in suite.cases] == [1, 1, 0]
    assert suite.cases[0].expect[0].arguments == {"city": "Beijing"}
    assert parse_suite(json.dumps(suite.as_json())) == suite


def test_the_same_suite_in_yaml_reads_the_same() -> None:
    yaml_text = """
# comments are kept in the stored source
name: weather-basics
models: [demo]
paradigms: [native, prompt_xml, prompt_json, structured, intent]
servers: [demo]
variants:
  plain: {}
  terse:
    demo/get_weather_forecast: {description: Weather.}
cases:
  - question: What will the weather be like in Beijing tomorrow?
    expect: [{tool: demo/get_weather_forecast, arguments: {city: Beijing}}]
  - question: What is 12 * (3 + 4)?
    expect: [{tool: demo/calculate}]
  - question: Hello there
    expect: []
"""
    assert parse_suite(yaml_text) == parse_suite(EXAMPLE)


def test_each_matcher_and_parameter_overrides_are_read() -> None:
    suite = parse_suite(
        _with(
            variants={"v": {"demo/get_weather_forecast": {"parameters": {"city": "Where."}}}},
            cases=[
                {
                    "question": "q",
                    "expect": [
                        {
                            "tool": "demo/convert_units",
                            "arguments": {
                                "value": {"range": [5, 15]},
                                "from_unit": {"oneOf": ["km", "kilometers"]},
                                "to_unit": {"regex": "^mi"},
                                "note": {"exact": {"regex": "literally"}},
                            },
                        }
                    ],
                    "answer_contains": "miles",
                }
            ],
        )
    )

    assert suite.variants["v"]["demo/get_weather_forecast"].parameters == {"city": "Where."}
    assert suite.cases[0].answer_contains == "miles"


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"name": ""}, "name", "non-empty string"),
        ({"models": "demo"}, "models", "list of names"),
        ({"models": []}, "models", "at least one"),
        ({"paradigms": ["native", "telepathy"]}, "paradigms[1]", "unknown paradigm 'telepathy'"),
        ({"servers": ["demo", 3]}, "servers[1]", "non-empty string"),
        ({"variants": {"bad name!": {}}}, "variants.bad name!", "letters, digits"),
        ({"variants": {"v": {"get_weather": {"description": "x"}}}}, "variants.v.get_weather", "server/tool"),
        ({"variants": {"v": {"other/tool": {"description": "x"}}}}, "variants.v.other/tool", "not among"),
        ({"variants": {"v": {"demo/x": {"description": 5}}}}, "variants.v.demo/x.description", "string"),
        ({"variants": {"v": {"demo/x": {}}}}, "variants.v.demo/x", "overrides nothing"),
        ({"tool_choice": "sometimes"}, "tool_choice", "one of"),
        ({"tool_choice": "named"}, "tool", "server/tool"),
        ({"repeats": 0}, "repeats", "1 to"),
        ({"cases": [{"question": "q", "expect": [], "repeats": 0}]}, "cases[0].repeats", "1 to"),
        ({"cases": [{"question": "q", "expect": [], "repeats": 21}]}, "cases[0].repeats", "1 to"),
        ({"cases": [{"question": "q", "expect": [], "repeats": True}]}, "cases[0].repeats", "1 to"),
        ({"colour": "blue"}, "colour", "unknown field"),
        ({"cases": []}, "cases", "at least one"),
        ({"cases": [{"question": "q"}]}, "cases[0].expect", "is required"),
        ({"cases": [{"question": "q", "expect": {}}]}, "cases[0].expect", "list of expected calls"),
        (
            {"cases": [{"question": "q", "expect": [{"tool": "calculate"}]}]},
            "cases[0].expect[0].tool",
            "server/tool",
        ),
        (
            {"cases": [{"question": "q", "expect": [{"tool": "a/b", "arguments": {"x": {"regex": "("}}}]}]},
            "cases[0].expect[0].arguments.x.regex",
            "regular expression",
        ),
        (
            {
                "cases": [
                    {"question": "q", "expect": [{"tool": "a/b", "arguments": {"x": {"range": [9, 1]}}}]}
                ]
            },
            "cases[0].expect[0].arguments.x.range",
            "min ≤ max",
        ),
        (
            {"cases": [{"question": "q", "expect": [{"tool": "a/b", "arguments": {"x": {"oneOf": []}}}]}]},
            "cases[0].expect[0].arguments.x.oneOf",
            "non-empty list",
        ),
        (
            {"cases": [{"question": "q", "expect": [], "answer_contains": 3}]},
            "cases[0].answer_contains",
            "string",
        ),
        (
            {"cases": [{"question": "q", "expect": [{"tool": "a/b"}, {"tool": "a/c"}], "ordered": "yes"}]},
            "cases[0].ordered",
            "true or false",
        ),
        (
            {"cases": [{"question": "q", "expect": [{"tool": "a/b"}], "ordered": True}]},
            "cases[0].ordered",
            "at least two expected calls",
        ),
        (
            {"cases": [{"question": "q", "expect": [{"tool": "a/b"}], "in_order": True}]},
            "cases[0].in_order",
            "at least two expected calls",
        ),
        (
            {"cases": [{"question": "q", "expect": [{"tool": "a/b", "match": "fuzzy"}]}]},
            "cases[0].expect[0].match",
            "one of",
        ),
        (
            {"cases": [{"question": "q", "expect": [{"tool": "a/b", "match": "exact"}]}]},
            "cases[0].expect[0].match",
            "exact needs",
        ),
        (
            {"cases": [{"question": "q", "expect": [{"tool": "a/b"}, {"tool": "a/c"}], "call_count": 1}]},
            "cases[0].call_count",
            "at least the 2 expected",
        ),
        (
            {
                "cases": [
                    {
                        "question": "q",
                        "expect": [{"tool": "a/b", "arguments": {"x": {"schema": {"type": "nope"}}}}],
                    }
                ]
            },
            "cases[0].expect[0].arguments.x.schema",
            "not a valid JSON Schema",
        ),
        (
            {
                "cases": [
                    {"question": "q", "expect": [{"tool": "a/b", "arguments": {"x": {"schema": "string"}}}]}
                ]
            },
            "cases[0].expect[0].arguments.x.schema",
            "must be a JSON Schema",
        ),
        (
            {
                "cases": [
                    {
                        "question": "q",
                        "expect": [
                            {
                                "tool": "a/b",
                                "arguments": {"x": {"schema": {"patternProperties": {"(a|aa)+b": {}}}}},
                            }
                        ],
                    }
                ]
            },
            "cases[0].expect[0].arguments.x.schema",
            "patternProperties is not supported",
        ),
    ],
)
def test_a_bad_field_is_named_in_the_error(changes: dict[str, object], field: str, words: str) -> None:
    error = _error(_with(**changes))

    assert error.field == field
    assert words in str(error)
    assert str(error).startswith(f"{field}: ")


def test_a_yaml_suite_with_a_bad_field_names_it() -> None:
    error = _error(
        "name: x\nmodels: [demo]\nparadigms: [native]\ncases:\n  - question: hi\n    expect: yes\n"
    )

    assert error.field == "cases[0].expect"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('{"name": "x", ', "not valid JSON"),
        ("name: [unclosed\n", "not valid YAML"),
        ("- just\n- a list\n", "a suite is an object"),
        ("", "empty"),
        (b"name: caf\xe9\n", "not UTF-8"),
        ("a: &x [1]\nb: *x\n", "aliases"),
        ("name: !!python/object:os.system x\n", "not valid YAML"),
    ],
)
def test_text_that_is_no_suite_gets_a_clear_error(text: str | bytes, words: str) -> None:
    assert words in str(_error(text))


def test_a_huge_file_is_refused_before_it_is_read() -> None:
    assert "at most" in str(_error("{" + " " * MAX_SUITE_CHARS + "}"))


@pytest.mark.parametrize("opening", ["[", '{"a": '])
def test_a_document_nested_thousands_deep_is_refused(opening: str) -> None:
    closing = "]" if opening == "[" else "}"
    text = '{"name": "x", "cases": ' + opening * 5000 + "1" + closing * 5000 + "}"

    assert f"deeper than {MAX_NESTING}" in str(_error(text))


def test_a_yaml_document_nested_deeply_is_refused() -> None:
    assert f"deeper than {MAX_NESTING}" in str(_error("name: x\ncases: " + "[" * 200 + "]" * 200 + "\n"))


def test_in_order_call_count_match_and_schema_are_read_and_kept() -> None:
    text = _with(
        cases=[
            {
                "question": "q",
                "expect": [
                    {"tool": "a/b", "arguments": {"x": {"schema": {"type": "integer"}}}, "match": "exact"},
                    {"tool": "a/c"},
                ],
                "in_order": True,
                "call_count": 3,
            },
            {"question": "r", "expect": [{"tool": "a/b"}, {"tool": "a/c"}], "ordered": True},
        ]
    )
    suite = parse_suite(text)

    first, second = suite.cases
    assert first.ordered and second.ordered and first.call_count == 3
    assert first.expect[0].match == "exact" and first.expect[1].match == "subset"
    assert suite_from_document(suite.as_json()) == suite
