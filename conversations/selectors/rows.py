"""A conversation page's reads: its turns, their rows (top-level steps with their tool calls and
exchanges), the rows changed since a moment, and single steps, turns and exchanges of it."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from datetime import datetime
from functools import cache
from typing import NamedTuple, cast

from django.db.models import (
    Count,
    Exists,
    F,
    Max,
    Model,
    OuterRef,
    Prefetch,
    Q,
    QuerySet,
    Subquery,
    Window,
    prefetch_related_objects,
)
from django.db.models.functions import Coalesce, RowNumber

from conversations.loop.llm import ChoiceMode, ToolChoice
from conversations.models import Conversation, Exchange, ModelProfile, Step, TraceDelivery, Turn
from conversations.selectors.lone_reads import (
    SERVER_SHOWN,
    TRACE_DELIVERY_READ,
    TURN_SHOWN,
    TURN_UNREAD,
    lone_row,
    lone_row_exchanges,
    lone_turn,
)

# The attribute each row ``_rows`` reads carries: how many tool calls it has in all (``_loaded``
# gives it only the first and last few of them when they are many).
CALLS_COUNT = "calls_count"
# And whether it has any exchange: a row with none (every step's first doorbell, before its
# call is recorded) is given none without a query of them (``loaded_exchanges``).
HAS_EXCHANGES = "has_exchanges"
# And, on a lone row read by ``step_row``, its exchanges as ``lone_row_exchanges`` read them (the
# row is then not given them again by ``_loaded``'s prefetch).
EXCHANGES_READ = "exchanges_read"


@cache
def _unshown(relation: str) -> tuple[str, ...]:
    """The fields of ``relation`` (``server`` or ``turn``) a row leaves unread, as ``defer`` names them."""
    shown = SERVER_SHOWN if relation == "server" else TURN_SHOWN
    # The server's model through the relation (``servers`` imports ``conversations``, never back).
    model = cast("type[Model]", Step._meta.get_field(relation).related_model)
    return tuple(
        f"{relation}__{field.name}" for field in model._meta.concrete_fields if field.name not in shown
    )


def _step_exchanges() -> QuerySet[Exchange]:
    """A row's exchanges as it shows them: in the order they happened, each with its server's name."""
    return Exchange.objects.select_related("server").defer(*_unshown("server")).order_by("seq", "id")


@cache
def _rows() -> QuerySet[Step]:
    """A page's rows (top-level steps), in order, each with its server and turn and how many
    tool calls it has (``CALLS_COUNT``): ``_loaded`` gives them their tool calls and exchanges.

    Built once: every reader refines it (``filter``, ``order_by``), which makes a new queryset
    and leaves this one as it was, never evaluated (every doorbell's row read built it anew)."""
    calls = Step.objects.filter(parent=OuterRef("pk")).order_by().values("parent").annotate(n=Count("pk"))
    return (
        Step.objects.filter(parent__isnull=True)
        # The turn too, of it only what a row shows (``TURN_SHOWN``): not what a finished turn
        # holds much of, its whole message history and the digests of its seal (decoded for
        # every row read, they made most of a row's read).
        .select_related("server", "turn")
        .defer(*_unshown("server"), *_unshown("turn"))
        .annotate(
            **{
                CALLS_COUNT: Coalesce(Subquery(calls.values("n")), 0),
                HAS_EXCHANGES: Exists(Exchange.objects.filter(step=OuterRef("pk"))),
            }
        )
        .order_by("seq")
    )


# A row whose model reply asked for many tool calls shows the first CALLS_HEAD and the last
# CALLS_TAIL of them; the ones between load on request, CALLS_BATCH at a time (a reply of
# 10,000 calls made a 50 MB page that took 40 s to render).
CALLS_HEAD = 5
CALLS_TAIL = 5
CALLS_BATCH = 100
# A long turn's rows before the ones its page shows load this many at a time (a turn of
# thousands of rows is read a batch at a time, never whole).
ROWS_BATCH = 50
# A step's exchanges a page shows: of a step of more, the first EXCHANGES_HEAD and the last
# EXCHANGES_TAIL, and how many are between (a server that flooded one step with 100,000
# notifications made a 184 MB page that took 52 s). The export and the API have every one.
EXCHANGES_HEAD = 20
EXCHANGES_TAIL = 20
# The attribute a step whose exchanges were cut carries: how many it has in all.
EXCHANGES_COUNT = "exchanges_count"


def _tool_calls() -> QuerySet[Step]:
    """A row's tool calls as it shows them: in order, each with its server and turn (what a row
    shows of them)."""
    return (
        Step.objects.select_related("server", "turn")
        .defer(*_unshown("server"), *_unshown("turn"))
        .order_by("seq")
    )


def _ends_of(parents: list[int]) -> Subquery:
    """The ids of the first ``CALLS_HEAD`` and the last ``CALLS_TAIL`` tool calls of each of
    ``parents`` (a subquery: the window runs over a few columns, not over whole rows)."""
    by_row = [F("parent_id")]
    numbered = Step.objects.filter(parent_id__in=parents).annotate(
        place=Window(RowNumber(), partition_by=by_row, order_by=F("seq").asc()),
        place_from_end=Window(RowNumber(), partition_by=by_row, order_by=F("seq").desc()),
    )
    return Subquery(
        numbered.filter(Q(place__lte=CALLS_HEAD) | Q(place_from_end__lte=CALLS_TAIL)).values("pk")
    )


def _loaded(rows: Iterable[Step], *, every_call: bool = False) -> list[Step]:
    """``rows`` with their tool calls (``_tool_calls``: of a row with many, only the first and
    last few, unless ``every_call``) and every one's exchanges (``_step_exchanges``),
    prefetched: two more queries in all, however many turns
    the rows are of (the exchanges of the rows and of their tool calls are read together).
    A row known to have no tool call (most: a connect step, an answer) is given none at all, not
    even an empty prefetch: ``loaded_calls`` answers for it (a live row's read is one query, and
    the building of another, less: P2)."""
    rows = list(rows)
    with_calls = [row for row in rows if getattr(row, CALLS_COUNT, None) != 0]
    if with_calls:
        many = [row.pk for row in rows if getattr(row, CALLS_COUNT, 0) > CALLS_HEAD + CALLS_TAIL]
        calls = _tool_calls()
        if many and not every_call:
            calls = calls.filter(Q(pk__in=_ends_of(many)) | ~Q(parent_id__in=many))
        prefetch_related_objects(with_calls, Prefetch("children", queryset=calls))
    # A row known to have no exchange is not asked for them (``loaded_exchanges``).
    steps = [
        *(row for row in rows if getattr(row, HAS_EXCHANGES, True) and not hasattr(row, EXCHANGES_READ)),
        *(child for row in with_calls for child in row.children.all()),
    ]
    if steps:
        ids = [step.pk for step in steps]
        prefetch_related_objects(
            steps, Prefetch("exchanges", queryset=_step_exchanges().filter(pk__in=_exchange_ends(ids)))
        )
        _count_cut(steps)
    return rows


def _exchange_ends(steps: list[int]) -> Subquery:
    """The ids of the first ``EXCHANGES_HEAD`` and the last ``EXCHANGES_TAIL`` exchanges of each
    of ``steps`` (all of a step of fewer), in ``_step_exchanges``' order."""
    by_step = [F("step_id")]
    numbered = Exchange.objects.filter(step_id__in=steps).annotate(
        place=Window(RowNumber(), partition_by=by_step, order_by=[F("seq").asc(), F("id").asc()]),
        place_from_end=Window(RowNumber(), partition_by=by_step, order_by=[F("seq").desc(), F("id").desc()]),
    )
    return Subquery(
        numbered.filter(Q(place__lte=EXCHANGES_HEAD) | Q(place_from_end__lte=EXCHANGES_TAIL)).values("pk")
    )


def _count_cut(steps: list[Step]) -> None:
    """Give each step that may have had exchanges left out (as many loaded as a cut step shows)
    its count in all (``EXCHANGES_COUNT``): one query, only for those."""
    full = [step.pk for step in steps if len(step.exchanges.all()) == EXCHANGES_HEAD + EXCHANGES_TAIL]
    if not full:
        return
    counts = dict(
        Exchange.objects.filter(step_id__in=full)
        .order_by()
        .values("step_id")
        .annotate(n=Count("pk"))
        .values_list("step_id", "n")
    )
    for step in steps:
        if counts.get(step.pk, 0) > EXCHANGES_HEAD + EXCHANGES_TAIL:
            setattr(step, EXCHANGES_COUNT, counts[step.pk])


def exchanges_left(step: Step) -> int:
    """How many exchanges of ``step`` its loaded ones leave out (between the first
    ``EXCHANGES_HEAD`` and the last ``EXCHANGES_TAIL``); 0 for a step loaded whole."""
    total = getattr(step, EXCHANGES_COUNT, None)
    return 0 if total is None else total - len(loaded_exchanges(step))


def loaded_calls(row: Step) -> list[Step]:
    """The tool calls a row read by this module was loaded with (``_loaded``), in order: none,
    without a query, for a row known to have none (``CALLS_COUNT`` 0)."""
    if getattr(row, CALLS_COUNT, None) == 0:
        return []
    return list(row.children.all())


def loaded_exchanges(step: Step) -> list[Exchange]:
    """The exchanges a row or tool call read by this module was loaded with (``_loaded``), in
    order: none, without a query, for a row known to have none (``HAS_EXCHANGES`` false)."""
    if getattr(step, HAS_EXCHANGES, None) is False:
        return []
    read: list[Exchange] | None = getattr(step, EXCHANGES_READ, None)
    return list(step.exchanges.all() if read is None else read)


def row_calls(*, row: Step, start: int, stop: int) -> list[Step]:
    """The tool calls of ``row`` numbered ``start`` to ``stop`` (0-based, ``stop`` excluded) in
    its order, loaded as a page shows them (each with its exchanges)."""
    calls = list(_tool_calls().filter(parent=row)[start:stop])
    prefetch_related_objects(calls, Prefetch("exchanges", queryset=_step_exchanges()))
    return calls


def turn_rows(
    *,
    turn: Turn,
    last: int | None = None,
    before_seq: int | None = None,
    every_call: bool = False,
) -> list[Step]:
    """The top-level steps of a turn (the page's rows), children and exchanges loaded, in order:
    all of them, only the ``last`` few, or only those before the row numbered ``before_seq``
    (the last ``last`` of those, with both). A row's tool calls are cut to its first and last
    few (``CALLS_HEAD``, ``CALLS_TAIL``) unless ``every_call``."""
    rows = _rows().filter(turn=turn)
    if before_seq is not None:
        rows = rows.filter(seq__lt=before_seq)
    loaded = _loaded(rows if last is None else reversed(rows.order_by("-seq")[:last]), every_call=every_call)
    _note_previous_prompts(loaded, from_first=last is None or len(loaded) < last)
    return loaded


class RowsPage(NamedTuple):
    """A page of a turn's rows (``turn_rows_page``)."""

    rows: list[Step]
    total: int  # the turn's rows in all
    more: bool  # whether a row follows the page's last


def turn_rows_page(*, turn: Turn, start: int, size: int) -> RowsPage:
    """The ``size`` rows of the turn from the one numbered ``start`` (0-based, in order), loaded
    as ``turn_rows`` loads them, with how many the turn has and whether one comes after: the
    same few queries, and ``size + 1`` rows made at most, whatever the turn's size."""
    count = Step.objects.filter(turn=turn, parent__isnull=True).count()
    page = list(_rows().filter(turn=turn)[start : start + size + 1]) if start < count else []
    rows = _loaded(page[:size])
    _note_previous_prompts(rows, from_first=start == 0)
    return RowsPage(rows, count, len(page) > size)


def turns_rows(*, turns: Sequence[Turn]) -> dict[int, list[Step]]:
    """Every top-level step of each of ``turns``, as ``turn_rows`` gives a whole turn's (children
    and exchanges loaded, in order), by turn id, read together: a page of several short turns
    reads its rows, their tool calls and all their exchanges once, not once per turn."""
    if not turns:
        return {}
    rows: dict[int, list[Step]] = {turn.pk: [] for turn in turns}
    for row in _loaded(_rows().filter(turn__in=list(rows)).order_by("turn_id", "seq")):
        rows[row.turn_id].append(row)
    for loaded in rows.values():
        _note_previous_prompts(loaded, from_first=True)
    return rows


# The attribute set on a loaded model-call row: the prompt of the turn's model call before it
# ("" for none), when that was loaded with it (``presentation.step_prompt_change`` reads it).
PREVIOUS_PROMPT = "_previous_prompt_loaded"
# The steps that are model calls, whose spliced prompts are compared one with the next.
MODEL_CALL_KINDS = (Step.Kind.DECIDE, Step.Kind.ANSWER)


def _note_previous_prompts(rows: list[Step], *, from_first: bool) -> None:
    """Give each model-call row the prompt of the turn's model call before it, where that is
    known from ``rows`` (consecutive rows of one turn, in order; ``from_first``: starting at its
    first row): the page's prompt summaries then read it from memory, not row after row."""
    previous: str | None = "" if from_first else None
    for row in rows:
        if row.kind not in MODEL_CALL_KINDS:
            continue
        if previous is not None:
            setattr(row, PREVIOUS_PROMPT, previous)
        if row.prompt:
            previous = row.prompt


def step_row(*, conversation: Conversation, step_id: int) -> Step | None:
    """One row of a conversation, loaded for rendering as ``_rows`` loads a page's; None if it is
    not this conversation's (or not a row: a tool call is shown under its row)."""
    # Every doorbell's read (P2): one statement written once (``lone_row``), the same columns
    # and counts as ``_rows()`` (a test holds the two equal), then loaded as a page's row is.
    row = lone_row(
        conversation_id=conversation.pk, step_id=step_id, calls_count=CALLS_COUNT, has_exchanges=HAS_EXCHANGES
    )
    if row is None:
        return None
    # A row with tool calls has its exchanges read with theirs (``_loaded``: one query for all);
    # so has a row of more exchanges than a page shows (``_loaded`` reads only its ends).
    if getattr(row, HAS_EXCHANGES) and not getattr(row, CALLS_COUNT):
        whole = EXCHANGES_HEAD + EXCHANGES_TAIL
        read = lone_row_exchanges(step_id=row.pk, most=whole + 1)
        if len(read) <= whole:
            setattr(row, EXCHANGES_READ, read)
    return _loaded([row])[0]


def _rows_changed(conversation: Conversation, since: datetime, steps: QuerySet[Step]) -> QuerySet[Step]:
    return steps.filter(parent__isnull=True, turn__conversation=conversation, updated_at__gte=since)


def rows_changed_since(*, conversation: Conversation, since: datetime) -> list[Step]:
    """Rows touched at or after ``since`` (inclusive: a re-sent row replaces itself)."""
    return _loaded(_rows_changed(conversation, since, _rows()))


class RowVersion(NamedTuple):
    """Where a row is and which version of it is stored, without loading it."""

    step_id: int
    turn_id: int
    turn_seq: int
    seq: int
    updated_at: datetime


def row_versions_changed_since(*, conversation: Conversation, since: datetime) -> list[RowVersion]:
    """The rows ``rows_changed_since`` would load, as versions only (one light query, unordered)."""
    changed = _rows_changed(conversation, since, Step.objects.order_by())
    return [
        RowVersion(*values)
        for values in changed.values_list("pk", "turn_id", "turn__seq", "seq", "updated_at")
    ]


def rows_by_id(*, conversation: Conversation, step_ids: Collection[int]) -> list[Step]:
    """The rows of ``conversation`` among ``step_ids``, loaded for rendering (others are left out)."""
    return _loaded(_rows().filter(turn__conversation=conversation, pk__in=list(step_ids)))


def conversation_turns(
    *,
    conversation: Conversation,
    since: datetime | None = None,
    newest: int | None = None,
    before_seq: int | None = None,
) -> list[Turn]:
    """The turns, in order, for the page (only those changed at or after ``since``, if given;
    only those numbered below ``before_seq``, if given; only the last ``newest`` of those, if
    given). ``transcript`` (the whole message history, large on a long conversation) and
    ``seal_steps`` (a digest per step), never shown, are deferred: they load if something reads them.
    Each turn's trace delivery, which its status block shows, comes with it (one join)."""
    turns = conversation.turns.defer(*TURN_UNREAD).select_related("trace_delivery")
    if since is not None:
        turns = turns.filter(updated_at__gte=since)
    if before_seq is not None:
        turns = turns.filter(seq__lt=before_seq)
    if newest is not None:
        return list(reversed(turns.order_by("-seq")[:newest]))
    return list(turns.order_by("seq"))


def turn_count_before(*, conversation: Conversation, seq: int) -> int:
    """How many turns of ``conversation`` are numbered below ``seq``."""
    return conversation.turns.filter(seq__lt=seq).count()


def turn_row_count_before(*, turn: Turn, seq: int) -> int:
    """How many rows (top-level steps) of ``turn`` are numbered below ``seq``."""
    return Step.objects.filter(turn=turn, parent__isnull=True, seq__lt=seq).count()


def turn_row_counts(*, conversation: Conversation, turns: list[Turn] | None = None) -> dict[int, int]:
    """How many rows (top-level steps) each turn of ``conversation`` (or only each of ``turns``)
    has, by turn id (one query)."""
    steps = Step.objects.filter(turn__conversation=conversation, parent__isnull=True)
    if turns is not None:
        steps = steps.filter(turn_id__in=[turn.pk for turn in turns])
    counts = steps.order_by().values("turn_id").annotate(n=Count("pk")).values_list("turn_id", "n")
    return dict(counts)


def conversation_changed_at(*, conversation: Conversation) -> datetime | None:
    """The newest ``updated_at`` of any turn or step of ``conversation`` (None: nothing yet), in
    one query (the live watch asks it every tick: ``inspector.consumers.ConversationWatches``).
    Both maxima come from one join of its turns and their steps: a turn repeated once per step
    changes no maximum."""
    found = Conversation.objects.filter(pk=conversation.pk).aggregate(
        turn_at=Max("turns__updated_at"), step_at=Max("turns__steps__updated_at")
    )
    stamps: list[datetime] = [stamp for stamp in (found["step_at"], found["turn_at"]) if stamp is not None]
    return max(stamps, default=None)


def exchange_count(*, conversation: Conversation) -> int:
    """How many raw exchanges the turns of ``conversation`` recorded."""
    return Exchange.objects.filter(turn__conversation=conversation).count()


def step_get(*, conversation: Conversation, step_id: int) -> Step | None:
    """One step (any, a tool call too) of ``conversation``; None if it is not one of its turns'."""
    return Step.objects.filter(turn__conversation=conversation, pk=step_id).first()


def tool_choice_in_force(step: Step) -> tuple[str, str]:
    """The tool_choice (mode, named tool) the model call of ``step`` ran under: the turn's own
    until its first decision with calls, ``auto`` after it — the loop relaxes a forced choice
    once the model has called (``ToolChoice.after_call``). A decision's tool calls are rows after
    it, so a call of the turn before ``step`` means a decision with calls came before it. One
    query, only for a forced choice (``auto`` and ``none`` never change)."""
    turn = step.turn
    mode, name = turn.tool_choice, turn.tool_choice_name
    if mode not in {"required", "named"}:
        return mode, name
    called = Step.objects.filter(turn_id=step.turn_id, kind=Step.Kind.TOOL, seq__lt=step.seq).exists()
    choice = ToolChoice(cast("ChoiceMode", mode), name)
    relaxed = choice.after_call() if called else choice
    return relaxed.mode, relaxed.name or ""


def turn_get(*, conversation: Conversation, turn_id: int) -> Turn | None:
    """One turn of ``conversation`` (read as ``conversation_turns`` reads them)."""
    # Every turn doorbell's read (P2): one statement written once (``lone_turn``), the same
    # columns as ``conversation_turns`` (a test holds the two equal).
    turn = lone_turn(conversation_id=conversation.pk, turn_id=turn_id)
    if turn is not None:
        turn.conversation = conversation  # the one the caller holds: no read of it again
    return turn


def turn_trace_delivery(turn: Turn) -> TraceDelivery | None:
    """The trace delivery of ``turn``, None for none: as read with it (``turn_get``,
    ``conversation_turns``), else one query."""
    if hasattr(turn, TRACE_DELIVERY_READ):
        return cast("TraceDelivery | None", getattr(turn, TRACE_DELIVERY_READ))
    try:
        return turn.trace_delivery
    except TraceDelivery.DoesNotExist:
        return None


def exchange_get(*, conversation: Conversation, exchange_id: int) -> Exchange | None:
    """One exchange of ``conversation``; None if it is not one of its turns'."""
    return Exchange.objects.filter(turn__conversation=conversation, pk=exchange_id).first()


def profiles_for_form() -> QuerySet[ModelProfile]:
    """Profiles a question can run on: not the placeholders imports hang their records off."""
    return ModelProfile.objects.filter(imported_by__isnull=True).order_by("-is_demo", "name")
