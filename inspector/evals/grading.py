"""Grading one case: the calls a turn made (read from its recorded steps) against what the case
expects, and the failure class when they differ.

Expected argument values are matched as a *subset* of the call's arguments (with ``match:
exact`` on the expected call, as all of them). A value is a literal (equal, with 1 == 1.0) or a
matcher, a one-key object: ``{"exact": value}`` (equal, for a literal that looks like a matcher),
``{"oneOf": [v1, v2]}``, ``{"regex": "..."}`` (searched in a string value with the ``regex``
package, within ``REGEX_TIMEOUT_SECONDS``: a pattern that backtracks catastrophically grades
``error`` naming the matcher, never a hang), ``{"range": [min, max]}`` (a number, bounds
included), ``{"schema": {...}}`` (valid against a JSON Schema, draft 2020-12, whose ``pattern``
searches with the same time limit). An object that is no matcher is
matched as a subset again, key by key. A case's ``call_count`` is the number of calls the turn
must make in all, the expected ones among them (fewer: ``no_call``, more: ``extra_call``).

The failure classes, in the order they are looked for (the first found is the case's):
``error`` (the turn failed before any call was made), ``parse_failure`` (a call whose arguments
could not be read, or a reply the paradigm could not parse), ``validation_failure`` (arguments
not valid against the tool's inputSchema), ``wrong_tool`` (an unknown tool, or another tool than
expected), ``no_call``, ``wrong_arguments``, ``extra_call`` (a call not expected, e.g. any call
when ``[]`` is expected), ``wrong_order`` (a case with ``ordered: true`` whose expected calls
were all made, not in their order), ``wrong_answer`` (the final answer lacks ``answer_contains``), and
``error`` for a turn that failed after its calls. A call the host rejected fails the case even if
the model repaired it later: the case measures whether the model gets it right by itself, and the
repair stays visible in the conversation.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import jsonschema
import regex  # type: ignore[import-untyped]  # no stubs installed; types-regex would give them

from conversations.typealias import JSONDict, JSONValue
from inspector.evals.suites import Case, ExpectedCall, is_matcher

# How long one regex matcher may search one value (docs/evals.md).
REGEX_TIMEOUT_SECONDS = 0.5
# How each failure class starts its reason in check_call's words (conversations.loop.agent).
_NOT_JSON = "are not a JSON object"
_UNKNOWN_TOOL = "unknown tool"
_INVALID = "invalid arguments"
# A paradigm's diagnostics that say a reply could not be read (conversations.loop.paradigms).
_PARSE_WORDS = re.compile(
    r"not (?:valid )?(?:JSON|XML)|not a JSON object|could not (?:parse|read)|truncated|never closed"
    r"|is missing|unreadable|malformed",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class MadeCall:
    """A call as the turn made it: ``tool`` as ``server/tool`` (the raw name when it resolved to
    no offered tool), its arguments (None when they were no JSON object) and the host's verdict."""

    tool: str
    arguments: JSONDict | None
    rejected: str = ""  # why the host did not send it ("" when it was sent)

    def as_json(self) -> JSONDict:
        data: JSONDict = {"tool": self.tool, "arguments": self.arguments}
        if self.rejected:
            data["rejected"] = self.rejected
        return data


@dataclass(frozen=True)
class TurnFacts:
    """What grading reads of a finished turn (``evals.services`` builds it from the steps)."""

    status: str  # the turn's status: done, failed, interrupted, cancelled
    error: str
    answer: str
    calls: Sequence[MadeCall]
    parse_problems: Sequence[str] = field(default_factory=tuple)


@dataclass(frozen=True)
class Grade:
    failure: str  # "" when the case passed, else an EvalCaseResult.Failure value
    reason: str

    @property
    def passed(self) -> bool:
        return not self.failure


def grade_case(case: Case, facts: TurnFacts) -> Grade:
    """Grade one finished turn against ``case`` (see the module's docstring for the order); a
    matcher that cannot decide grades ``error`` naming the matcher (``MatcherError``)."""
    try:
        return _grade(case, facts)
    except MatcherError as exc:
        return Grade("error", f"matcher error: {exc}")


