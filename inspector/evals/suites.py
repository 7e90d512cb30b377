"""Suite files: YAML or JSON text read into a validated :class:`SuiteDefinition`.

A suite names the model profiles, paradigms and MCP servers to run, optional description
*variants* (overrides of tool and parameter descriptions, keyed ``server/tool``), a tool_choice,
how many times each case runs (``repeats``; a case may say its own), and the cases: a question,
the calls expected (``[]``: no tool should be called; each argument
value matched by :mod:`evals.grading`'s matchers) and optionally a text the final answer must
contain and a model that judges the turn against a rubric (``judge``, :mod:`evals.judging`). Every error names the field it is about (``cases[0].expect[0].tool``), so a person can
find it in their file. The format is described in docs/evals.md.

Pure Python: reads no database (whether a named profile or server exists is checked when a run
starts, ``evals.services.run_start``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import jsonschema
import regex  # type: ignore[import-untyped]  # no stubs installed; types-regex would give them
import yaml

from conversations.loop.paradigms import PARADIGMS
from conversations.models import TOOL_CHOICE_MODES
from conversations.typealias import JSONDict, JSONValue

# More would be a denial of service, not an eval: every case is a recorded conversation.
MAX_SUITE_CHARS = 1_000_000
MAX_CASES = 1000
MAX_CELLS = 200
MAX_REPEATS = 20
MAX_NESTING = 32
MAX_NAME_CHARS = 200  # evals.models.Suite.name
MATCHER_KEYS = ("exact", "oneOf", "regex", "range", "schema")
_TOOL_NAME = re.compile(r"^[^/\s]+/\S+$")
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_VARIANT_NAME = re.compile(r"^[\w.-]{1,80}$")
_TOOL_CHOICES = frozenset(key for key, _ in TOOL_CHOICE_MODES)
_SUITE_KEYS = frozenset(
    ("name", "models", "paradigms", "servers", "variants", "tool_choice", "tool", "repeats", "cases")
)
_CASE_KEYS = frozenset(
    ("question", "expect", "answer_contains", "ordered", "in_order", "call_count", "repeats", "judge")
)
# An expected call's arguments are a subset of the call's (default) or all of them.
ARGUMENT_MATCHES = ("subset", "exact")

_CALL_KEYS = frozenset(("tool", "arguments", "match"))
_JUDGE_KEYS = frozenset(("profile", "rubric", "pass_when"))
# A judge scores from JUDGE_SCORES[0] to JUDGE_SCORES[1]; without pass_when, DEFAULT_PASS_WHEN passes.
JUDGE_SCORES = (0, 10)
DEFAULT_PASS_WHEN: JSONDict = {"range": [7, 10]}
MAX_RUBRIC_CHARS = 4000
_PASS_WHEN_MATCHERS = frozenset(("exact", "oneOf", "range"))
_OVERRIDE_KEYS = frozenset(("description", "parameters"))


class SuiteError(ValueError):
    """A suite that cannot be run. ``field`` names where (``cases[2].expect[0].arguments.city``;
    empty for the text as a whole) and the message starts with it."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}" if field else problem)


@dataclass(frozen=True)
class ToolOverride:
    """A variant's wording of one tool: its description and its parameters' descriptions
    (by parameter name); None / absent means "as the server says"."""

    description: str | None = None
    parameters: dict[str, str] = field(default_factory=dict)

    def as_json(self) -> JSONDict:
        data: JSONDict = {}
        if self.description is not None:
            data["description"] = self.description
        if self.parameters:
            data["parameters"] = dict(self.parameters)
        return data


@dataclass(frozen=True)
class ExpectedCall:
    """One call a case expects: ``tool`` as ``server/tool``; ``arguments`` a subset the call's
    arguments must contain, each value a literal or a matcher (``evals.grading``)."""

    tool: str
    arguments: JSONDict | None = None
    # "exact": the call's arguments are these and no others (each value still may be a matcher).
    match: str = "subset"

    def as_json(self) -> JSONDict:
        data: JSONDict = {"tool": self.tool}
        if self.arguments is not None:
            data["arguments"] = self.arguments
        if self.match != "subset":
            data["match"] = self.match
        return data


