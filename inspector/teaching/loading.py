"""Teaching mode's notes as data: the YAML files of ``notes/``, read and checked once.

Which files there are and what each may hold:

- ``links.yaml``: the public references a note cites, ``name: URL``.
- ``<format>.yaml`` for each of :data:`FORMATS`: ``notes`` (a field name to a note),
  optionally ``inherits`` (the shared file whose notes the format starts from; its own win) and
  optionally ``at`` (notes that depend on where a field is: the name of the member it is in, to a
  field name, to a note — ``at: {choices: {message: …}}`` is ``message`` in ``choices[i]``; a
  list is transparent, so the member is the nearest enclosing one with a name).
- ``model_apis.yaml``: the notes every model API shares (``notes`` only), inherited.
- ``rows.yaml``: ``roles`` (party to text), ``steps`` (step kind to text), ``layers`` (layer to
  text), ``calls`` (``select`` and ``execute``, notes), ``select`` (paradigm to note: how the
  model selected a call), ``exchanges`` (notes whose text may
  name ``{label}`` and ``{server}``) and ``tool_choice`` (why a request sent none; text that may
  name ``{in_words}``), each with exactly the keys the pages ask for.

A note is ``text`` (one line, not empty) and optionally ``spec`` (a name from ``links.yaml``).
Anything else — an unknown file, key or link, a missing text, a duplicate name — is refused
with a :class:`NotesError` naming the file and the entry. Choosing which note a field gets is
not here (:mod:`inspector.teaching.fields`, :mod:`inspector.teaching.roles`).

Pure Python: no Django.
"""

from __future__ import annotations

import functools
import string
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

try:  # libyaml's parser, when pyyaml was built with it: a tenth of the pure-Python one's time
    from yaml import CSafeLoader as _SafeLoader
except ImportError:  # pragma: no cover — a pyyaml without libyaml
    from yaml import SafeLoader as _SafeLoader  # type: ignore[assignment]

NOTES_DIR = Path(__file__).resolve().parent / "notes"

FORMATS = ("openai_chat", "openai_responses", "anthropic", "gemini", "mcp", "oauth")
LINKS_FILE = "links"
SHARED_FILES = ("model_apis",)
ROWS_FILE = "rows"
KNOWN_FILES = frozenset((*FORMATS, *SHARED_FILES, LINKS_FILE, ROWS_FILE))

NOTE_KEYS = frozenset({"text", "spec"})
FORMAT_KEYS = frozenset({"notes", "inherits", "at"})
SHARED_KEYS = frozenset({"notes"})
# Each section of rows.yaml with the keys the code reads (exactly these: one missing would fail a
# page, one more would be read by nothing).
ROW_SECTIONS: Mapping[str, frozenset[str]] = {
    "roles": frozenset({"Host", "Client", "Server", "Model"}),
    "steps": frozenset(
        {"connect", "decide", "tool", "answer", "fallback", "error", "error_went_on", "error_ended"}
    ),
    "layers": frozenset(
        {
            "prompt",
            "prompt_exact",
            "prompt_illustrative",
            "prompt_as_sent",
            "prompt_warning",
            "prompt_failed",
            "request",
            "response",
            "parsed",
            "rpc_request",
            "rpc_result",
            "answer",
            "connect",
            "fallback",
            "error",
        }
    ),
    "calls": frozenset(
        {"select", "execute", "tool_error", "running", "refused", "failed", "cancelled", "recorded"}
    ),
    "select": frozenset({"native", "prompt_xml", "prompt_json", "structured", "intent"}),
    "exchanges": frozenset({"model", "stderr", "from_server", "tools_call", "to_server"}),
    "tool_choice": frozenset({"provider_default", "in_words", "no_tools"}),
}
# Sections of rows.yaml whose values are notes (text and spec) rather than plain text.
NOTE_SECTIONS = frozenset({"calls", "select", "exchanges"})
# The placeholders a section's texts may name (``str.format`` fields); elsewhere none.
PLACEHOLDERS: Mapping[str, frozenset[str]] = {
    "exchanges": frozenset({"label", "server"}),
    "tool_choice": frozenset({"in_words"}),
}


