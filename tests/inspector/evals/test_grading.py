"""Grading a turn's calls against a case: each matcher, and each failure class in its order."""

from __future__ import annotations

import pytest

from conversations.typealias import JSONValue
from inspector.evals.grading import MadeCall, TurnFacts, grade_case, value_mismatch
from inspector.evals.suites import Case, ExpectedCall

WEATHER = "demo/get_weather_forecast"


@pytest.mark.parametrize(
    ("want", "got"),
    [
        ("Beijing", "Beijing"),
        (3, 3.0),
        ({"exact": {"regex": "x"}}, {"regex": "x"}),
        ({"oneOf": ["km", "kilometers"]}, "kilometers"),
        ({"regex": "^Bei"}, "Beijing"),
        ({"range": [5, 15]}, 10),
        ({"range": [5, 15]}, 15.0),
    ],
)
def test_a_value_that_matches(want: JSONValue, got: JSONValue) -> None:
    assert value_mismatch(want, got) is None


@pytest.mark.parametrize(
    ("want", "got", "words"),
    [
        ("Beijing", "Paris", "expected 'Beijing'"),
        (1, True, "expected 1"),
        ({"exact": 2}, 3, "expected exactly 2"),
        ({"oneOf": ["km"]}, "mi", "one of ['km']"),
        ({"regex": "^Bei"}, "Paris", "does not match /^Bei/"),
        ({"regex": "^1"}, 12, "does not match"),
        ({"range": [5, 15]}, 16, "from 5 to 15"),
        ({"range": [5, 15]}, "10", "from 5 to 15"),
        ({"range": [0, 1]}, False, "from 0 to 1"),
    ],
)
def test_a_value_that_does_not_match_says_why(want: JSONValue, got: JSONValue, words: str) -> None:
    problem = value_mismatch(want, got)

    assert problem is not None and words in problem


def _case(*expect: ExpectedCall, answer: str | None = None) -> Case:
    return Case(question="q", expect=tuple(expect), answer_contains=answer)


def _facts(
    *calls: MadeCall, status: str = "done", answer: str = "", problems: tuple[str, ...] = ()
) -> TurnFacts:
    return TurnFacts(
        status=status,
        error="boom" if status != "done" else "",
        answer=answer,
        calls=calls,
        parse_problems=problems,
    )


BEIJING = MadeCall(WEATHER, {"city": "Beijing", "day": "tomorrow"})


@pytest.mark.parametrize(
    ("case", "facts", "failure"),
    [
        (_case(ExpectedCall(WEATHER, {"city": "Beijing"})), _facts(BEIJING), ""),
        (
            _case(ExpectedCall(WEATHER, {"nested": {"a": 1}})),
            _facts(MadeCall(WEATHER, {"nested": {"a": 1, "b": 2}})),
            "",
        ),
        (
            _case(ExpectedCall(WEATHER), answer="beijing"),
            _facts(BEIJING, answer="Beijing tomorrow: sunny"),
            "",
        ),
        (_case(), _facts(answer="hello"), ""),
        (_case(), _facts(status="failed"), "error"),
        (
            _case(ExpectedCall(WEATHER)),
            _facts(status="failed", problems=("the reply is not JSON",)),
            "parse_failure",
        ),
        (
            _case(ExpectedCall(WEATHER)),
            _facts(MadeCall(WEATHER, None, "the arguments for x are not a JSON object: '{'")),
            "parse_failure",
        ),
        (
            _case(ExpectedCall(WEATHER)),
            _facts(problems=("reply is truncated: never closed",)),
            "parse_failure",
        ),
        (
            _case(ExpectedCall(WEATHER)),
            _facts(MadeCall(WEATHER, {}, "invalid arguments for x: 'city' is a required property"), BEIJING),
            "validation_failure",
        ),
        (
            _case(ExpectedCall(WEATHER)),
            _facts(MadeCall("demo__get_wether", {}, "unknown tool 'demo__get_wether'"), BEIJING),
            "wrong_tool",
        ),
        (_case(ExpectedCall("demo/calculate")), _facts(BEIJING), "wrong_tool"),
        (_case(ExpectedCall(WEATHER)), _facts(answer="no"), "no_call"),
        (_case(ExpectedCall(WEATHER, {"city": "Paris"})), _facts(BEIJING), "wrong_arguments"),
        (_case(ExpectedCall(WEATHER, {"country": "China"})), _facts(BEIJING), "wrong_arguments"),
        (_case(), _facts(BEIJING), "extra_call"),
        (
            _case(ExpectedCall(WEATHER)),
            _facts(BEIJING, MadeCall("demo/calculate", {"expression": "1"})),
            "extra_call",
        ),
        (_case(ExpectedCall(WEATHER), answer="snow"), _facts(BEIJING, answer="sunny"), "wrong_answer"),
        (_case(ExpectedCall(WEATHER)), _facts(BEIJING, status="failed"), "error"),
    ],
)
def test_each_failure_class(case: Case, facts: TurnFacts, failure: str) -> None:
    grade = grade_case(case, facts)

    assert grade.failure == failure, grade.reason
    assert grade.passed == (failure == "")
    assert bool(grade.reason) == (failure != "")