@dataclass(frozen=True)
class Judge:
    """A model-graded check of a case (``evals.judging``): the model profile that judges, the
    rubric it judges by, and which of its scores (0-10) pass — a literal or a matcher
    (``exact``, ``oneOf``, ``range``) on the score."""

    profile: str
    rubric: str
    pass_when: JSONValue = field(default_factory=lambda: dict(DEFAULT_PASS_WHEN))

    def as_json(self) -> JSONDict:
        return {"profile": self.profile, "rubric": self.rubric, "pass_when": self.pass_when}


@dataclass(frozen=True)
class Case:
    question: str
    expect: tuple[ExpectedCall, ...]  # empty: no tool should be called
    answer_contains: str | None = None
    # The expected calls must be made in their order (other calls may come between them).
    ordered: bool = False
    # How many tool calls the turn must make in all (None: as many as the expected calls need).
    call_count: int | None = None
    # How many times this case runs per cell; None: the run's repeats (the suite's by default).
    repeats: int | None = None
    # A model that judges the turn once every other check has passed (None: no judge).
    judge: Judge | None = None

    def as_json(self) -> JSONDict:
        data: JSONDict = {"question": self.question, "expect": [call.as_json() for call in self.expect]}
        if self.answer_contains is not None:
            data["answer_contains"] = self.answer_contains
        if self.ordered:
            data["in_order"] = True
        if self.call_count is not None:
            data["call_count"] = self.call_count
        if self.repeats is not None:
            data["repeats"] = self.repeats
        if self.judge is not None:
            data["judge"] = self.judge.as_json()
        return data


@dataclass(frozen=True)
class SuiteDefinition:
    """A validated suite. ``variants`` maps a variant's name to its overrides by ``server/tool``;
    a suite without variants has one, ``default``, that changes nothing."""

    name: str
    models: tuple[str, ...]
    paradigms: tuple[str, ...]
    servers: tuple[str, ...]
    variants: dict[str, dict[str, ToolOverride]]
    cases: tuple[Case, ...]
    tool_choice: str = "auto"
    tool: str = ""  # with tool_choice "named": the tool, as server/tool
    repeats: int = 1

    def case_repeats(self, default: int | None = None) -> list[int]:
        """How many times each case runs per cell, in case order: its own ``repeats``, else
        ``default`` (a run's override), else the suite's."""
        fallback = self.repeats if default is None else default
        return [case.repeats if case.repeats is not None else fallback for case in self.cases]

    @property
    def cells(self) -> list[tuple[str, str, str]]:
        """Every (model, paradigm, variant), in the order a run reports them."""
        return [
            (model, paradigm, variant)
            for model in self.models
            for paradigm in self.paradigms
            for variant in self.variants
        ]

    def as_json(self) -> JSONDict:
        return {
            "name": self.name,
            "models": list(self.models),
            "paradigms": list(self.paradigms),
            "servers": list(self.servers),
            "variants": {
                name: {tool: override.as_json() for tool, override in overrides.items()}
                for name, overrides in self.variants.items()
            },
            "tool_choice": self.tool_choice,
            "tool": self.tool,
            "repeats": self.repeats,
            "cases": [case.as_json() for case in self.cases],
        }


def parse_suite(text: str | bytes) -> SuiteDefinition:
    """Read a suite from YAML or JSON text (JSON is YAML too; a text starting with ``{`` is read
    as JSON, for JSON's own error messages).

    Raises:
        SuiteError: the text is not UTF-8, not YAML/JSON, too big or too deep, or a field is
            missing, of the wrong type or not allowed; the error names the field.
    """
    return suite_from_document(_load(text))


