"""API structured output: the provider constrains the reply to a JSON Schema (``response_format``).

The schema is a union — "call tool X with these arguments" for each offered tool, or "final
answer" — under one root property (strict mode wants an object at the root, docs/wire-formats.md §2)::

    {"decision": {"action": "call_tool", "tool": "NAME", "arguments": {...}}}
    {"decision": {"action": "final_answer", "answer": "..."}}

Strict mode accepts only a subset of JSON Schema, so each tool's ``inputSchema`` goes through
:func:`strictify` first; what that changes is reported on the step. One call per decision: the
union has one ``tool`` slot, so a model that wants two tools calls them one after the other.

tool_choice: ``none`` leaves only the answer branch, ``named`` only that tool's branch,
``required`` only tool branches (no answer branch) — the constraint itself forces the call.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from jsonschema.exceptions import best_match
from jsonschema.validators import Draft202012Validator

from conversations.loop.llm import Message, ToolCall, ToolChoice, ToolDef
from conversations.loop.paradigms.base import Decision, DecisionContext, offered, strict_json
from conversations.loop.paradigms.prompting import (
    Attempt,
    ask_with_retry,
    call_ids,
    call_required,
    json_results,
    must_call,
    never,
    one_line,
    render_history,
    repaired_object,
    shown_arguments,
    target,
    unfence,
)
from conversations.loop.providers.base import ModelReply, ModelRequest
from conversations.typealias import JSONDict, JSONValue

SCHEMA_NAME = "tool_decision"
CALL = "call_tool"
ANSWER = "final_answer"
# The branch key used when a tool's arguments cannot be described strictly (see strictify).
ENCODED_ARGUMENTS = "arguments_json"

# Accepted by strict mode (docs/wire-formats.md §2); everything else is removed.
_STRUCTURAL = frozenset(
    {"type", "description", "enum", "anyOf", "$ref", "$defs", "properties", "required", "items"}
)
_CONSTRAINTS = frozenset(
    {
        "pattern",
        "format",
        "multipleOf",
        "maximum",
        "exclusiveMaximum",
        "minimum",
        "exclusiveMinimum",
        "minItems",
        "maxItems",
    }
)
# Annotations with no effect on what is valid: dropped without a note.
_COSMETIC = frozenset(
    {
        "title",
        "$schema",
        "$id",
        "$comment",
        "examples",
        "readOnly",
        "writeOnly",
        "deprecated",
        "contentMediaType",
    }
)
# Keywords whose meaning an object-level rewrite cannot keep: the schema is not strict-able.
_FREE_FORM = frozenset({"patternProperties", "unevaluatedProperties", "propertyNames", "prefixItems"})
_DEFS = ("$defs", "definitions")


class _NotStrict(Exception):
    """Part of a schema has no strict equivalent; the message says where and why."""


def strictify(schema: JSONDict) -> tuple[JSONDict, list[str]]:
    """A strict-mode-compatible version of a tool's ``inputSchema``, and what was changed.

    Every object gets ``additionalProperties: false`` and lists all its properties as required;
    an optional property becomes nullable (``null`` means "not given" — :func:`drop_nulls` takes
    it out again); ``oneOf`` becomes ``anyOf``; a single ``allOf`` is merged; ``const`` becomes a
    one-value ``enum``; ``default`` moves into the description; keywords outside the strict
    subset (``minLength``, ``not``, ``if``/``then``/``else``, ``dependentRequired``, ...) are
    removed — the loop still validates the arguments against the original schema.

    When a part cannot be described strictly (a free-form object, a value of any type, an
    array without ``items``), the whole schema is replaced by a string that must hold the
    arguments JSON-encoded (a schema with ``"type": "string"``, used under
    :data:`ENCODED_ARGUMENTS`); the original schema is quoted in its description.

    Never raises. Each change is described in the returned list, for the step's diagnostics.
    """
    notes: list[str] = []
    try:
        strict = _Strictifier(schema, notes).root()
    except _NotStrict as exc:
        reason = str(exc)
    except RecursionError:
        reason = "the schema nests too deeply"
    else:
        return strict, notes
    return encoded_arguments_schema(schema), [
        f"{reason}, which strict mode cannot describe: the arguments travel as one JSON-encoded "
        f"string ('{ENCODED_ARGUMENTS}'), parsed after the reply"
    ]


def encoded_arguments_schema(schema: JSONDict) -> JSONDict:
    """The relaxation: the arguments as a JSON-encoded string, the real schema in the description."""
    return {
        "type": "string",
        "description": "The arguments as a JSON-encoded object that matches this JSON Schema: "
        + json.dumps(schema, ensure_ascii=False),
    }


class _Strictifier:
    def __init__(self, schema: JSONDict, notes: list[str]) -> None:
        self.original = schema
        self.notes = notes

    def root(self) -> JSONDict:
        strict = self.node(self.original, "")
        if strict.get("type") != "object":
            raise _NotStrict("the arguments are not described as an object")
        return strict

    def node(self, schema: JSONValue, path: str) -> JSONDict:
        """``schema`` made strict; ``path`` names it in notes ("" is the arguments object)."""
        if not isinstance(schema, dict):
            raise _NotStrict(f"{_where(path)} accepts any value")
        schema = self._merged(schema, path)
        if "$ref" in schema:
            return self._reference(schema, path)
        result: JSONDict = {}
        dropped: list[str] = []
        for key, value in schema.items():
            if key in _FREE_FORM:
                raise _NotStrict(f"{_where(path)} uses '{key}'")
            if key in _STRUCTURAL or key in _CONSTRAINTS:
                result[key] = copy.deepcopy(value)
            elif key == "const":
                result["enum"] = [copy.deepcopy(value)]
            elif key == "oneOf":
                result["anyOf"] = copy.deepcopy(value)
                self.notes.append(f"{_where(path)}: oneOf became anyOf")
            elif key not in _COSMETIC and key not in (*_DEFS, "default", "additionalProperties"):
                dropped.append(key)
        if dropped:
            self.notes.append(f"{_where(path)}: removed {', '.join(sorted(dropped))}")
        if "default" in schema:
            # Strict mode has no defaults; the model still needs to know what leaving it out means.
            default = json.dumps(schema["default"], ensure_ascii=False)
            described = str(result.get("description", "")).rstrip()
            result["description"] = f"{described} (default: {default})".strip()
            self.notes.append(f"{_where(path)}: default {default} moved into the description")
        self._definitions(schema, result, path)
        self._typed(result, path)
        if "anyOf" in result:
            branches = result["anyOf"]
            if not isinstance(branches, list) or not branches:
                raise _NotStrict(f"{_where(path)} has an empty anyOf")
            result["anyOf"] = [self.node(branch, f"{path}|{index}") for index, branch in enumerate(branches)]
        if _has_type(result, "object"):
            self._object(schema, result, path)
        if _has_type(result, "array"):
            if "items" not in schema:
                raise _NotStrict(f"{_where(path)} is an array of any values")
            result["items"] = self.node(schema["items"], f"{path}[]")
        return result

    def _merged(self, schema: JSONDict, path: str) -> JSONDict:
        """``allOf`` folded into the schema: properties and required lists are united."""
        parts = schema.get("allOf")
        if not isinstance(parts, list):
            return schema
        merged: JSONDict = {key: value for key, value in schema.items() if key != "allOf"}
        for part in parts:
            if not isinstance(part, dict):
                raise _NotStrict(f"{_where(path)} has an allOf member that is not a schema")
            part = self._resolved(part, path)
            for key, value in part.items():
                if key == "properties" and isinstance(value, dict):
                    properties = merged.setdefault("properties", {})
                    if isinstance(properties, dict):
                        properties.update(value)
                elif key == "required" and isinstance(value, list):
                    required = merged.setdefault("required", [])
                    if isinstance(required, list):
                        required.extend(name for name in value if name not in required)
                else:
                    merged.setdefault(key, value)
        self.notes.append(f"{_where(path)}: allOf merged into one schema")
        return merged

    def _resolved(self, schema: JSONDict, path: str) -> JSONDict:
        target = _definition(self.original, schema.get("$ref"))
        if "$ref" in schema and target is None:
            raise _NotStrict(f"{_where(path)} refers to {schema['$ref']!r}, which is not a local definition")
        return target if target is not None else schema

    def _reference(self, schema: JSONDict, path: str) -> JSONDict:
        reference = schema["$ref"]
        if _definition(self.original, reference) is None or not isinstance(reference, str):
            raise _NotStrict(f"{_where(path)} refers to {reference!r}, which is not a local definition")
        # Siblings of $ref are not part of the strict subset; the definition carries the meaning.
        return {"$ref": "#/$defs/" + reference.rsplit("/", 1)[-1]}

    def _definitions(self, schema: JSONDict, result: JSONDict, path: str) -> None:
        definitions: JSONDict = {}
        for key in _DEFS:
            found = schema.get(key)
            if isinstance(found, dict):
                for name, definition in found.items():
                    definitions[name] = self.node(definition, f"$defs.{name}")
        if definitions:
            result["$defs"] = definitions

    def _typed(self, result: JSONDict, path: str) -> None:
        """Strict mode needs a type (or an anyOf) on every schema; infer it when it is clear."""
        if "type" in result or "anyOf" in result:
            return
        enum = result.get("enum")
        if "properties" in result:
            result["type"] = "object"
        elif "items" in result:
            result["type"] = "array"
        elif isinstance(enum, list):
            result["type"] = _enum_types(enum)
        else:
            raise _NotStrict(f"{_where(path)} accepts a value of any type")

    def _object(self, schema: JSONDict, result: JSONDict, path: str) -> None:
        properties = schema.get("properties")
        extra = schema.get("additionalProperties", None)
        if not isinstance(properties, dict) or (extra is not None and extra is not False):
            raise _NotStrict(f"{_where(path)} is a free-form object (keys not listed in advance)")
        required = schema.get("required")
        required_names = (
            [name for name in required if isinstance(name, str)] if isinstance(required, list) else []
        )
        strict_properties: JSONDict = {}
        for name, property_schema in properties.items():
            inner = f"{path}.{name}" if path else name
            strict = self.node(property_schema, inner)
            if name not in required_names:
                strict = _nullable(strict)
                self.notes.append(f"{inner}: optional, so nullable (null = not given)")
            strict_properties[name] = strict
        result["properties"] = strict_properties
        result["required"] = list(strict_properties)
        result["additionalProperties"] = False


def _where(path: str) -> str:
    return path or "the arguments"


def _definition(root: JSONDict, reference: JSONValue) -> JSONDict | None:
    """The local definition ``#/$defs/NAME`` (or ``#/definitions/NAME``) points at."""
    if not isinstance(reference, str):
        return None
    for key in _DEFS:
        prefix = f"#/{key}/"
        if reference.startswith(prefix):
            definitions = root.get(key)
            found = definitions.get(reference[len(prefix) :]) if isinstance(definitions, dict) else None
            return found if isinstance(found, dict) else None
    return None


