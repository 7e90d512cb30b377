"""Teaching mode's lines about rows: the parties, who sends each recorded exchange to whom,
what each kind of step and each layer of a step is, and a turn's tool_choice in words. The texts
are data (``notes/rows.yaml``, read by :mod:`inspector.teaching.loading`); the choice of text
for a row is here.

Pure Python: no Django.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from html import escape

from conversations.loop.splicing.templates import PARADIGM_SOURCE
from inspector.teaching.loading import Note, notes
from inspector.teaching.markup import note_html

_ROWS = notes()

ROLES: Mapping[str, str] = _ROWS.roles
# What each kind of row (step) is, for the row's teaching line.
STEP_NOTES: Mapping[str, str] = _ROWS.steps
# The columns of a row, as layers (a spliced prompt's: :func:`prompt_layer`).
LAYERS: Mapping[str, str] = _ROWS.layers
# What a spliced prompt may claim, as the code labels it (``Rendering.status``): the badge of
# templates/inspector/_prompt_badge.html shows one, :func:`prompt_label` reads it from a record.
PROMPT_LABELS = ("exact", "warning", "failed", "as sent", "illustrative")
# How the source of a paradigm's messages starts: "as sent", or, in a record made before that
# label existed (which stored them as exact), the words after it.
_AS_SENT_SOURCES = (PARADIGM_SOURCE.partition(" — ")[0], PARADIGM_SOURCE.partition(": ")[2])
# A selected call's note where its paradigm is not known: it claims none (:func:`select_note`).
SELECT_NOTE: Note = _ROWS.calls["select"]
# For a paradigm that uses a provider's own mechanism, the field whose note cites that provider's
# guide to it, by format: a native call links the format's tool-calling guide, a structured reply
# its structured-output guide.
_GUIDE_FIELDS: Mapping[str, Mapping[str, str]] = {
    "native": {
        "openai_chat": "tool_calls",
        "openai_responses": "call_id",
        "anthropic": "tool_use_id",
        "gemini": "functionCall",
    },
    "structured": {
        "openai_chat": "response_format",
        "openai_responses": "format",
        "anthropic": "output_config",
        "gemini": "responseJsonSchema",
    },
}
EXECUTE_NOTE: Note = _ROWS.calls["execute"]
# The mark teaching mode sets before a selected call's note, by what happened to the call.
CALL_MARKS: Mapping[str, str] = {
    "execute": "EXECUTE",
    "tool_error": "EXECUTE",
    "running": "EXECUTING",
    "refused": "NOT EXECUTED",
    "failed": "SENT, NO RESULT",
    "cancelled": "CANCELLED",
    "recorded": "FROM THE TRACE",
}


@dataclass(frozen=True)
class Roles:
    """Who sends a row's message to whom, and what that means, in one line."""

    sender: str
    receiver: str
    text: str
    spec: str = ""
    # The text as HTML when it names recorded values (a label, a server's name): the note's marks
    # are tags, the values escaped and never read as marks. Empty: render ``text`` as a note.
    html: str = ""


def _roles(sender: str, receiver: str, key: str, *, label: str, server: str) -> Roles:
    note = _ROWS.exchanges[key]
    marked = note_html(note.text).format(label=escape(label), server=escape(server))
    return Roles(sender, receiver, note.text.format(label=label, server=server), note.spec, marked)


def exchange_roles(*, channel: str, direction: str, label: str, server: str) -> Roles:
    """The parties of one recorded exchange (``direction`` as ``Exchange.Direction``)."""
    if channel == "llm":
        return _roles("Host", "Model", "model", label=label, server=server)
    server = server or "the server"
    if label == "stderr":
        return _roles("Server", "Host", "stderr", label=label, server=server)
    if direction == "server":
        return _roles("Server", "Client", "from_server", label=label, server=server)
    if label == "tools/call":
        return _roles("Client", "Server", "tools_call", label=label, server=server)
    return _roles("Client", "Server", "to_server", label=label, server=server)


def call_outcome(*, status: str, error: str, is_error: bool, sent: bool) -> str:
    """What happened to one selected call, read from its tool step's record: ``status`` and
    ``error`` as stored, ``is_error`` the result's flag, ``sent`` whether a ``tools/call``
    exchange was recorded. One of :data:`CALL_MARKS`' keys; a note is never chosen from the
    step's kind alone (a refused call is a tool step too)."""
    if error.startswith("not sent:"):
        return "refused"
    if status == "running":
        return "running"
    if not sent:
        return "recorded"
    if "notifications/cancelled" in error:
        return "cancelled"
    if error:
        return "failed"
    return "tool_error" if is_error else "execute"


def step_note(kind: str, *, went_on: bool | None = None) -> str:
    """What a row (step) of ``kind`` is, in one line. For an error row, ``went_on`` says what its
    record says came next: True when the turn has later rows (the host recovered), False when
    the turn ended with it, None while that is not known yet (the turn still runs)."""
    if kind == "error" and went_on is not None:
        return STEP_NOTES["error_went_on" if went_on else "error_ended"]
    return STEP_NOTES.get(kind, "")


def call_note(outcome: str) -> tuple[str, Note]:
    """The mark and the note of a call's outcome (:func:`call_outcome`)."""
    return CALL_MARKS[outcome], _ROWS.calls[outcome]


def select_note(paradigm: str, fmt: str = "") -> Note:
    """How the model selected a call under ``paradigm`` (a rung: ``native``, ``prompt_xml``,
    ``prompt_json``, ``structured``, ``intent``), its link the guide of the provider format ``fmt``
    speaks (:data:`FORMATS`; empty: the OpenAI guide) where the paradigm uses the provider's own
    mechanism. Only ``native`` is function calling. A paradigm that names no rung (``auto``
    before its rung is known, a proxied or imported turn) gets :data:`SELECT_NOTE`, which claims
    none."""
    note = _ROWS.select.get(paradigm)
    if note is None:
        return SELECT_NOTE
    field = _GUIDE_FIELDS.get(paradigm, {}).get(fmt)
    guide = notes().fields[fmt][field].spec if field is not None else ""
    return Note(note.text, guide or note.spec)


def prompt_label(*, exact: bool, source: str) -> str:
    """The label of a recorded spliced prompt (``Step.prompt_exact``, ``Step.prompt_source``), one
    of :data:`PROMPT_LABELS`, by the rules of the badge every page shows
    (templates/inspector/_prompt_badge.html): a failed template first, then the messages as sent
    (an old record stored those as exact), then exact, a warning, and otherwise illustrative."""
    if source.startswith("failed:"):
        return "failed"
    if source.startswith(_AS_SENT_SOURCES):
        return "as sent"
    if exact:
        return "exact"
    if " — warning: " in source:
        return "warning"
    return "illustrative"


def prompt_layer(label: str) -> str:
    """What a spliced prompt labelled ``label`` (:data:`PROMPT_LABELS`; ``as-sent`` and ``as_sent``
    too) is, for its teaching note: only an exact prompt is the text the model reads. A label not
    known here gets the note that is true of every prompt (``LAYERS["prompt"]``)."""
    key = "prompt_" + label.strip().replace(" ", "_").replace("-", "_")
    return LAYERS.get(key, LAYERS["prompt"])


def turn_tool_choice(mode: str, name: str = "") -> str:
    """A turn's tool_choice as the pages write it: the mode, and the named tool."""
    return f"{mode} → {name}" if mode == "named" and name else mode