def test_a_wrong_argument_is_named_in_the_reason() -> None:
    grade = grade_case(_case(ExpectedCall(WEATHER, {"city": {"regex": "^Par"}})), _facts(BEIJING))

    assert grade.reason == f"{WEATHER}: argument city is 'Beijing', which does not match /^Par/"


def test_two_expected_calls_match_two_calls_in_any_order() -> None:
    shanghai = MadeCall(WEATHER, {"city": "Shanghai"})
    case = _case(ExpectedCall(WEATHER, {"city": "Shanghai"}), ExpectedCall(WEATHER, {"city": "Beijing"}))

    assert grade_case(case, _facts(BEIJING, shanghai)).passed
    assert grade_case(case, _facts(BEIJING)).failure == "no_call"
    assert (
        grade_case(case, _facts(BEIJING, MadeCall(WEATHER, {"city": "Paris"}))).failure == "wrong_arguments"
    )


def test_ordered_expected_calls_must_come_in_their_order() -> None:
    shanghai = MadeCall(WEATHER, {"city": "Shanghai"})
    expected = (ExpectedCall(WEATHER, {"city": "Beijing"}), ExpectedCall(WEATHER, {"city": "Shanghai"}))
    ordered = Case(question="q", expect=expected, ordered=True)

    assert grade_case(ordered, _facts(BEIJING, shanghai)).passed
    wrong = grade_case(ordered, _facts(shanghai, BEIJING))
    assert wrong.failure == "wrong_order"
    assert "expected the calls in the order" in wrong.reason
    # Unordered, the same calls pass either way; a missing call is still no_call, not an order.
    assert grade_case(_case(*expected), _facts(shanghai, BEIJING)).passed
    assert grade_case(ordered, _facts(BEIJING)).failure == "no_call"


def test_a_regex_that_backtracks_catastrophically_grades_a_matcher_error_not_a_hang() -> None:
    case = _case(ExpectedCall(WEATHER, {"city": {"regex": "(a|aa)+b"}}))

    grade = grade_case(case, _facts(MadeCall(WEATHER, {"city": "a" * 60})))

    assert grade.failure == "error"
    assert "matcher error" in grade.reason and "/(a|aa)+b/" in grade.reason


def test_the_reported_nested_quantifier_is_decided_on_a_long_argument() -> None:
    assert value_mismatch({"regex": "(a+)+b"}, "a" * 64) == f"is {'a' * 64!r}, which does not match /(a+)+b/"


SCHEMA = {"type": "object", "properties": {"c": {"type": "number", "minimum": 0}}, "required": ["c"]}


def test_a_schema_matcher_holds_a_value_to_a_json_schema_and_says_where_it_fails() -> None:
    assert value_mismatch({"schema": SCHEMA}, {"c": 3}) is None
    assert value_mismatch({"schema": {"type": "string", "pattern": "^Bei"}}, "Beijing") is None

    problem = value_mismatch({"schema": SCHEMA}, {"c": -1})
    assert problem is not None and "does not match its schema" in problem and "c:" in problem
    missing = value_mismatch({"schema": SCHEMA}, {})
    assert missing is not None and "'c' is a required property" in missing


def test_a_schema_pattern_that_backtracks_grades_a_matcher_error_not_a_hang() -> None:
    case = _case(ExpectedCall(WEATHER, {"city": {"schema": {"type": "string", "pattern": "(a|aa)+b"}}}))

    grade = grade_case(case, _facts(MadeCall(WEATHER, {"city": "a" * 40})))

    assert grade.failure == "error" and "matcher error" in grade.reason


def test_match_exact_refuses_arguments_besides_the_expected_ones() -> None:
    exact = _case(ExpectedCall(WEATHER, {"city": "Beijing"}, match="exact"))
    subset = _case(ExpectedCall(WEATHER, {"city": "Beijing"}))
    with_day = MadeCall(WEATHER, {"city": "Beijing", "day": "tomorrow"})

    assert grade_case(exact, _facts(MadeCall(WEATHER, {"city": "Beijing"}))).passed
    assert grade_case(subset, _facts(with_day)).passed
    grade = grade_case(exact, _facts(with_day))
    assert grade.failure == "wrong_arguments" and "argument day was given" in grade.reason


def test_a_call_count_is_the_number_of_calls_in_all() -> None:
    shanghai = MadeCall(WEATHER, {"city": "Shanghai"})
    twice = Case(question="q", expect=(ExpectedCall(WEATHER, {"city": "Beijing"}),), call_count=2)
    any_two = Case(question="q", expect=(), call_count=2)

    assert grade_case(twice, _facts(BEIJING, shanghai)).passed
    assert grade_case(any_two, _facts(shanghai, BEIJING)).passed
    few = grade_case(twice, _facts(BEIJING))
    assert few.failure == "no_call" and "expected 2 tool call(s) in all, but 1" in few.reason
    assert grade_case(twice, _facts(BEIJING, shanghai, shanghai)).failure == "extra_call"
    # Without it, a call besides the expected ones is an extra call, and no call is "no call".
    assert grade_case(
        _case(ExpectedCall(WEATHER, {"city": "Beijing"})), _facts(BEIJING, shanghai)
    ).failure == ("extra_call")
    assert grade_case(_case(), _facts()).passed