def _has_type(schema: JSONDict, name: str) -> bool:
    declared = schema.get("type")
    return declared == name or (isinstance(declared, list) and name in declared)


def _enum_types(values: list[JSONValue]) -> JSONValue:
    names: list[JSONValue] = []
    for value in values:
        if value is None:
            name = "null"
        elif isinstance(value, bool):
            name = "boolean"
        elif isinstance(value, int):
            name = "integer"
        elif isinstance(value, float):
            name = "number"
        elif isinstance(value, str):
            name = "string"
        else:
            raise _NotStrict("an enum holds arrays or objects")
        if name not in names:
            names.append(name)
    return names[0] if len(names) == 1 else names


def _nullable(schema: JSONDict) -> JSONDict:
    """``schema`` that also accepts null (an enum must list null itself to accept it)."""
    if _allows_null(schema):
        return schema
    if "type" not in schema:
        branches = schema.get("anyOf")
        if isinstance(branches, list):
            return {**schema, "anyOf": [*branches, {"type": "null"}]}
        return {"anyOf": [schema, {"type": "null"}]}
    declared = schema["type"]
    types = list(declared) if isinstance(declared, list) else [declared]
    result = {**schema, "type": [*types, "null"]}
    enum = schema.get("enum")
    if isinstance(enum, list):
        result["enum"] = [*enum, None]
    return result


