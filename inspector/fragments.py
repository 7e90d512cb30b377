"""Rendered pieces of the conversation page, as the websocket and the rows endpoint send them.

The page ``{% include %}``s the same fragment templates, so a row that streamed in is
byte-for-byte the row a reload shows — for the same ``teaching``: the teaching layer is rendered
only for a user who has teaching mode on (docs/teaching.md §1), so every function here takes it. Every message names what it replaces and carries the
``updated_at`` of what it rendered, so the browser can drop a stale copy that arrives late.

Message formats (all timestamps are :func:`timestamp_iso` strings, which sort as text):

``row``  — ``{"type": "row", "turn_id", "step_id", "seq", "updated_at", "html"}``; ``html`` is
one ``_step.html`` (the element ``#step-<step_id>``), to be put into ``#turn-<turn_id> .rows``
in ``seq`` order.

``turn`` — ``{"type": "turn", "turn_id", "seq", "status", "updated_at", "html", "html_shell"}``;
``html`` is ``_turn_status.html`` (``#turn-status-<turn_id>``), ``html_shell`` the whole
``_turn.html`` with an empty rows container, for a page that has not seen this turn yet.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Literal, TypedDict

from django.template.loader import render_to_string
from django.utils import timezone

from conversations import selectors
from conversations.models import Conversation, Step, Turn

STEP_TEMPLATE = "inspector/_step.html"
TURN_TEMPLATE = "inspector/_turn.html"
TURN_STATUS_TEMPLATE = "inspector/_turn_status.html"


class RowMessage(TypedDict):
    type: Literal["row"]
    turn_id: int
    step_id: int
    seq: int
    updated_at: str
    html: str


class TurnMessage(TypedDict):
    type: Literal["turn"]
    turn_id: int
    seq: int
    status: str
    updated_at: str
    html: str
    html_shell: str


Message = RowMessage | TurnMessage


def timestamp_iso(moment: datetime) -> str:
    """``moment`` in UTC with microseconds always present, so two stamps compare as strings."""
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def turn_context(
    *, conversation: Conversation, turn: Turn, rows: Sequence[Step], teaching: bool = False
) -> dict[str, object]:
    """What ``_turn.html`` (and the ``_turn_status.html`` inside it) needs; the page uses it too."""
    return {"conversation": conversation, "turn": turn, "rows": rows, "teaching": teaching}


def catch_up_mark(turns: Sequence[tuple[Turn, Sequence[Step]]]) -> str:
    """The ``since`` a page showing ``turns`` catches up from: the newest ``updated_at`` it shows.

    An empty page has seen nothing, so it starts from the epoch.
    """
    stamps = [turn.updated_at for turn, _ in turns] + [step.updated_at for _, rows in turns for step in rows]
    return timestamp_iso(max(stamps, default=datetime(1970, 1, 1, tzinfo=UTC)))


def _row_message(conversation: Conversation, step: Step, teaching: bool) -> RowMessage:
    return {
        "type": "row",
        "turn_id": step.turn_id,
        "step_id": step.pk,
        "seq": step.seq,
        "updated_at": timestamp_iso(step.updated_at),
        "html": render_to_string(
            STEP_TEMPLATE, {"conversation": conversation, "step": step, "teaching": teaching}
        ),
    }


def _turn_message(conversation: Conversation, turn: Turn, teaching: bool) -> TurnMessage:
    context = turn_context(conversation=conversation, turn=turn, rows=[], teaching=teaching)
    status = render_to_string(TURN_STATUS_TEMPLATE, context)
    return {
        "type": "turn",
        "turn_id": turn.pk,
        "seq": turn.seq,
        "status": turn.status,
        "updated_at": timestamp_iso(turn.updated_at),
        "html": status,
        # The shell holds the same status fragment: rendered once (a finished turn's reads its
        # steps for the waterfall and prices its tokens).
        "html_shell": render_to_string(TURN_TEMPLATE, {**context, "status_html": status}),
    }


def render_row(*, conversation: Conversation, step_id: int, teaching: bool = False) -> RowMessage | None:
    """The ``row`` message for one top-level step; None if it is no row of ``conversation``."""
    step = selectors.step_row(conversation=conversation, step_id=step_id)
    return None if step is None else _row_message(conversation, step, teaching)


def render_turn(*, conversation: Conversation, turn_id: int, teaching: bool = False) -> TurnMessage | None:
    """The ``turn`` message for one turn; None if it is not ``conversation``'s."""
    turn = selectors.turn_get(conversation=conversation, turn_id=turn_id)
    return None if turn is None else _turn_message(conversation, turn, teaching)


def render_catch_up(*, conversation: Conversation, since: datetime, teaching: bool = False) -> list[Message]:
    """Everything changed at or after ``since``: turn messages first (so containers exist), then rows.

    A naive ``since`` is taken as UTC.
    """
    if timezone.is_naive(since):
        since = timezone.make_aware(since, UTC)
    turns = selectors.conversation_turns(conversation=conversation, since=since)
    rows = sorted(
        selectors.rows_changed_since(conversation=conversation, since=since), key=lambda s: (s.turn_id, s.seq)
    )
    messages: list[Message] = [_turn_message(conversation, turn, teaching) for turn in turns]
    messages.extend(_row_message(conversation, step, teaching) for step in rows)
    return messages