@dataclass(frozen=True)
class Note:
    """One field's explanation: one line, and the spec section that defines it (may be empty)."""

    text: str
    spec: str = ""


@dataclass(frozen=True)
class Notes:
    """Everything in ``notes/``, checked."""

    fields: Mapping[str, Mapping[str, Note]]
    # By format, the notes that depend on where a field is: enclosing member's name, field name.
    at: Mapping[str, Mapping[str, Mapping[str, Note]]]
    roles: Mapping[str, str]
    steps: Mapping[str, str]
    layers: Mapping[str, str]
    calls: Mapping[str, Note]
    select: Mapping[str, Note]
    exchanges: Mapping[str, Note]
    tool_choice: Mapping[str, str]


class NotesError(ValueError):
    """A notes file that cannot be used: ``file`` and ``entry`` say where, ``problem`` what."""

    def __init__(self, file: str, entry: str, problem: str) -> None:
        self.file = file
        self.entry = entry
        self.problem = problem
        where = f"{file}, {entry}" if entry else file
        super().__init__(f"teaching notes: {where}: {problem}")


class _Loader(_SafeLoader):
    """YAML's safe loader, refusing a name given twice in one mapping (YAML would keep the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[object, object]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"{key!r} is given twice", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _read(directory: Path, name: str) -> dict[str, object]:
    path = directory / f"{name}.yaml"
    file = path.name
    if not path.is_file():
        raise NotesError(file, "", "the file is missing")
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)  # noqa: S506 — a safe loader
    except UnicodeDecodeError as exc:
        raise NotesError(file, "", f"not UTF-8 text (byte {exc.start})") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise NotesError(file, "", f"not valid YAML: {exc.problem or exc.context}{where}") from None
    if not isinstance(data, dict) or not all(isinstance(key, str) for key in data):
        raise NotesError(file, "", "the file must be a mapping of names")
    return data


def _mapping(value: object, file: str, entry: str) -> dict[str, object]:
    if not isinstance(value, dict) or not all(isinstance(key, str) for key in value):
        raise NotesError(file, entry, "must be a mapping of names")
    return value


def _keys(data: Mapping[str, object], allowed: frozenset[str], file: str, entry: str) -> None:
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise NotesError(file, entry, f"unknown key {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})")


def _text(value: object, file: str, entry: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise NotesError(file, entry, "missing text (a non-empty string)")
    if "\n" in value:
        raise NotesError(file, entry, "the text must be one line")
    return value


def _note(value: object, links: Mapping[str, str], file: str, entry: str) -> Note:
    data = _mapping(value, file, entry)
    _keys(data, NOTE_KEYS, file, entry)
    text = _text(data.get("text"), file, entry)
    spec = data.get("spec", "")
    if spec == "":
        return Note(text)
    if not isinstance(spec, str) or spec not in links:
        raise NotesError(file, entry, f"unknown spec link {spec!r} (links.yaml names the links)")
    return Note(text, links[spec])


def _notes(value: object, links: Mapping[str, str], file: str) -> dict[str, Note]:
    data = _mapping(value, file, "notes")
    return {name: _note(note, links, file, name) for name, note in data.items()}


def _links(directory: Path) -> dict[str, str]:
    file = f"{LINKS_FILE}.yaml"
    links: dict[str, str] = {}
    for name, url in _read(directory, LINKS_FILE).items():
        if not isinstance(url, str) or not url.startswith("https://"):
            raise NotesError(file, name, "a link must be an https:// URL")
        links[name] = url
    return links


def _shared(directory: Path, links: Mapping[str, str]) -> dict[str, dict[str, Note]]:
    shared = {}
    for name in SHARED_FILES:
        data = _read(directory, name)
        _keys(data, SHARED_KEYS, f"{name}.yaml", "")
        shared[name] = _notes(data.get("notes"), links, f"{name}.yaml")
    return shared


def _at(value: object, links: Mapping[str, str], file: str) -> dict[str, dict[str, Note]]:
    """A format's ``at`` section: each enclosing member's name, to its fields' notes."""
    data = _mapping(value, file, "at")
    return {
        parent: {
            name: _note(note, links, file, f"at.{parent}.{name}")
            for name, note in _mapping(named, file, f"at.{parent}").items()
        }
        for parent, named in data.items()
    }