def _allows_null(schema: JSONValue) -> bool:
    if not isinstance(schema, dict):
        return True
    declared = schema.get("type")
    if declared == "null" or (isinstance(declared, list) and "null" in declared):
        enum = schema.get("enum")
        return not isinstance(enum, list) or None in enum
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        if isinstance(branches, list) and any(_allows_null(branch) for branch in branches):
            return True
    return False


def drop_nulls(value: JSONValue, schema: JSONDict) -> JSONValue:
    """``value`` without the nulls strict mode made the model write for optional properties.

    A null is dropped where the original ``schema`` makes the property optional and does not
    itself accept null, so the arguments validate against the tool's own schema.
    """
    return _Nulls(schema).clean(value, schema)


class _Nulls:
    def __init__(self, root: JSONDict) -> None:
        self.root = root

    def clean(self, value: JSONValue, schema: JSONValue) -> JSONValue:
        if not isinstance(schema, dict):
            return value
        schema = _definition(self.root, schema.get("$ref")) or schema
        if isinstance(value, list):
            return [self.clean(item, schema.get("items")) for item in value]
        if not isinstance(value, dict):
            return value
        schema = self._object_schema(schema)
        properties = schema.get("properties")
        properties = properties if isinstance(properties, dict) else {}
        required = schema.get("required")
        required = required if isinstance(required, list) else []
        cleaned: JSONDict = {}
        for key, item in value.items():
            declared = properties.get(key)
            if item is None and key not in required and declared is not None and not _allows_null(declared):
                continue
            cleaned[key] = self.clean(item, declared)
        return cleaned

    def _object_schema(self, schema: JSONDict) -> JSONDict:
        """For a union, the first branch that describes an object (the best guess we have)."""
        if "properties" in schema:
            return schema
        for key in ("anyOf", "oneOf", "allOf"):
            branches = schema.get(key)
            for branch in branches if isinstance(branches, list) else []:
                if isinstance(branch, dict):
                    branch = _definition(self.root, branch.get("$ref")) or branch
                    if "properties" in branch:
                        return branch
        return schema