def _grade(case: Case, facts: TurnFacts) -> Grade:
    if facts.status != "done" and not facts.calls:
        if facts.parse_problems and case.expect:
            return Grade("parse_failure", f"the reply could not be read: {facts.parse_problems[0]}")
        return Grade("error", f"the turn {facts.status}: {facts.error or 'no reason recorded'}")
    for call in facts.calls:
        if call.arguments is None or _NOT_JSON in call.rejected:
            return Grade("parse_failure", f"the arguments of {call.tool} could not be read: {call.rejected}")
    if facts.parse_problems and not facts.calls and case.expect:
        return Grade("parse_failure", f"the reply could not be read: {facts.parse_problems[0]}")
    for call in facts.calls:
        if call.rejected.startswith(_INVALID):
            return Grade("validation_failure", call.rejected)
    for call in facts.calls:
        if call.rejected.startswith(_UNKNOWN_TOOL):
            return Grade("wrong_tool", f"called a tool that was not offered: {call.rejected}")
    for call in facts.calls:
        if call.rejected:
            return Grade("validation_failure", call.rejected)
    made = list(facts.calls)
    if case.expect and not made:
        wanted = ", ".join(call.tool for call in case.expect)
        return Grade("no_call", f"expected a call to {wanted}, but no tool was called")
    if not case.expect and made and not case.call_count:
        return Grade("extra_call", f"expected no tool call, but {_names(made)} called")
    unmatched = list(made)
    missing: list[ExpectedCall] = []
    positions: list[int] = []
    for expected in case.expect:
        found = next((call for call in unmatched if _call_matches(expected, call)), None)
        if found is None:
            missing.append(expected)
        else:
            unmatched.remove(found)
            positions.append(next(index for index, call in enumerate(made) if call is found))
    for expected in missing:
        same_tool = [call for call in unmatched if call.tool == expected.tool]
        if same_tool:
            return Grade("wrong_arguments", _argument_reason(expected, same_tool[0]))
        if unmatched:
            return Grade("wrong_tool", f"expected a call to {expected.tool}, but {_names(unmatched)} called")
        return Grade("no_call", f"expected a call to {expected.tool} as well, but it was not made")
    # With a call_count, calls besides the expected ones are allowed up to that many in all.
    if unmatched and case.call_count is None:
        return Grade("extra_call", f"{_names(unmatched)} called besides the expected calls")
    if case.call_count is not None and len(made) != case.call_count:
        failure = "extra_call" if len(made) > case.call_count else "no_call"
        return Grade(failure, f"expected {case.call_count} tool call(s) in all, but {len(made)} were made")
    if case.ordered and positions != sorted(positions):
        order = ", ".join(made[index].tool for index in sorted(positions))
        wanted = ", ".join(call.tool for call in case.expect)
        return Grade("wrong_order", f"expected the calls in the order {wanted}, but they came as {order}")
    if case.answer_contains is not None and case.answer_contains.casefold() not in facts.answer.casefold():
        return Grade("wrong_answer", f"the final answer does not contain {case.answer_contains!r}")
    if facts.status != "done":
        return Grade(
            "error", f"the turn {facts.status} after its calls: {facts.error or 'no reason recorded'}"
        )
    return Grade("", "")


def is_parse_problem(text: str) -> bool:
    """Whether a model step's diagnostic says its reply (or a call in it) could not be read."""
    return bool(_PARSE_WORDS.search(text))


def _names(calls: Sequence[MadeCall]) -> str:
    names = list(dict.fromkeys(call.tool for call in calls))
    return (", ".join(names) or "nothing") + (" was" if len(calls) == 1 else " were")


def _call_matches(expected: ExpectedCall, call: MadeCall) -> bool:
    if call.tool != expected.tool:
        return False
    return expected.arguments is None or _arguments_mismatch(expected, call) is None


def _arguments_mismatch(expected: ExpectedCall, call: MadeCall) -> str | None:
    """Why the call's arguments do not match: a subset of them, or with ``match: exact`` all."""
    actual = call.arguments or {}
    problem = _mismatch(expected.arguments or {}, actual, "")
    if problem is None and expected.match == "exact":
        extra = sorted(set(actual) - set(expected.arguments or {}))
        if extra:
            return f"argument {extra[0]} was given, but the arguments must be exactly the expected ones"
    return problem


def _argument_reason(expected: ExpectedCall, call: MadeCall) -> str:
    return f"{expected.tool}: {_arguments_mismatch(expected, call)}"


def _mismatch(expected: JSONDict, actual: JSONDict, path: str) -> str | None:
    """Why ``actual`` does not hold ``expected`` as a subset (None when it does)."""
    for name, want in expected.items():
        where = f"{path}.{name}" if path else name
        if name not in actual:
            return f"argument {where} is missing"
        problem = value_mismatch(want, actual[name])
        if problem is None:
            continue
        if problem == "":
            nested = actual[name]
            assert isinstance(want, dict) and isinstance(nested, dict)
            deeper = _mismatch(want, nested, where)
            if deeper is not None:
                return deeper
            continue
        return f"argument {where} {problem}"
    return None


