"""Which note each field of a recorded body gets: the format a body speaks, the field names in
it (in document order, not walking the tool's or the user's own data) and their notes from
:mod:`inspector.teaching.loading`.

The notes are keyed by the format a body speaks (:data:`FORMATS`): the same name can mean
different things in two formats (``input`` is the conversation in OpenAI Responses and a tool's
arguments in Anthropic Messages), so each format has its own table over a shared one. Within one
format a name can mean different things at two paths (``message`` in a choice is the reply, in an
error its explanation): a note may be given for the member a field is in (the format's ``at``
notes), and a name whose paths get different notes is listed once for each. The values
of some fields are the tool's or the user's own data (a tool's arguments, a JSON Schema): their
inner names belong to no protocol, so they are not walked (:data:`OPAQUE`).

Pure Python: no Django.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from urllib.parse import parse_qsl

from conversations.typealias import JSONValue
from inspector.teaching.loading import Note, notes

# The label prefix of an OAuth flow's HTTP records (``servers.gateway.oauth.RECORD_LABEL_PREFIX``).
OAUTH_LABEL = "oauth:"


@dataclass(frozen=True)
class FieldNote:
    name: str
    note: Note | None
    # Where the field is (the first place with this note), when its name is listed more than once
    # because its note depends on where it is: "in choices", "at the top level". Else empty.
    where: str = ""


# Fields whose value is the tool's or the user's own data (arguments, a JSON Schema, metadata):
# its inner names are not protocol fields, so they are not walked.
OPAQUE: Mapping[str, frozenset[str]] = {
    "openai_chat": frozenset({"parameters", "schema", "metadata", "logit_bias"}),
    "openai_responses": frozenset({"parameters", "schema", "metadata"}),
    "anthropic": frozenset({"input_schema", "input", "schema", "metadata"}),
    "gemini": frozenset(
        {"parameters", "parametersJsonSchema", "args", "response", "responseSchema", "responseJsonSchema"}
    ),
    "mcp": frozenset(
        {
            "inputSchema",
            "outputSchema",
            "arguments",
            "structuredContent",
            "requestedSchema",
            "experimental",
            "schema",
            "metadata",
        }
    ),
}

# Objects whose keys the sender chose (the server's names for its input requests): the keys are
# not fields, so they are not listed; the values are protocol objects and are walked.
KEYED_BY_DATA: Mapping[str, frozenset[str]] = {"mcp": frozenset({"inputRequests", "inputResponses"})}
# A field whose value is the user's own data only beside another one: an elicitation answer's
# ``content`` (beside its ``action``) holds the values the user typed, whereas a tool result's
# ``content`` is protocol blocks.
OPAQUE_BESIDE: Mapping[str, Mapping[str, str]] = {"mcp": {"content": "action"}}


def body_format(*, channel: str, label: str) -> str:
    """The format a recorded body speaks: ``mcp`` for the MCP channel (``oauth`` for the HTTP
    records of an OAuth flow), else the provider format its HTTP path names
    (docs/wire-formats.md §1, §3, §4, §5)."""
    if channel != "llm":
        return "oauth" if label.startswith(OAUTH_LABEL) else "mcp"
    if "/chat/completions" in label:
        return "openai_chat"
    if "/responses" in label:
        return "openai_responses"
    if "/messages" in label:
        return "anthropic"
    if "generateContent" in label or "models/" in label:
        return "gemini"
    return "openai_chat"


def _documents(body: str, *, form: bool = False) -> Iterator[JSONValue]:
    """The JSON documents in a body: the body itself, or each ``data:`` line of an event stream,
    or each line of JSON Lines; with ``form``, a URL-encoded form (an OAuth token request) as an
    object of its fields. Text that is none of these yields nothing."""
    text = body.strip()
    if not text:
        return
    try:
        yield json.loads(text)
        return
    except (ValueError, RecursionError):  # RecursionError: JSON nested thousands deep
        pass
    if form and "=" in text and not text.startswith(("{", "[")) and "\n" not in text:
        try:
            pairs = parse_qsl(text, keep_blank_values=True, strict_parsing=True, max_num_fields=200)
        except ValueError:
            pairs = []
        if pairs:
            yield {name: value for name, value in pairs}
            return
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("data:"):
            line = line[5:].strip()
        if not line.startswith(("{", "[")):
            continue
        try:
            yield json.loads(line)
        except (ValueError, RecursionError):
            continue


@dataclass(frozen=True)
class _Rules:
    """How one format's bodies are walked (:data:`OPAQUE`, :data:`KEYED_BY_DATA`, :data:`OPAQUE_BESIDE`)."""

    opaque: frozenset[str]
    keyed: frozenset[str]
    beside: Mapping[str, str]