# --- The response_format ----------------------------------------------------------------------


@dataclass
class DecisionSchema:
    """The ``response_format`` for one decision, and what building it had to relax."""

    response_format: JSONDict
    encoded: frozenset[str] = frozenset()  # tools whose arguments come as a JSON string
    notes: list[str] = field(default_factory=list)
    # Each tool's part of the schema as the request carries it: its branch of the union and the
    # definitions hoisted to the root for it, by provider name.
    parts: dict[str, JSONDict] = field(default_factory=dict)


def decision_schema(tools: Sequence[ToolDef], *, allow_answer: bool) -> DecisionSchema:
    """The strict union of one branch per tool and (if allowed) the final-answer branch."""
    branches: list[JSONValue] = []
    definitions: JSONDict = {}
    encoded: set[str] = set()
    notes: list[str] = []
    parts: dict[str, JSONDict] = {}
    for tool in tools:
        arguments, changes = strictify(tool.input_schema)
        if changes:
            notes.append(f"{tool.provider_name} in strict form: {'; '.join(changes)}")
        key = "arguments" if arguments.get("type") == "object" else ENCODED_ARGUMENTS
        own: JSONDict = {}
        if key == ENCODED_ARGUMENTS:
            encoded.add(tool.provider_name)
        else:
            arguments = _hoisted(arguments, tool.provider_name, own)
            definitions.update(own)
        branch = _branch(CALL, {"tool": {"type": "string", "enum": [tool.provider_name]}, key: arguments})
        if tool.description:
            branch["description"] = tool.description
        branches.append(branch)
        parts[tool.provider_name] = {"branch": branch, "$defs": own} if own else {"branch": branch}
    if allow_answer or not tools:
        branches.append(_branch(ANSWER, {"answer": {"type": "string"}}))
    root: JSONDict = {
        "type": "object",
        "properties": {"decision": {"anyOf": branches}},
        "required": ["decision"],
        "additionalProperties": False,
    }
    if definitions:
        root["$defs"] = definitions
    if any("removed" in note for note in notes):
        notes.append(
            "removed keywords still apply: the loop validates the arguments against each tool's own schema"
        )
    response_format: JSONDict = {
        "type": "json_schema",
        "json_schema": {"name": SCHEMA_NAME, "strict": True, "schema": root},
    }
    return DecisionSchema(response_format, frozenset(encoded), notes, parts)


