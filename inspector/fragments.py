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

The page asks, when its socket opens, ``{"type": "catch_up", "since", "view"}``: the rows and
turns changed at or after ``since`` (the newest change it shows, less an overlap for writes that
commit late), and ``view`` says what it shows (:func:`page_view_from_json`), so the answer leaves
out the rows it already holds at their stored version and the rows it would not show. The
answer's messages end with ``{"type": "caught_up", "turns": n, "rows": n}`` (how many of each
it sent): from then on the page is current.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
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


@dataclass(frozen=True)
class ShownTurn:
    """A turn as a page shows it: its rows from ``from_seq`` on (None: folded, nothing of it
    shown live), the version (``updated_at``, as :func:`timestamp_iso` writes it) of each row it
    holds, and of its status (``status_at``; None: not known)."""

    from_seq: int | None
    held: dict[int, str]
    status_at: str | None = None


@dataclass(frozen=True)
class PageView:
    """What a conversation page shows, so a catch-up renders only what the page would apply:
    ``turns`` the page lists (by id), ``newest_seq`` the newest turn's number (turns after it
    are new to the page). The page drops the rest itself (``conversation_detail.js``)."""

    turns: dict[int, ShownTurn]
    newest_seq: int

    def wants_turn(self, turn: Turn) -> bool:
        shown = self.turns.get(turn.pk)
        if shown is None:
            return turn.seq > self.newest_seq
        return shown.from_seq is not None and shown.status_at != timestamp_iso(turn.updated_at)

    def wants_row(self, row: selectors.RowVersion) -> bool:
        shown = self.turns.get(row.turn_id)
        if shown is None:
            return row.turn_seq > self.newest_seq
        if shown.from_seq is None or row.seq < shown.from_seq:
            return False
        return shown.held.get(row.step_id) != timestamp_iso(row.updated_at)


# A page lists at most a few dozen turns and holds a few hundred rows; past these a view is refused.
VIEW_MAX_TURNS = 2_000
VIEW_MAX_HELD = 10_000
_STAMP_CHARS = 40


def _view_id(raw: object, what: str) -> int:
    if isinstance(raw, bool) or not isinstance(raw, (int, str)):
        raise ValueError(f"{what} must be a number")
    text = str(raw)
    if not text.isascii() or not text.isdigit() or len(text) > 18:
        raise ValueError(f"{what} must be a number")
    return int(text)


def page_view_from_json(raw: object) -> PageView:
    """A catch-up's ``view`` (``{"turns": {"<turn id>": {"from_seq": n | null, "held":
    {"<step id>": "<updated_at>"}, "status_at": "<updated_at>"}}, "newest_seq": n}``), checked
    and bounded. A turn the view leaves out that is not newer than ``newest_seq`` is one the
    page does not show live (folded, or not listed): nothing of it is sent.

    Raises:
        ValueError: it is not that shape, or names more than ``VIEW_MAX_TURNS`` turns or
            ``VIEW_MAX_HELD`` rows; the message says what is wrong.
    """
    if not isinstance(raw, dict) or not isinstance(raw.get("turns"), dict):
        raise ValueError("'view' must be an object with 'turns' and 'newest_seq'")
    if len(raw["turns"]) > VIEW_MAX_TURNS:
        raise ValueError(f"'view' names more than {VIEW_MAX_TURNS} turns")
    turns: dict[int, ShownTurn] = {}
    held_count = 0
    for key, entry in raw["turns"].items():
        if not isinstance(entry, dict) or not isinstance(entry.get("held", {}), dict):
            raise ValueError("each turn of 'view' must be an object with 'from_seq' and 'held'")
        from_seq = entry.get("from_seq")
        status_at = entry.get("status_at")
        if status_at is not None and (not isinstance(status_at, str) or len(status_at) > _STAMP_CHARS):
            raise ValueError("a turn's 'status_at' must be a timestamp")
        held_raw = entry.get("held", {})
        held_count += len(held_raw)
        if held_count > VIEW_MAX_HELD:
            raise ValueError(f"'view' holds more than {VIEW_MAX_HELD} rows")
        held: dict[int, str] = {}
        for step_id, stamp in held_raw.items():
            if not isinstance(stamp, str) or len(stamp) > _STAMP_CHARS:
                raise ValueError("a held row's version must be a timestamp")
            held[_view_id(step_id, "a held row's id")] = stamp
        turns[_view_id(key, "a turn id")] = ShownTurn(
            from_seq=None if from_seq is None else _view_id(from_seq, "'from_seq'"),
            held=held,
            status_at=status_at,
        )
    return PageView(turns=turns, newest_seq=_view_id(raw.get("newest_seq"), "'newest_seq'"))


def render_catch_up(
    *, conversation: Conversation, since: datetime, teaching: bool = False, view: PageView | None = None
) -> list[Message]:
    """Everything changed at or after ``since``: turn messages first (so containers exist), then rows.

    With the page's ``view``, only what that page would apply: not the rows it holds at the
    version stored, nor rows of turns it folds, leaves out or does not list (opening a page
    otherwise re-rendered every row of its last seconds, held or not).

    A naive ``since`` is taken as UTC.
    """
    if timezone.is_naive(since):
        since = timezone.make_aware(since, UTC)
    turns = selectors.conversation_turns(conversation=conversation, since=since)
    if view is None:
        loaded = selectors.rows_changed_since(conversation=conversation, since=since)
    else:
        turns = [turn for turn in turns if view.wants_turn(turn)]
        versions = selectors.row_versions_changed_since(conversation=conversation, since=since)
        wanted = [row.step_id for row in versions if view.wants_row(row)]
        loaded = selectors.rows_by_id(conversation=conversation, step_ids=wanted) if wanted else []
    rows = sorted(loaded, key=lambda s: (s.turn_id, s.seq))
    messages: list[Message] = [_turn_message(conversation, turn, teaching) for turn in turns]
    messages.extend(_row_message(conversation, step, teaching) for step in rows)
    return messages