def value_mismatch(want: JSONValue, got: JSONValue) -> str | None:
    """None when ``got`` matches ``want`` (a literal or a matcher); else why not. The empty string
    means "both are objects: compare them key by key" (``_mismatch`` does)."""
    if is_matcher(want):
        assert isinstance(want, dict)
        key, operand = next(iter(want.items()))
        if key == "exact":
            return None if _equal(operand, got) else f"is {_show(got)}, expected exactly {_show(operand)}"
        if key == "oneOf":
            options = operand if isinstance(operand, list) else []
            if any(_equal(option, got) for option in options):
                return None
            return f"is {_show(got)}, expected one of {_show(options)}"
        if key == "regex":
            if isinstance(got, str) and isinstance(operand, str) and regex_search(operand, got):
                return None
            return f"is {_show(got)}, which does not match /{operand}/"
        if key == "schema":
            problem = schema_problem(operand, got)
            return None if problem is None else f"is {_show(got)}, which does not match its schema: {problem}"
        if key == "range":
            low, high = operand if isinstance(operand, list) and len(operand) == 2 else (None, None)
            if (
                isinstance(got, (int, float))
                and not isinstance(got, bool)
                and isinstance(low, (int, float))
                and isinstance(high, (int, float))
                and low <= got <= high
            ):
                return None
            return f"is {_show(got)}, expected a number from {low} to {high}"
    if isinstance(want, dict):
        return "" if isinstance(got, dict) else f"is {_show(got)}, expected an object"
    return None if _equal(want, got) else f"is {_show(got)}, expected {_show(want)}"


class MatcherError(Exception):
    """A matcher of the suite could not decide (a regex past its time limit): the suite's
    mistake, graded ``error`` with this reason, never as the model's failure."""


def regex_search(pattern: str, text: str) -> bool:
    """``pattern`` searched in ``text`` with the ``regex`` package, within ``REGEX_TIMEOUT_SECONDS``.

    Raises:
        MatcherError: the search ran out of time (a pattern that backtracks catastrophically).
    """
    try:
        return regex.search(pattern, text, timeout=REGEX_TIMEOUT_SECONDS) is not None
    except TimeoutError:
        raise MatcherError(
            f"the regex matcher /{pattern}/ could not decide on {_show(text)} within "
            f"{REGEX_TIMEOUT_SECONDS} s (it backtracks catastrophically): rewrite the pattern"
        ) from None


def _pattern(
    validator: jsonschema.protocols.Validator, pattern: str, instance: object, schema: JSONDict
) -> Iterator[jsonschema.ValidationError]:
    """JSON Schema's ``pattern``, searched like the regex matcher: with a time limit."""
    if isinstance(instance, str) and not regex_search(pattern, instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


# Draft 2020-12, its ``pattern`` searched with a time limit (``regex_search``): Python's ``re``,
# which ``jsonschema`` uses, has none (``patternProperties``, searched in several keywords, is
# refused when the suite is read: ``suites.matcher_check``).
# ``extend`` is jsonschema's documented way to change a keyword; its stubs leave it untyped.
_SchemaValidator = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
    jsonschema.Draft202012Validator, {"pattern": _pattern}
)


def schema_problem(schema: JSONValue, value: JSONValue) -> str | None:
    """Why ``value`` is not valid against the JSON Schema ``schema`` (None when it is): the
    most relevant error, ``jsonschema.exceptions.best_match``'s.

    Raises:
        MatcherError: a pattern of the schema ran out of time.
    """
    if not isinstance(schema, (dict, bool)):  # refused when the suite is read (suites.matcher_check)
        return "the schema matcher holds no JSON Schema"
    error = jsonschema.exceptions.best_match(_SchemaValidator(schema).iter_errors(value))
    if error is None:
        return None
    where = "/".join(str(part) for part in error.absolute_path)
    return f"{where}: {error.message}" if where else error.message


def _equal(want: JSONValue, got: JSONValue) -> bool:
    if isinstance(want, bool) or isinstance(got, bool):
        return type(want) is type(got) and want == got
    if isinstance(want, (int, float)) and isinstance(got, (int, float)):
        return want == got
    return type(want) is type(got) and want == got


def _show(value: JSONValue) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."