def _branch(action: str, fields: JSONDict) -> JSONDict:
    properties: JSONDict = {"action": {"type": "string", "enum": [action]}, **fields}
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def _hoisted(schema: JSONDict, prefix: str, definitions: JSONDict) -> JSONDict:
    """``schema`` with its ``$defs`` moved to the response root, renamed per tool.

    References are resolved from the root of the whole response schema, so each tool's
    definitions go there, prefixed so two tools' ``Item`` cannot collide.
    """
    local = schema.pop("$defs", None)
    if not isinstance(local, dict):
        return schema
    for name, definition in local.items():
        definitions[f"{prefix}__{name}"] = _renamed(definition, prefix)
    renamed = _renamed(schema, prefix)
    return renamed if isinstance(renamed, dict) else schema


def _renamed(value: JSONValue, prefix: str) -> JSONValue:
    if isinstance(value, list):
        return [_renamed(item, prefix) for item in value]
    if not isinstance(value, dict):
        return value
    result: JSONDict = {}
    for key, item in value.items():
        if key == "$ref" and isinstance(item, str) and item.startswith("#/$defs/"):
            result[key] = f"#/$defs/{prefix}__{item.removeprefix('#/$defs/')}"
        elif key == "$defs" and isinstance(item, dict):
            # Nested definitions were flattened by strictify's naming; keep them addressable.
            result[key] = {name: _renamed(definition, prefix) for name, definition in item.items()}
        else:
            result[key] = _renamed(item, prefix)
    return result


# --- The paradigm -----------------------------------------------------------------------------


class StructuredParadigm:
    """Tools as branches of a strict ``response_format``; the reply is one JSON decision."""

    key: ClassVar[str] = "structured"
    label: ClassVar[str] = "API structured output (json_schema)"
    native_tools: ClassVar[bool] = False

    def decide(self, context: DecisionContext) -> Decision:
        tools = offered(context.tools, context.choice)
        forced = must_call(context.choice, tools)
        schema = decision_schema(tools, allow_answer=not forced)
        request = ModelRequest(
            messages=[
                Message(role="system", content=system_prompt(tools, context.choice)),
                *render_history(context.messages, own=self.key, calls=_calls_text, results=json_results),
            ],
            response_format=schema.response_format,
            tool_texts=definition_texts(tools, schema),
        )
        ids = call_ids(context.messages)
        reader = _Reader(tools, schema, ids)
        correction = (
            f'Correction: a tool call is required. Reply with a decision whose action is "{CALL}" and '
            f"that calls {target(context.choice, tools)}."
        )
        attempt = ask_with_retry(
            context,
            request,
            title="model call",
            read=reader.read,
            retry=call_required(correction) if forced else never,
            notes=[*schema.notes, *_choice_notes(context.choice, tools)],
        )
        content = attempt.reply.text or ""
        if attempt.calls:
            assistant = Message(role="assistant", content=content, tool_calls=attempt.calls, format=self.key)
        else:
            # A final answer is kept as its text, not the JSON envelope, so any paradigm (or a later
            # turn) can replay it as plain prose.
            assistant = Message(role="assistant", content=attempt.text)
        return Decision(assistant, list(attempt.calls), attempt.text, list(attempt.diagnostics))