def suite_from_document(document: object) -> SuiteDefinition:
    """Validate an already-loaded document (a stored definition, an API body).

    Raises:
        SuiteError: as ``parse_suite``.
    """
    if not isinstance(document, dict):
        raise SuiteError("", f"a suite is an object (a mapping), not {_kind(document)}")
    _depth_check(document, "", 0)
    _no_unknown_keys(document, _SUITE_KEYS, "")
    name = _text(document, "name", "")
    if len(name) > MAX_NAME_CHARS:
        raise SuiteError("name", f"{len(name)} characters long: at most {MAX_NAME_CHARS}")
    models = _names(document, "models", "")
    paradigms = _names(document, "paradigms", "")
    for index, paradigm in enumerate(paradigms):
        if paradigm not in PARADIGMS:
            raise SuiteError(
                f"paradigms[{index}]", f"unknown paradigm {paradigm!r}; one of {', '.join(sorted(PARADIGMS))}"
            )
    servers = _names(document, "servers", "", allow_empty=True)
    variants = _variants(document.get("variants"), servers)
    tool_choice = document.get("tool_choice", "auto")
    if tool_choice not in _TOOL_CHOICES:
        raise SuiteError("tool_choice", f"must be one of {', '.join(sorted(_TOOL_CHOICES))}")
    tool = document.get("tool", "")
    if tool_choice == "named":
        if not isinstance(tool, str) or not _TOOL_NAME.match(tool):
            raise SuiteError("tool", 'with tool_choice "named", the tool to call as "server/tool"')
    elif tool not in ("", None):
        raise SuiteError("tool", 'is only for tool_choice "named"')
    repeats = _repeats(document.get("repeats", 1), "repeats")
    cases = _cases(document.get("cases"))
    definition = SuiteDefinition(
        name=name,
        models=models,
        paradigms=paradigms,
        servers=servers,
        variants=variants,
        cases=cases,
        tool_choice=str(tool_choice),
        tool=str(tool or ""),
        repeats=repeats,
    )
    if len(definition.cells) > MAX_CELLS:
        raise SuiteError(
            "", f"{len(definition.cells)} cells (models × paradigms × variants): at most {MAX_CELLS}"
        )
    return definition


# --- Reading the text -------------------------------------------------------------------------


class _Loader(yaml.SafeLoader):
    """YAML's safe loader, with no aliases: an alias bomb would expand to gigabytes."""

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise yaml.composer.ComposerError(
                None, None, "aliases (*name) are not allowed in a suite", event.start_mark
            )
        return super().compose_node(parent, index)


def _load(text: str | bytes) -> object:
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SuiteError("", f"the file is not UTF-8 text (byte {exc.start})") from None
    text = text.removeprefix("\ufeff")
    if len(text) > MAX_SUITE_CHARS:
        raise SuiteError("", f"the file is {len(text)} characters long: at most {MAX_SUITE_CHARS}")
    if not text.strip():
        raise SuiteError("", "the file is empty")
    if text.lstrip().startswith("{"):
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise SuiteError(
                "", f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
            ) from None
        except RecursionError:
            raise SuiteError("", f"nested deeper than {MAX_NESTING} levels") from None
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 — a SafeLoader without aliases
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        raise SuiteError("", f"not valid YAML: {exc.problem or exc.context}{where}") from None
    except yaml.YAMLError as exc:
        raise SuiteError("", f"not valid YAML: {exc}") from None
    except RecursionError:
        raise SuiteError("", f"nested deeper than {MAX_NESTING} levels") from None