def _format(
    directory: Path, fmt: str, links: Mapping[str, str], shared: Mapping[str, Mapping[str, Note]]
) -> tuple[dict[str, Note], dict[str, dict[str, Note]]]:
    """A format's notes by field name, and its notes by where a field is (``at``)."""
    file = f"{fmt}.yaml"
    data = _read(directory, fmt)
    _keys(data, FORMAT_KEYS, file, "")
    base: Mapping[str, Note] = {}
    if "inherits" in data:
        inherits = data["inherits"]
        if not isinstance(inherits, str) or inherits not in shared:
            raise NotesError(
                file, "inherits", f"unknown shared file {inherits!r} (one of {', '.join(shared)})"
            )
        base = shared[inherits]
    at = _at(data["at"], links, file) if "at" in data else {}
    return {**base, **_notes(data.get("notes"), links, file)}, at


def _template(note: Note, section: str, file: str, entry: str) -> Note:
    """``note`` if its text names only the placeholders its section fills."""
    allowed = PLACEHOLDERS.get(section, frozenset())
    try:
        named = {field for _, field, _, _ in string.Formatter().parse(note.text) if field is not None}
    except ValueError as exc:
        raise NotesError(file, entry, f"the text is not a valid template: {exc}") from None
    unknown = sorted(named - allowed)
    if unknown:
        only = ", ".join(f"{{{name}}}" for name in sorted(allowed)) or "none"
        raise NotesError(file, entry, f"unknown placeholder {{{unknown[0]}}} (allowed: {only})")
    return note


def _rows(directory: Path, links: Mapping[str, str]) -> dict[str, dict[str, Note]]:
    """Each section of rows.yaml, its entries as notes (a plain text is a note without spec)."""
    file = f"{ROWS_FILE}.yaml"
    data = _read(directory, ROWS_FILE)
    _keys(data, frozenset(ROW_SECTIONS), file, "")
    rows: dict[str, dict[str, Note]] = {}
    for section, wanted in ROW_SECTIONS.items():
        entries = _mapping(data.get(section), file, section)
        missing = sorted(wanted - set(entries))
        if missing:
            raise NotesError(file, f"{section}.{missing[0]}", "missing")
        _keys(entries, wanted, file, section)
        rows[section] = {}
        for key, value in entries.items():
            entry = f"{section}.{key}"
            if section in NOTE_SECTIONS:
                note = _note(value, links, file, entry)
            else:
                note = Note(_text(value, file, entry))
            rows[section][key] = _template(note, section, file, entry)
    return rows


def _texts(notes: Mapping[str, Note]) -> dict[str, str]:
    return {key: note.text for key, note in notes.items()}


def notes_load(directory: Path = NOTES_DIR) -> Notes:
    """Read and check every notes file in ``directory``.

    Raises:
        NotesError: a file is missing, unknown or malformed; the error names the file and entry.
    """
    for path in sorted(directory.iterdir()):
        if path.suffix in {".yaml", ".yml"} and (path.suffix != ".yaml" or path.stem not in KNOWN_FILES):
            raise NotesError(
                path.name, "", f"unknown layer (the files are {', '.join(sorted(KNOWN_FILES))}, each .yaml)"
            )
    links = _links(directory)
    shared = _shared(directory, links)
    formats = {fmt: _format(directory, fmt, links, shared) for fmt in FORMATS}
    rows = _rows(directory, links)
    return Notes(
        fields={fmt: fields for fmt, (fields, _) in formats.items()},
        at={fmt: at for fmt, (_, at) in formats.items()},
        roles=_texts(rows["roles"]),
        steps=_texts(rows["steps"]),
        layers=_texts(rows["layers"]),
        calls=rows["calls"],
        select=rows["select"],
        exchanges=rows["exchanges"],
        tool_choice=_texts(rows["tool_choice"]),
    )


@functools.cache
def notes() -> Notes:
    """The shipped notes, read once per process at first use."""
    return notes_load(NOTES_DIR)