def _listed(tool: ToolDef) -> str:
    """A tool's entry in the system prompt's list of tools."""
    return f"{tool.provider_name} ({one_line(tool.description)})"


def definition_texts(tools: Sequence[ToolDef], schema: DecisionSchema) -> dict[str, str]:
    """What the request carries of each tool (``ModelRequest.tool_texts``, so each tool has a
    count and a cost of its own, docs/teaching.md §6): its entry in the system prompt's list and
    its part of the ``response_format`` schema (its branch of the union, and the definitions
    hoisted for it), each written as the request writes it."""
    texts: dict[str, str] = {}
    for tool in tools:
        part = schema.parts.get(tool.provider_name)
        if part is None:
            continue
        pieces = [_listed(tool), json.dumps(part["branch"], ensure_ascii=False)]
        if "$defs" in part:
            pieces.append(json.dumps(part["$defs"], ensure_ascii=False))
        texts[tool.provider_name] = "\n".join(pieces)
    return texts


def system_prompt(tools: Sequence[ToolDef], choice: ToolChoice) -> str:
    """Why the reply is JSON, and what each action means; the schema itself carries the tools."""
    lines = [
        'Your reply is constrained by a JSON Schema (structured output) to one object {"decision": ...}.',
    ]
    if tools:
        lines += [
            f'- To call a tool: {{"decision": {{"action": "{CALL}", "tool": NAME, "arguments": {{...}}}}}}. '
            "The host runs it and sends the result back in a user message that starts with "
            '"Tool result for NAME (call id ...):". One tool call per reply.',
            "- Arguments you do not need are null.",
            "- Tools: " + "; ".join(_listed(tool) for tool in tools),
        ]
    if choice.mode in {"required", "named"} and tools:
        lines.append("A tool call is required for this reply: final_answer is not available.")
    else:
        lines.append(f'- To answer the user: {{"decision": {{"action": "{ANSWER}", "answer": TEXT}}}}.')
    if not tools:
        lines.append("No tools are available for this reply: answer the user directly.")
    return "\n".join(lines)


def _choice_notes(choice: ToolChoice, tools: Sequence[ToolDef]) -> list[str]:
    if choice.mode == "named" and not tools:
        return [f"tool_choice names {choice.name!r}, which is not offered: only the final answer is allowed"]
    return []


def _calls_text(calls: Sequence[ToolCall]) -> str:
    """Calls from another paradigm's history, in this paradigm's reply shape (one per line)."""
    return "\n".join(
        json.dumps(
            {"decision": {"action": CALL, "tool": call.name, "arguments": shown_arguments(call)}},
            ensure_ascii=False,
        )
        for call in calls
    )