# --- Fields -----------------------------------------------------------------------------------


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _path(parent: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{parent}[{key}]"
    return f"{parent}.{key}" if parent else key


def _depth_check(value: object, path: str, depth: int) -> None:
    if depth > MAX_NESTING:
        raise SuiteError(path, f"nested deeper than {MAX_NESTING} levels")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise SuiteError(path, f"keys must be strings, not {_kind(key)} ({key!r})")
            _storable_check(key, path)
            _depth_check(item, _path(path, key), depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _depth_check(item, _path(path, index), depth + 1)
    elif isinstance(value, str):
        _storable_check(value, path)
    elif not (value is None or isinstance(value, (str, int, float, bool))):
        raise SuiteError(path, f"{_kind(value)} is not a JSON value (write it as a string)")


def _storable_check(text: str, path: str) -> None:
    """A NUL or a lone surrogate (``\\u0000``, ``\\ud800`` in JSON) is no text a database stores."""
    found = _UNSTORABLE.search(text)
    if found:
        what = "a NUL character" if found.group() == "\x00" else "a lone surrogate"
        raise SuiteError(path, f"contains {what} (at character {found.start()}), which cannot be stored")


def _no_unknown_keys(data: Mapping[str, object], allowed: frozenset[str], path: str) -> None:
    for key in data:
        if key not in allowed:
            raise SuiteError(_path(path, key), f"unknown field; allowed: {', '.join(sorted(allowed))}")


def _text(data: Mapping[str, object], key: str, path: str, *, required: bool = True) -> str:
    value = data.get(key)
    where = _path(path, key)
    if value is None and not required:
        return ""
    if value is None:
        raise SuiteError(where, "is required")
    if not isinstance(value, str) or not value.strip():
        raise SuiteError(where, f"must be a non-empty string, not {_kind(value)}")
    return value


def _names(data: Mapping[str, object], key: str, path: str, *, allow_empty: bool = False) -> tuple[str, ...]:
    where = _path(path, key)
    value = data.get(key)
    if value is None:
        if allow_empty:
            return ()
        raise SuiteError(where, "is required")
    if not isinstance(value, list):
        raise SuiteError(where, f"must be a list of names, not {_kind(value)}")
    if not value and not allow_empty:
        raise SuiteError(where, "must name at least one")
    for index, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            raise SuiteError(_path(where, index), f"must be a non-empty string, not {_kind(item)}")
    if len(set(value)) != len(value):
        raise SuiteError(where, "names one twice")
    return tuple(value)


def _variants(value: object, servers: tuple[str, ...]) -> dict[str, dict[str, ToolOverride]]:
    if value is None:
        return {"default": {}}
    if not isinstance(value, dict):
        raise SuiteError("variants", f"must be an object of named variants, not {_kind(value)}")
    if not value:
        raise SuiteError("variants", "must name at least one variant (or be left out)")
    variants: dict[str, dict[str, ToolOverride]] = {}
    for name, overrides in value.items():
        where = _path("variants", name)
        if not _VARIANT_NAME.match(name):
            raise SuiteError(where, "a variant's name is 1-80 letters, digits, '_', '-' or '.'")
        if not isinstance(overrides, dict):
            raise SuiteError(
                where, f'must be an object keyed "server/tool" (or {{}}), not {_kind(overrides)}'
            )
        variants[name] = {}
        for tool, override in overrides.items():
            tool_where = _path(where, tool)
            if not _TOOL_NAME.match(tool):
                raise SuiteError(tool_where, 'a tool is named "server/tool"')
            if servers and tool.split("/", 1)[0] not in servers:
                raise SuiteError(
                    tool_where, f"server {tool.split('/', 1)[0]!r} is not among the suite's servers"
                )
            variants[name][tool] = _override(override, tool_where)
    return variants


def _override(value: object, path: str) -> ToolOverride:
    if not isinstance(value, dict):
        raise SuiteError(path, f"must be an object with description and/or parameters, not {_kind(value)}")
    _no_unknown_keys(value, _OVERRIDE_KEYS, path)
    description = value.get("description")
    if description is not None and not isinstance(description, str):
        raise SuiteError(_path(path, "description"), f"must be a string, not {_kind(description)}")
    parameters = value.get("parameters", {})
    if not isinstance(parameters, dict):
        raise SuiteError(
            _path(path, "parameters"), f"must map parameter names to descriptions, not {_kind(parameters)}"
        )
    for name, text in parameters.items():
        if not isinstance(text, str):
            raise SuiteError(_path(_path(path, "parameters"), name), f"must be a string, not {_kind(text)}")
    if description is None and not parameters:
        raise SuiteError(path, "overrides nothing: give a description and/or parameters")
    return ToolOverride(description=description, parameters=dict(parameters))


def _repeats(value: object, path: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_REPEATS:
        raise SuiteError(path, f"must be a whole number from 1 to {MAX_REPEATS}, not {value!r}")
    return value


def _cases(value: object) -> tuple[Case, ...]:
    if value is None:
        raise SuiteError("cases", "is required")
    if not isinstance(value, list):
        raise SuiteError("cases", f"must be a list of cases, not {_kind(value)}")
    if not value:
        raise SuiteError("cases", "must hold at least one case")
    if len(value) > MAX_CASES:
        raise SuiteError("cases", f"{len(value)} cases: at most {MAX_CASES}")
    return tuple(_case(item, f"cases[{index}]") for index, item in enumerate(value))


def _case(value: object, path: str) -> Case:
    if not isinstance(value, dict):
        raise SuiteError(path, f"a case is an object with question and expect, not {_kind(value)}")
    _no_unknown_keys(value, _CASE_KEYS, path)
    question = _text(value, "question", path)
    expect = value.get("expect")
    where = _path(path, "expect")
    if expect is None:
        raise SuiteError(where, "is required: a list of expected calls, or [] for no tool call")
    if not isinstance(expect, list):
        raise SuiteError(where, f"must be a list of expected calls (or []), not {_kind(expect)}")
    calls = tuple(_expected_call(item, _path(where, index)) for index, item in enumerate(expect))
    answer = value.get("answer_contains")
    if answer is not None and (not isinstance(answer, str) or not answer):
        raise SuiteError(_path(path, "answer_contains"), f"must be a non-empty string, not {_kind(answer)}")
    # ``in_order`` (``ordered``, its first name, is still read).
    order_key = "in_order" if "in_order" in value else "ordered"
    ordered = value.get(order_key, False)
    if not isinstance(ordered, bool):
        raise SuiteError(_path(path, order_key), f"must be true or false, not {_kind(ordered)}")
    if ordered and len(calls) < 2:
        raise SuiteError(_path(path, order_key), "needs at least two expected calls to put in order")
    count = value.get("call_count")
    if count is not None and (
        not isinstance(count, int) or isinstance(count, bool) or not len(calls) <= count <= MAX_CASES
    ):
        raise SuiteError(
            _path(path, "call_count"),
            f"must be a whole number of calls, at least the {len(calls)} expected, not {count!r}",
        )
    repeats = value.get("repeats")
    judge = value.get("judge")
    return Case(
        question=question,
        expect=calls,
        answer_contains=answer,
        ordered=ordered,
        call_count=count,
        repeats=None if repeats is None else _repeats(repeats, _path(path, "repeats")),
        judge=None if judge is None else _judge(judge, _path(path, "judge")),
    )


def _judge(value: object, path: str) -> Judge:
    """A case's ``judge``: ``{profile, rubric, pass_when?}`` (whether the profile exists, and
    is no demo, is checked with the suite's models: ``evals.services.suite_check``).

    Raises:
        SuiteError: naming the field.
    """
    if not isinstance(value, dict):
        raise SuiteError(path, f"must be an object with profile and rubric, not {_kind(value)}")
    _no_unknown_keys(value, _JUDGE_KEYS, path)
    profile = _text(value, "profile", path)
    rubric = _text(value, "rubric", path)
    if len(rubric) > MAX_RUBRIC_CHARS:
        raise SuiteError(_path(path, "rubric"), f"{len(rubric)} characters long: at most {MAX_RUBRIC_CHARS}")
    where = _path(path, "pass_when")
    pass_when = value.get("pass_when", dict(DEFAULT_PASS_WHEN))
    low, high = JUDGE_SCORES
    if isinstance(pass_when, dict):
        if not is_matcher(pass_when) or next(iter(pass_when)) not in _PASS_WHEN_MATCHERS:
            raise SuiteError(
                where,
                f"must be a score ({low}-{high}) or a matcher on it: {{range: [min, max]}}, "
                "{oneOf: [...]} or {exact: n}",
            )
        matcher_check(pass_when, where)
    elif isinstance(pass_when, bool) or not isinstance(pass_when, int) or not low <= pass_when <= high:
        raise SuiteError(
            where, f"must be a whole score from {low} to {high} or a matcher on it, not {pass_when!r}"
        )
    return Judge(profile=profile, rubric=rubric, pass_when=pass_when)


def _expected_call(value: object, path: str) -> ExpectedCall:
    if not isinstance(value, dict):
        raise SuiteError(path, f'an expected call is an object with "tool", not {_kind(value)}')
    _no_unknown_keys(value, _CALL_KEYS, path)
    tool = _text(value, "tool", path)
    if not _TOOL_NAME.match(tool):
        raise SuiteError(_path(path, "tool"), f'must name the tool as "server/tool", not {tool!r}')
    match = value.get("match", "subset")
    if match not in ARGUMENT_MATCHES:
        raise SuiteError(_path(path, "match"), f"must be one of {', '.join(ARGUMENT_MATCHES)}, not {match!r}")
    arguments = value.get("arguments")
    if arguments is None:
        if match == "exact":
            raise SuiteError(_path(path, "match"), "exact needs the arguments to match (use {} for none)")
        return ExpectedCall(tool=tool)
    if not isinstance(arguments, dict):
        raise SuiteError(
            _path(path, "arguments"), f"must be an object of argument values, not {_kind(arguments)}"
        )
    for name, expected in arguments.items():
        matcher_check(expected, _path(_path(path, "arguments"), name))
    return ExpectedCall(tool=tool, arguments=arguments, match=str(match))


def is_matcher(value: JSONValue) -> bool:
    """A one-key object whose key is a matcher's (``exact``, ``oneOf``, ``regex``, ``range``,
    ``schema``)."""
    return isinstance(value, dict) and len(value) == 1 and next(iter(value)) in MATCHER_KEYS


def matcher_check(value: object, path: str) -> None:
    """Check an expected argument value: a literal, a matcher, or an object of them.

    Raises:
        SuiteError: a matcher with a bad operand (a regex that does not compile, a range that is
            not two numbers low ≤ high, a oneOf that is not a non-empty list, a schema that is no
            valid JSON Schema).
    """
    if not isinstance(value, dict):
        return
    if not is_matcher(value):
        for key, item in value.items():
            matcher_check(item, _path(path, key))
        return
    key, operand = next(iter(value.items()))
    where = _path(path, key)
    if key == "oneOf" and (not isinstance(operand, list) or not operand):
        raise SuiteError(where, "must be a non-empty list of allowed values")
    if key == "regex":
        if not isinstance(operand, str):
            raise SuiteError(where, f"must be a regular expression as a string, not {_kind(operand)}")
        try:
            regex.compile(operand)  # the package grading searches with (grading.regex_search)
        except regex.error as exc:
            raise SuiteError(where, f"not a valid regular expression: {exc}") from None
    if key == "schema":
        _schema_check(operand, where)
    if key == "range":
        bounds = [
            bound
            for bound in (operand if isinstance(operand, list) else [])
            if isinstance(bound, (int, float)) and not isinstance(bound, bool)
        ]
        if not isinstance(operand, list) or len(operand) != 2 or len(bounds) != 2 or bounds[0] > bounds[1]:
            raise SuiteError(where, "must be [min, max]: two numbers, min ≤ max")


def _schema_check(schema: object, path: str) -> None:
    """A ``schema`` matcher's operand is a valid JSON Schema (draft 2020-12, the one grading
    validates with) without ``patternProperties`` (its patterns would be searched with Python's
    ``re``, which has no time limit; grading searches ``pattern`` with one).

    Raises:
        SuiteError: naming the field.
    """
    if not isinstance(schema, (dict, bool)):
        raise SuiteError(path, f"must be a JSON Schema (an object), not {_kind(schema)}")
    stack: list[object] = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if "patternProperties" in node:
                raise SuiteError(
                    path,
                    "patternProperties is not supported: jsonschema searches its patterns with no "
                    "time limit (use pattern, or the regex matcher, on the values)",
                )
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise SuiteError(path, f"not a valid JSON Schema: {exc.message}") from None