# A member to walk: its name (None for a document or a list's item), its value, whether the value
# is data by :data:`OPAQUE_BESIDE`, and the name of the member it is in ("" at the top).
_Entry = tuple[str | None, JSONValue, bool, str]


def _members(value: Mapping[str, JSONValue], rules: _Rules, parent: str) -> Iterator[_Entry]:
    """An object's members; each flagged when its value is data by :data:`OPAQUE_BESIDE`."""
    data = {name for name, sibling in rules.beside.items() if name in value and sibling in value}
    return ((key, item, key in data, parent) for key, item in value.items())


def _items(values: Iterable[JSONValue], parent: str) -> Iterator[_Entry]:
    """A list's items (or a :data:`KEYED_BY_DATA` object's values), in the member ``parent``."""
    return ((None, item, False, parent) for item in values)


def _walk(value: JSONValue, rules: _Rules, seen: dict[tuple[str, str], None]) -> None:
    """Every key in ``value`` with the name of the member it is in (lists are transparent), in
    document order (depth first). A loop over its own stack of iterators, so a body nested as
    deep as a JSON parser allows (untrusted) cannot exhaust Python's."""
    stack: list[Iterator[_Entry]] = [_items([value], "")]
    while stack:
        entry = next(stack[-1], None)
        if entry is None:
            stack.pop()
            continue
        key, current, data, parent = entry
        if key is not None:
            seen.setdefault((key, parent), None)
            if data or key in rules.opaque:
                continue
            parent = key
        if isinstance(current, dict):
            if key in rules.keyed:
                stack.append(_items(current.values(), parent))
            else:
                stack.append(_members(current, rules, parent))
        elif isinstance(current, list):
            stack.append(_items(current, parent))


def _fields(body: str, fmt: str) -> list[tuple[str, str]]:
    """Each field of ``body`` with the name of the member it is in, once per pair, in order of
    first appearance (:func:`field_names`)."""
    seen: dict[tuple[str, str], None] = {}
    rules = _Rules(
        OPAQUE.get(fmt, frozenset()), KEYED_BY_DATA.get(fmt, frozenset()), OPAQUE_BESIDE.get(fmt, {})
    )
    for document in _documents(body, form=fmt == "oauth"):
        _walk(document, rules, seen)
    return list(seen)


def field_names(body: str, fmt: str) -> list[str]:
    """Every field name in ``body`` (a JSON body, an event stream, or an OAuth form), in order of
    first appearance, not looking inside :data:`OPAQUE` values nor listing the keys of
    :data:`KEYED_BY_DATA` objects."""
    return list(dict.fromkeys(name for name, _ in _fields(body, fmt)))


def note_for(name: str, fmt: str, parent: str = "") -> Note | None:
    """The note of the field ``name`` of ``fmt``; in the member ``parent``, the note for that
    place when the format has one (its ``at`` notes), else the name's."""
    shipped = notes()
    if parent:
        placed = shipped.at.get(fmt, {}).get(parent, {}).get(name)
        if placed is not None:
            return placed
    return shipped.fields.get(fmt, {}).get(name)


def field_notes(body: str, fmt: str) -> list[FieldNote]:
    """Each field of ``body`` with its note (None where the table has none), in order of first
    appearance: once per name, or, for a name whose note depends on where it is, once per note,
    each saying where (``FieldNote.where``)."""
    listed: dict[tuple[str, Note | None], str] = {}
    for name, parent in _fields(body, fmt):
        listed.setdefault((name, note_for(name, fmt, parent)), parent)
    names = Counter(name for name, _ in listed)
    return [
        FieldNote(name, note, _where(parent) if names[name] > 1 else "")
        for (name, note), parent in listed.items()
    ]


def _where(parent: str) -> str:
    return f"in {parent}" if parent else "at the top level"