@dataclass
class _Reader:
    """Turns one structured reply into a call or an answer, noting every deviation."""

    tools: Sequence[ToolDef]
    schema: DecisionSchema
    ids: Iterator[str]

    def read(self, reply: ModelReply) -> Attempt:
        text = reply.text or ""
        diagnostics: list[str] = []
        if reply.refusal:
            diagnostics.append(f"the model refused: {reply.refusal}")
            return Attempt(reply, [], reply.refusal, diagnostics)
        value = _loaded(text, diagnostics)
        if value is None:
            return Attempt(reply, [], text, diagnostics)
        diagnostics.extend(_schema_problems(value, self.schema.response_format))
        decision = value.get("decision") if "decision" in value else value
        if decision is not value and not isinstance(decision, dict):
            diagnostics.append("'decision' is not an object: the reply is taken as the answer")
            return Attempt(reply, [], text, diagnostics)
        if decision is value:
            diagnostics.append("the reply has no 'decision' wrapper; read as the decision itself")
        assert isinstance(decision, dict)
        action = decision.get("action")
        if action == CALL or (action is None and "tool" in decision):
            return Attempt(reply, [self._call(decision, diagnostics)], None, diagnostics)
        answer = decision.get("answer")
        if action == ANSWER and isinstance(answer, str):
            return Attempt(reply, [], answer, diagnostics)
        diagnostics.append(
            f"the decision matches neither action (action {action!r}): the reply is taken as the answer"
        )
        return Attempt(reply, [], text, diagnostics)

    def _call(self, decision: JSONDict, diagnostics: list[str]) -> ToolCall:
        name = str(decision.get("tool") or "")
        tool = next((tool for tool in self.tools if tool.provider_name == name), None)
        if tool is None:
            diagnostics.append(f"the decision names {name!r}, which is not one of the offered tools")
        raw: JSONValue = decision.get("arguments")
        if ENCODED_ARGUMENTS in decision:
            raw = decision[ENCODED_ARGUMENTS]
        if isinstance(raw, str):
            call = ToolCall(next(self.ids), name, raw)
            call.arguments = _decoded_arguments(raw, name, diagnostics)
        else:
            call = ToolCall(next(self.ids), name, json.dumps(raw, ensure_ascii=False))
            if isinstance(raw, dict):
                call.arguments = raw
            else:
                diagnostics.append(f"{name}: the arguments are not an object ({type(raw).__name__})")
        if call.arguments is not None and tool is not None:
            cleaned = drop_nulls(call.arguments, tool.input_schema)
            if cleaned != call.arguments:
                dropped = sorted(set(call.arguments) - set(cleaned)) if isinstance(cleaned, dict) else []
                diagnostics.append(
                    f"{name}: nulls for optional arguments left out"
                    + (f" ({', '.join(dropped)})" if dropped else "")
                )
            call.arguments = cleaned if isinstance(cleaned, dict) else call.arguments
        return call


def _loaded(text: str, diagnostics: list[str]) -> JSONDict | None:
    """The reply as a JSON object: parsed, else repaired (cut-off ends, quotes, prose around it)."""
    body, fenced = unfence(text)
    if fenced:
        diagnostics.append("stripped a code fence around the JSON")
    try:
        value: JSONValue = strict_json(body)
    except ValueError as exc:
        repaired = repaired_object(body)
        if not repaired:
            diagnostics.append(f"the reply is not JSON ({exc}): it is taken as the answer")
            return None
        diagnostics.append(f"the reply is not valid JSON ({exc}); read after repair")
        return repaired
    if not isinstance(value, dict):
        diagnostics.append(
            f"the reply is JSON but not an object ({type(value).__name__}): taken as the answer"
        )
        return None
    return value


def _decoded_arguments(raw: str, name: str, diagnostics: list[str]) -> JSONDict | None:
    try:
        value: JSONValue = strict_json(raw)
    except ValueError as exc:
        value = repaired_object(raw)
        if value is None:
            diagnostics.append(f"{name}: '{ENCODED_ARGUMENTS}' is not valid JSON ({exc})")
            return None
        diagnostics.append(f"{name}: '{ENCODED_ARGUMENTS}' is not valid JSON ({exc}); read after repair")
    if not isinstance(value, dict):
        diagnostics.append(f"{name}: '{ENCODED_ARGUMENTS}' does not encode an object")
        return None
    return value


def _schema_problems(value: JSONDict, response_format: JSONDict) -> list[str]:
    """Where the reply breaks the schema (a server that does not enforce strict mode lets it)."""
    wrapper = response_format.get("json_schema")
    schema = wrapper.get("schema") if isinstance(wrapper, dict) else None
    if not isinstance(schema, dict):
        return []
    try:
        # For a failed anyOf the best match is the closest branch's error, not "none of the branches".
        best = best_match(Draft202012Validator(schema).iter_errors(value))
    except Exception as exc:  # noqa: BLE001 — a tool schema the validator cannot use (bad type or pattern)
        return [f"the reply could not be checked against the response schema ({type(exc).__name__}: {exc})"]
    if best is None:
        return []
    where = ".".join(str(part) for part in best.absolute_path)
    return [
        f"the reply does not follow the response schema{f' at {where}' if where else ''}: {best.message[:300]}"
    ]
