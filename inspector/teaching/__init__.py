"""Teaching mode's vocabulary: a one-line note (and, where it matters, a public spec link) for every
field of the payloads the pages show, the roles of the parties on each row, and what each layer
of a step is. docs/teaching.md explains the choices.

The notes are data, one YAML file per format in ``notes/`` (:mod:`.loading` reads and checks
them once); the code that chooses a note is Python: :mod:`.fields` (a body's fields and their
notes), :mod:`.roles` (a row's parties, steps and layers), :mod:`.members` (what a model request
sent, read from its body).

Pure Python: no Django, so the notes can be read and tested on their own.
"""

from __future__ import annotations

from inspector.teaching.fields import (
    KEYED_BY_DATA,
    OAUTH_LABEL,
    OPAQUE,
    OPAQUE_BESIDE,
    FieldNote,
    body_format,
    field_names,
    field_notes,
    note_for,
)
from inspector.teaching.loading import FORMATS, Note, Notes, NotesError, notes, notes_load
from inspector.teaching.markup import note_html
from inspector.teaching.members import MISSING, sent_tool_choice, top_level_member
from inspector.teaching.roles import (
    CALL_MARKS,
    EXECUTE_NOTE,
    LAYERS,
    PROMPT_LABELS,
    ROLES,
    SELECT_NOTE,
    STEP_NOTES,
    Roles,
    call_note,
    call_outcome,
    exchange_roles,
    prompt_label,
    prompt_layer,
    select_note,
    step_note,
    turn_tool_choice,
)

__all__ = [
    "CALL_MARKS",
    "EXECUTE_NOTE",
    "FORMATS",
    "KEYED_BY_DATA",
    "LAYERS",
    "MISSING",
    "OAUTH_LABEL",
    "OPAQUE",
    "OPAQUE_BESIDE",
    "PROMPT_LABELS",
    "ROLES",
    "SELECT_NOTE",
    "STEP_NOTES",
    "FieldNote",
    "Note",
    "Notes",
    "NotesError",
    "Roles",
    "body_format",
    "call_note",
    "call_outcome",
    "exchange_roles",
    "field_names",
    "field_notes",
    "note_for",
    "note_html",
    "notes",
    "notes_load",
    "prompt_label",
    "prompt_layer",
    "select_note",
    "sent_tool_choice",
    "step_note",
    "top_level_member",
    "turn_tool_choice",
]
