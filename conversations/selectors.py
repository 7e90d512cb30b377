"""Reads about conversations: what a user may see, found, listed, paged and measured.

What the pages build from these reads (prompt diffs, wire excerpts, replay diffs, JSON
printing) is ``conversations.presentation``; the transcript document is
``conversations.transcripts.document``.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from functools import cached_property
from typing import NamedTuple, TypeVar
from uuid import UUID

from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.contrib.postgres.search import SearchQuery, SearchVector
from django.core.paginator import Page, Paginator
from django.db import connection
from django.db.models import (
    BigIntegerField,
    Case,
    Count,
    DurationField,
    ExpressionWrapper,
    F,
    Max,
    Model,
    OuterRef,
    Prefetch,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
    When,
)
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Coalesce, Least, Left, Substr

from conversations.compiled_reads import CompiledRead
from conversations.models import FTS_BODY_CHARS, Comparison, Conversation, Exchange, ModelProfile, Step, Turn
from conversations.providers import USAGE_INPUT_KEYS, USAGE_OUTPUT_KEYS
from conversations.search import scoped_text_match
from conversations.summaries import UNSUMMARIZED
from conversations.typealias import JSONValue

_Owned = TypeVar("_Owned", bound=Model)


def visible_to(
    rows: QuerySet[_Owned], *, user: AbstractBaseUser | AnonymousUser, owner: str
) -> QuerySet[_Owned]:
    """The one access rule, applied to ``rows`` whose user foreign key is at path ``owner``.

    A row is visible to the user it belongs to and to the members of any team that user belongs
    to; staff see all; anonymous users see none. A row that belongs to no one (made by a
    management command, or whose user was deleted) is visible to staff only. Conversations
    (``owner``), workbench operations (``user``), saved calls (``owner``) and the questions a
    server asked (``operation__user``) all go through here: every page, API call, export and
    websocket that shows one looks it up among these rows, so anyone else gets a 404.
    """
    if not user.is_authenticated:
        return rows.none()
    if getattr(user, "is_staff", False):
        return rows
    # One IN over a short list of users (the user and their team mates, read now), not an OR of
    # two conditions: the planner can then walk an (owner, ...) index per user.
    return rows.filter(**{f"{owner}__in": {user.pk, *_team_mates(user.pk)}})


def _team_mates(user_id: int) -> QuerySet[Model, int]:
    """The ids of the users who share a team with ``user_id`` (the user too, if in any team)."""
    return get_user_model().objects.filter(inspector_teams__members=user_id).values_list("pk", flat=True)


def _visible_one(rows: QuerySet[_Owned], *, user_id: int, owner: str) -> QuerySet[_Owned]:
    """``visible_to``'s rule for a member (not staff) as one query: the row's owner is the user or
    one of their team mates, read in the same statement. For reads of one row by its key, where
    the planner finds the row first whatever the form: the team mates then cost no round trip of
    their own. The tests hold the two forms to the same answers."""
    return rows.filter(Q(**{owner: user_id}) | Q(**{f"{owner}__in": _team_mates(user_id)}))


def conversation_list(*, user: AbstractBaseUser | AnonymousUser) -> QuerySet[Conversation]:
    """The conversations ``user`` may see (``visible_to``), newest first."""
    return _listed(visible_to(Conversation.objects.all(), user=user, owner="owner")).order_by("-created_at")


def _listed(conversations: QuerySet[Conversation]) -> QuerySet[Conversation]:
    """What a listed conversation carries: its profile and owner, and ``turn_count``.

    A subquery, not Count("turns"): a join and GROUP BY would make every count and every page
    aggregate all visible conversations; this is computed for the rows shown only.
    """
    turn_count = (
        Turn.objects.filter(conversation=OuterRef("pk"))
        .order_by()
        .values("conversation")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return conversations.select_related("model_profile", "owner").annotate(
        turn_count=Coalesce(Subquery(turn_count), 0)
    )


def conversation_get(*, user: AbstractBaseUser | AnonymousUser, public_id: UUID | str) -> Conversation:
    """One conversation ``user`` may see.

    Raises:
        Conversation.DoesNotExist: no such conversation, or not this user's (the same answer).
    """
    # Not ``conversation_list``'s query: every page, API call and websocket of a conversation
    # starts here, and what a list carries besides (the turn count's subquery, the order) cost
    # a third of the lookup's time to build. Compiled once (a member's in one query with their
    # team mates, staff's by the id alone); a public id given as text is read the plain way.
    if not user.is_authenticated:
        raise Conversation.DoesNotExist("no such conversation")
    if not isinstance(public_id, UUID):
        visible = visible_to(Conversation.objects.all(), user=user, owner="owner")
        return visible.select_related("model_profile", "owner").get(public_id=public_id)
    if getattr(user, "is_staff", False):
        found = _any_conversation(public_id=public_id)
    else:
        found = _members_conversation(public_id=public_id, user_id=user.pk)
    if not found:
        raise Conversation.DoesNotExist("no such conversation")
    return found[0]


def _one_conversation(public_id: UUID) -> QuerySet[Conversation]:
    # Unordered, as ``get`` reads: one row at most (the public id is unique).
    return (
        Conversation.objects.filter(public_id=public_id).select_related("model_profile", "owner").order_by()
    )


_any_conversation = CompiledRead(_one_conversation)
_members_conversation = CompiledRead(
    lambda public_id, user_id: _visible_one(_one_conversation(public_id), user_id=user_id, owner="owner")
)


def _step_exchanges() -> QuerySet[Exchange]:
    """A row's exchanges as it shows them: in the order they happened, each with its server."""
    return Exchange.objects.select_related("server").order_by("seq", "id")


def _rows() -> QuerySet[Step]:
    """A page's rows (top-level steps), in order, each with its server and turn: ``_loaded``
    gives them their tool calls and exchanges."""
    return (
        Step.objects.filter(parent__isnull=True)
        # The turn too: a model call's row shows the turn's tool_choice, a tool's its tools. Not
        # what no row shows and a finished turn holds much of: its whole message history and the
        # digests of its seal (decoded for every row read, they made most of a row's read).
        .select_related("server", "turn")
        .defer("turn__transcript", "turn__seal_steps")
        .order_by("seq")
    )


def _loaded(rows: Iterable[Step]) -> list[Step]:
    """``rows`` with their tool calls (in order, each with its server) and every one's exchanges
    (``_step_exchanges``), held as ``prefetch_related`` holds them: two more queries in all,
    compiled once (``conversations.compiled_reads``), however many turns the rows are of."""
    rows = list(rows)
    if rows:
        _attach(rows, _tool_calls_of_rows(row_ids=[row.pk for row in rows]))
    return rows


def _attach(rows: list[Step], children: list[Step]) -> None:
    """Hold each of ``rows``' tool calls (``children``, in order) and every one's exchanges, read
    here in one query, as ``prefetch_related`` holds them (``_prefetched``)."""
    by_row: dict[int, list[Step]] = {row.pk: [] for row in rows}
    for child in children:
        by_row[child.parent_id].append(child)  # type: ignore[index]
    steps = [*rows, *children]
    exchanges: dict[int, list[Exchange]] = {step.pk: [] for step in steps}
    for exchange in _exchanges_of_steps(step_ids=list(exchanges)):
        exchanges[exchange.step_id].append(exchange)  # type: ignore[index]
    for row in rows:
        _prefetched(row, "children", by_row[row.pk])
        for child in by_row[row.pk]:
            Step.parent.field.set_cached_value(child, row)
    for step in steps:
        _prefetched(step, "exchanges", exchanges[step.pk])
        for exchange in exchanges[step.pk]:
            Exchange.step.field.set_cached_value(exchange, step)


def turn_rows(*, turn: Turn, last: int | None = None, before_seq: int | None = None) -> list[Step]:
    """The top-level steps of a turn (the page's rows), children and exchanges loaded, in order:
    all of them, only the ``last`` few, or only those before the row numbered ``before_seq``."""
    rows = _rows().filter(turn=turn)
    if before_seq is not None:
        rows = rows.filter(seq__lt=before_seq)
    loaded = _loaded(rows if last is None else reversed(rows.order_by("-seq")[:last]))
    _note_previous_prompts(loaded, from_first=last is None or len(loaded) < last)
    return loaded


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
    not this conversation's.

    Every doorbell of a turn is one of these reads in the web server, so it is made in two
    compiled queries (``conversations.compiled_reads``): the row and its tool calls together,
    then the exchanges of all of them.
    """
    loaded = _row_and_tool_calls(step_id=step_id, conversation_id=conversation.pk)
    row = next((step for step in loaded if step.pk == step_id), None)
    if row is None:
        return None
    _attach([row], [step for step in loaded if step is not row])
    return row


# ``step_row``'s two reads, compiled once (``conversations.compiled_reads``): every doorbell runs them.
_row_and_tool_calls = CompiledRead(
    lambda step_id, conversation_id: (
        Step.objects.filter(
            Q(pk=step_id, parent__isnull=True) | Q(parent_id=step_id), turn__conversation_id=conversation_id
        )
        .select_related("server", "turn")
        .defer("turn__transcript", "turn__seal_steps")
        .order_by("seq")
    )
)
_exchanges_of_steps = CompiledRead(lambda step_ids: _step_exchanges().filter(step_id__in=step_ids))
_tool_calls_of_rows = CompiledRead(
    lambda row_ids: Step.objects.filter(parent_id__in=row_ids).select_related("server").order_by("seq")
)


def _prefetched(instance: Model, name: str, related: Sequence[Model]) -> None:
    """Hold ``related`` as ``instance``'s reverse relation ``name`` (its ``.all()`` then reads no
    more), where ``prefetch_related`` keeps what it fetched (Django 5.2): for rows read together
    in one query that the prefetch would read again one relation at a time. The tests compare
    such a row's rendering with a prefetched one's."""
    loaded = getattr(instance, name).all()
    loaded._result_cache = list(related)
    loaded._prefetch_done = True
    instance.__dict__.setdefault("_prefetched_objects_cache", {})[name] = loaded


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
    turns = conversation.turns.defer("transcript", "seal_steps").select_related("trace_delivery")
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


def turn_row_counts(*, conversation: Conversation, turns: list[Turn] | None = None) -> dict[int, int]:
    """How many rows (top-level steps) each turn of ``conversation`` (or only each of ``turns``)
    has, by turn id (one query)."""
    steps = Step.objects.filter(turn__conversation=conversation, parent__isnull=True)
    if turns is not None:
        steps = steps.filter(turn_id__in=[turn.pk for turn in turns])
    counts = steps.order_by().values("turn_id").annotate(n=Count("pk")).values_list("turn_id", "n")
    return dict(counts)


def conversation_changed_at(*, conversation: Conversation) -> datetime | None:
    """The newest ``updated_at`` of any turn or step of ``conversation`` (None: nothing yet)."""
    steps = Step.objects.filter(turn__conversation=conversation).aggregate(at=Max("updated_at"))["at"]
    turns = conversation.turns.aggregate(at=Max("updated_at"))["at"]
    stamps: list[datetime] = [stamp for stamp in (steps, turns) if stamp is not None]
    return max(stamps, default=None)


def exchange_count(*, conversation: Conversation) -> int:
    """How many raw exchanges the turns of ``conversation`` recorded."""
    return Exchange.objects.filter(turn__conversation=conversation).count()


def step_get(*, conversation: Conversation, step_id: int) -> Step | None:
    """One step (any, a tool call too) of ``conversation``; None if it is not one of its turns'."""
    return Step.objects.filter(turn__conversation=conversation, pk=step_id).first()


def turn_get(*, conversation: Conversation, turn_id: int) -> Turn | None:
    """One turn of ``conversation`` (read as ``conversation_turns`` reads them)."""
    for turn in _conversations_turn(turn_id=turn_id, conversation_id=conversation.pk):
        Turn.conversation.field.set_cached_value(turn, conversation)
        return turn
    return None


# Every doorbell about a turn runs this in the web server (``conversations.compiled_reads``).
_conversations_turn = CompiledRead(
    lambda turn_id, conversation_id: (
        Turn.objects.filter(pk=turn_id, conversation_id=conversation_id)
        .defer("transcript", "seal_steps")
        .select_related("trace_delivery")
    )
)


def profiles_for_form() -> QuerySet[ModelProfile]:
    """Profiles a question can run on: not the placeholders imports hang their records off."""
    return ModelProfile.objects.filter(imported_by__isnull=True).order_by("-is_demo", "name")


# --- comparisons: one question under several paradigms and models --------------------------------

# The names providers give their token counts (OpenAI Chat / Responses, Anthropic, Gemini).


@dataclass(frozen=True)
class RunRow:
    """One step of a run, compactly: a top-level row (depth 0) or a tool call under it (depth 1)."""

    seq: int
    kind: str
    title: str
    status: str
    depth: int


@dataclass(frozen=True)
class RunSummary:
    """One run of a comparison: its first turn, measured.

    Token totals are None when no model call reported them (never estimated).
    ``prompt_tokens`` sums the offline tokenizer's count of each spliced prompt;
    ``llm_ms`` sums the model calls' HTTP durations, ``wall_ms`` is the turn's own run time.
    ``tool`` and ``arguments`` are those of the first tool call made ("" / None if none).
    """

    conversation: Conversation
    turn: Turn | None
    paradigm: str
    profile: str
    model: str
    is_demo: bool
    status: str
    finished: bool
    steps: int
    model_calls: int
    tokens_in: int | None
    tokens_out: int | None
    prompt_tokens: int | None
    prompt_encodings: list[str]
    llm_ms: float | None
    wall_ms: float | None
    tool: str
    arguments: JSONValue
    answered: bool
    answer: str
    error: str
    rows: list[RunRow] = field(default_factory=list)


def comparison_list(*, user: AbstractBaseUser | AnonymousUser) -> QuerySet[Comparison]:
    """The comparisons ``user`` may see, newest first: their own, with their runs loaded."""
    if not user.is_authenticated:
        return Comparison.objects.none()
    runs = Conversation.objects.select_related("model_profile").order_by("pk")
    return (
        Comparison.objects.filter(owner_id=user.pk)
        .prefetch_related(Prefetch("conversations", queryset=runs))
        .order_by("-created_at")
    )


def comparison_get(*, user: AbstractBaseUser | AnonymousUser, public_id: UUID | str) -> Comparison:
    """One comparison ``user`` may see.

    Raises:
        Comparison.DoesNotExist: no such comparison, or not this user's (the same answer).
    """
    return comparison_list(user=user).get(public_id=public_id)


def _count(mapping: JSONValue, keys: tuple[str, ...]) -> int | None:
    """The first of ``keys`` in ``mapping`` that holds a whole number (bools are not counts)."""
    if not isinstance(mapping, dict):
        return None
    for key in keys:
        value = mapping.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _count_sum(values: list[JSONValue], keys: tuple[str, ...]) -> int | None:
    counts = [count for value in values if (count := _count(value, keys)) is not None]
    return sum(counts) if counts else None


def _encodings(steps: list[Step]) -> list[str]:
    names = [
        str(step.tokens["encoding"])
        for step in steps
        if isinstance(step.tokens, dict)
        and step.tokens.get("encoding")
        and _count(step.tokens, ("prompt",)) is not None
    ]
    return list(dict.fromkeys(names))


def _run_rows(steps: list[Step]) -> list[RunRow]:
    children: dict[int, list[Step]] = {}
    for step in steps:
        if step.parent_id is not None:
            children.setdefault(step.parent_id, []).append(step)
    rows: list[RunRow] = []
    for step in steps:
        if step.parent_id is not None:
            continue
        rows.append(RunRow(seq=step.seq, kind=step.kind, title=step.title, status=step.status, depth=0))
        rows.extend(
            RunRow(seq=child.seq, kind=child.kind, title=child.title, status=child.status, depth=1)
            for child in children.get(step.pk, [])
        )
    return rows


def _wall_ms(turn: Turn) -> float | None:
    if turn.started_at is None or turn.finished_at is None:
        return None
    return (turn.finished_at - turn.started_at).total_seconds() * 1000


def _run_summary(conversation: Conversation, turn: Turn | None, steps: list[Step]) -> RunSummary:
    profile = conversation.model_profile
    model_steps = [step for step in steps if step.kind != Step.Kind.TOOL]
    llm = [e for step in steps for e in step.exchanges.all() if e.channel == Exchange.Channel.LLM]
    durations = [e.duration_ms for e in llm if e.duration_ms is not None]
    first_tool = next((step for step in steps if step.kind == Step.Kind.TOOL), None)
    status = turn.status if turn is not None else Turn.Status.QUEUED
    return RunSummary(
        conversation=conversation,
        turn=turn,
        paradigm=conversation.paradigm,
        profile=profile.name,
        model=turn.model_name if turn is not None and turn.model_name else profile.model,
        is_demo=profile.is_demo,
        status=status,
        finished=turn is not None and turn.is_finished,
        steps=len(steps),
        model_calls=len(llm),
        tokens_in=_count_sum([step.usage for step in model_steps], USAGE_INPUT_KEYS),
        tokens_out=_count_sum([step.usage for step in model_steps], USAGE_OUTPUT_KEYS),
        prompt_tokens=_count_sum([step.tokens for step in model_steps], ("prompt",)),
        prompt_encodings=_encodings(model_steps),
        llm_ms=sum(durations) if durations else None,
        wall_ms=_wall_ms(turn) if turn is not None else None,
        tool=(
            f"{first_tool.server.name if first_tool.server else ''}/{first_tool.tool_name}".lstrip("/")
            if first_tool is not None
            else ""
        ),
        arguments=first_tool.arguments if first_tool is not None else None,
        answered=turn is not None and turn.status == Turn.Status.DONE and bool(turn.answer.strip()),
        answer=turn.answer if turn is not None else "",
        error=turn.error if turn is not None else "",
        rows=_run_rows(steps),
    )


def comparison_runs(*, comparison: Comparison) -> list[RunSummary]:
    """Each run of ``comparison``, in the order they were started, measured on its first turn.

    (A run's conversation may get follow-up turns on its own page; the comparison is about
    the question they all answered first.)
    """
    conversations = list(comparison.conversations.select_related("model_profile").order_by("pk"))
    turns = {
        turn.conversation_id: turn for turn in Turn.objects.filter(conversation__in=conversations, seq=1)
    }
    steps_by_turn: dict[int, list[Step]] = {}
    steps = (
        Step.objects.filter(turn__in=turns.values())
        .select_related("server")
        .prefetch_related(Prefetch("exchanges", queryset=Exchange.objects.order_by("seq", "id")))
        .order_by("turn_id", "seq")
    )
    for step in steps:
        steps_by_turn.setdefault(step.turn_id, []).append(step)
    summaries = []
    for conversation in conversations:
        turn = turns.get(conversation.pk)
        summaries.append(_run_summary(conversation, turn, steps_by_turn.get(turn.pk, []) if turn else []))
    return summaries


# --- finding conversations: filters, full text, sorting --------------------------------------------


@dataclass(frozen=True)
class ErrorClass:
    """A kind of failure, as the steps that record it (``steps`` filters ``Step`` rows)."""

    label: str
    steps: Q


# What the gateway says when a server, not the tool, failed (see servers.gateway and its pool).
SERVER_FAILURE_MARKERS = (
    "closed the connection",
    "timed out",
    "could not connect",
    "did not complete the connection",
    "gave no answer",
)


def _mentions_any(field_name: str, markers: tuple[str, ...]) -> Q:
    condition = Q()
    for marker in markers:
        condition |= Q(**{f"{field_name}__icontains": marker})
    return condition


_NOT_SENT = Q(error__startswith="not sent:")
# A call the server never answered, or a server that could not even list its tools.
_SERVER_FAILED = (
    Q(kind=Step.Kind.TOOL, status=Step.Status.ERROR) & _mentions_any("error", SERVER_FAILURE_MARKERS)
) | Q(kind=Step.Kind.CONNECT, status=Step.Status.ERROR)
_MODEL_FAILED = Q(kind=Step.Kind.ERROR, title__endswith=" failed")

# The fixed set of error classes the list can be filtered by. A conversation is in a class when
# any step of any of its turns is.
ERROR_CLASSES: dict[str, ErrorClass] = {
    "model": ErrorClass("model error — the provider call failed", _MODEL_FAILED),
    "invalid_call": ErrorClass(
        "invalid call — refused before it was sent (unknown tool, bad arguments)",
        Q(kind=Step.Kind.TOOL) & _NOT_SENT,
    ),
    "tool": ErrorClass(
        "tool error — the tool answered with an error",
        Q(kind=Step.Kind.TOOL, status=Step.Status.ERROR) & ~_NOT_SENT & ~_SERVER_FAILED,
    ),
    "server": ErrorClass("server crashed, unreachable or timed out", _SERVER_FAILED),
    "run": ErrorClass(
        "the run stopped — could not start, internal error, step limit",
        Q(kind=Step.Kind.ERROR) & ~_MODEL_FAILED,
    ),
}


@dataclass(frozen=True)
class Sort:
    label: str
    field: str
    descending: bool


# Sort keys as they appear in ``?sort=``; ties fall back to newest first.
SORTS: dict[str, Sort] = {
    "-created": Sort("newest first", "created_at", True),
    "created": Sort("oldest first", "created_at", False),
    "-duration": Sort("longest first", "duration", True),
    "duration": Sort("shortest first", "duration", False),
    "-tokens": Sort("most tokens first", "tokens", True),
    "tokens": Sort("fewest tokens first", "tokens", False),
}
DEFAULT_SORT = "-created"


@dataclass(frozen=True)
class ConversationFilters:
    """What to look for in the conversation list; an empty field does not filter.

    ``server`` — the conversation's servers, or any recorded exchange with that server (imported
    conversations keep server names only). ``tool`` — any tool call of that tool, by name
    (``get_weather_forecast``) or as ``server/tool``. ``model_profile`` — the profile's name.
    ``status`` — the status of the conversation's *latest* turn, i.e. what it is now (a failure
    in an earlier turn is what ``error`` finds). ``error`` — a key of ``ERROR_CLASSES``.
    ``owner`` — a username (only narrows what the user may see anyway). ``created_from`` /
    ``created_to`` — inclusive dates, in the site's time zone. ``q`` — full text in ``scope``
    (``conversations.search``: questions, answers, tool calls and results unless the raw payloads
    are asked for). ``sort`` — a key of ``SORTS``.
    """

    q: str = ""
    # Where ``q`` is looked for (``conversations.search.SCOPES``; none: its default scopes).
    scope: tuple[str, ...] = ()
    server: str = ""
    tool: str = ""
    model_profile: str = ""
    paradigm: str = ""
    status: str = ""
    error: str = ""
    owner: str = ""
    created_from: date | None = None
    created_to: date | None = None
    sort: str = DEFAULT_SORT


# PostgreSQL full text: the text search configuration (how much of each raw body is indexed:
# ``models.FTS_BODY_CHARS``).
FTS_CONFIG = "english"


def turn_search_document() -> SearchVector:
    """The searchable text of a turn on PostgreSQL.

    Migration ``0010_audit_indexes`` indexes the SQL this compiles to (GIN); the planner uses
    that index only for the very same expression, so change the two together.
    """
    return SearchVector("question", "answer", config=FTS_CONFIG)


def exchange_search_document() -> SearchVector:
    """The searchable text of an exchange on PostgreSQL (indexed as ``turn_search_document`` is):
    its request's span (``search_start``) and its response, or what stands for the response in
    search (``response_search``: a streamed reply as it assembled)."""
    return SearchVector(
        Case(
            When(search_start__isnull=True, then=Left("request_body", FTS_BODY_CHARS)),
            default=Substr("request_body", F("search_start") + 1, Least("search_length", FTS_BODY_CHARS)),
        ),
        Case(
            When(response_search="", then=Left("response_body", FTS_BODY_CHARS)),
            default=Left("response_search", FTS_BODY_CHARS),
        ),
        config=FTS_CONFIG,
    )


def _terms(text: str) -> list[str]:
    """Words, or "quoted phrases", of a search text."""
    return [phrase or word for phrase, word in re.findall(r'"([^"]+)"|(\S+)', text) if phrase or word]


def text_match(text: str) -> Q:
    """Conversations with ``text`` in a question, an answer or a raw exchange body (for a
    streamed reply, the text it assembled to: ``Exchange.response_search``; SQLite's fallback
    matches its raw events too).

    PostgreSQL: full-text search (``websearch_to_tsquery``: words are stemmed and all must occur
    in one turn or one exchange; "quoted phrases", ``or`` and ``-word`` work). Elsewhere (the
    SQLite default): every word or "quoted phrase" must occur, case-insensitively, in the same
    turn or the same exchange.
    """
    turns: QuerySet[Turn]
    exchanges: QuerySet[Exchange]
    if connection.vendor == "postgresql":
        query = SearchQuery(text, search_type="websearch", config=FTS_CONFIG)
        turns = Turn.objects.annotate(document=turn_search_document()).filter(document=query)
        exchanges = Exchange.objects.annotate(document=exchange_search_document()).filter(document=query)
    else:
        terms = _terms(text)
        turns = Turn.objects.filter(*[Q(question__icontains=t) | Q(answer__icontains=t) for t in terms])
        exchanges = Exchange.objects.filter(
            *[
                Q(request_body__icontains=t) | Q(response_body__icontains=t) | Q(response_search__icontains=t)
                for t in terms
            ]
        )
    # One IN over a UNION, not two INs joined by OR: PostgreSQL can only turn a lone IN into a
    # semi-join, and so start from the few matches of a rare word instead of testing every
    # visible conversation against both lists. A matching exchange names its conversation
    # itself: no join to its turn.
    in_turns = turns.order_by().values("conversation_id")
    in_exchanges = exchanges.filter(conversation__isnull=False).order_by().values("conversation_id")
    return Q(pk__in=in_turns.union(in_exchanges, all=True))


def _in_conversations(steps_or_exchanges: QuerySet[Step] | QuerySet[Exchange]) -> Q:
    if steps_or_exchanges.model is Exchange:
        return Q(pk__in=steps_or_exchanges.filter(conversation__isnull=False).values("conversation_id"))
    return Q(pk__in=steps_or_exchanges.filter(turn__isnull=False).values("turn__conversation_id"))


def _usage_count(key: str) -> Case:
    """One whole-number key of a step's ``usage``, NULL when absent or not a whole number."""
    return Case(
        When(
            # ``\Z``, not ``$``: SQLite's REGEXP is Python's, whose ``$`` also matches before a
            # final newline (PostgreSQL's does not).
            **{f"usage__{key}__regex": r"^[0-9]+\Z"},
            then=Cast(KeyTextTransform(key, "usage"), BigIntegerField()),
        ),
        default=Value(None),
        output_field=BigIntegerField(),
    )


def step_tokens_sql() -> Coalesce:
    """The tokens a model call used, as the provider reported them (OpenAI, Gemini, Anthropic
    names); ``summaries.step_tokens`` is its Python twin."""
    return Coalesce(
        _usage_count("total_tokens"),
        _usage_count("totalTokenCount"),
        _usage_count("input_tokens") + _usage_count("output_tokens"),
        output_field=BigIntegerField(),
    )


def _measured(conversations: QuerySet[Conversation]) -> QuerySet[Conversation]:
    """Annotate ``latest_status``, ``duration`` (the sum of its turns' run times, NULL before any
    turn finished) and ``tokens`` (the sum of the provider-reported usage of every model call,
    NULL when none reported any)."""
    latest = Turn.objects.filter(conversation=OuterRef("pk")).order_by("-seq").values("status")[:1]
    run_time = ExpressionWrapper(F("finished_at") - F("started_at"), output_field=DurationField())
    durations = (
        Turn.objects.filter(conversation=OuterRef("pk"), started_at__isnull=False, finished_at__isnull=False)
        .order_by()
        .values("conversation")
        .annotate(total=Sum(run_time))
        .values("total")
    )
    # A turn's tokens: as its seal summarized them, or, for a turn without a summary (running,
    # or ended before summaries were kept), summed from its steps (``conversations.summaries``).
    from_steps = (
        Step.objects.filter(turn=OuterRef("pk"))
        .order_by()
        .values("turn")
        .annotate(total=Sum(step_tokens_sql()))
        .values("total")
    )
    turn_tokens = Case(
        When(UNSUMMARIZED, then=Subquery(from_steps, output_field=BigIntegerField())),
        default=F("usage_total"),
        output_field=BigIntegerField(),
    )
    tokens = (
        Turn.objects.filter(conversation=OuterRef("pk"))
        .order_by()
        .values("conversation")
        .annotate(total=Sum(turn_tokens))
        .values("total")
    )
    return conversations.annotate(
        latest_status=Subquery(latest),
        duration=Subquery(durations, output_field=DurationField()),
        tokens=Subquery(tokens, output_field=BigIntegerField()),
    )


def _conditions(filters: ConversationFilters) -> list[Q]:
    conditions: list[Q] = []
    if filters.server:
        conditions.append(
            Q(
                pk__in=Conversation.servers.through.objects.filter(mcpserver__name=filters.server).values(
                    "conversation_id"
                )
            )
            | _in_conversations(
                Exchange.objects.filter(Q(server__name=filters.server) | Q(server_name=filters.server))
            )
        )
    if filters.tool:
        calls = Step.objects.filter(kind=Step.Kind.TOOL).filter(
            Q(tool_name=filters.tool) | Q(title=filters.tool)
        )
        conditions.append(_in_conversations(calls))
    if filters.model_profile:
        conditions.append(Q(model_profile__name=filters.model_profile))
    if filters.paradigm:
        conditions.append(Q(paradigm=filters.paradigm))
    if filters.status:
        conditions.append(Q(latest_status=filters.status))
    if filters.error:
        conditions.append(_in_conversations(Step.objects.filter(ERROR_CLASSES[filters.error].steps)))
    if filters.owner:
        conditions.append(Q(owner__username=filters.owner))
    if filters.created_from is not None:
        conditions.append(Q(created_at__date__gte=filters.created_from))
    if filters.created_to is not None:
        conditions.append(Q(created_at__date__lte=filters.created_to))
    if filters.q.strip():
        conditions.append(scoped_text_match(filters.q.strip(), filters.scope, raw=text_match))
    return conditions


def conversation_search(
    *, user: AbstractBaseUser | AnonymousUser, filters: ConversationFilters
) -> QuerySet[Conversation]:
    """The conversations ``user`` may see (``conversation_list``) that match ``filters``, sorted.

    Each conversation appears once however many of its turns, steps or exchanges match, and
    carries the annotations ``latest_status``, ``duration`` and ``tokens``. Conversations
    without a duration or a token count sort last either way.

    Raises:
        ValueError: an unknown ``error`` class or ``sort`` key.
    """
    if filters.error and filters.error not in ERROR_CLASSES:
        raise ValueError(f"unknown error class {filters.error!r}")
    sort = SORTS.get(filters.sort)
    if sort is None:
        raise ValueError(f"unknown sort {filters.sort!r}")
    column = F(sort.field)
    # created_at is never NULL: a plain order lets its index serve the page (NULLS LAST would
    # not match the index, and every match would be sorted to show 25).
    nulls_last = True if sort.field != "created_at" else None
    order = column.desc(nulls_last=nulls_last) if sort.descending else column.asc(nulls_last=nulls_last)
    return (
        _measured(conversation_list(user=user))
        .filter(*_conditions(filters))
        .order_by(order, "-created_at", "-pk")
    )


# The list counts its matches only this far (and at least one page beyond the page shown):
# past it, the count says "more than". Counting a million rows exactly, on every page, for a
# number nobody reads, is what made the list slow.
LIST_COUNT_CAP = 1000
CONVERSATIONS_PER_PAGE = 25


class CappedPaginator(Paginator[Conversation]):
    """A paginator that counts at most ``cap + 1`` matches (``capped`` then says there are more).

    The filtered query runs once: it yields the matching ids in order, up to the cap, which
    are the count; the page's conversations are then loaded by id. (Counting, then asking
    the filtered query again for the page, evaluated a text search twice.)
    """

    def __init__(self, object_list: QuerySet[Conversation], per_page: int, *, cap: int) -> None:
        super().__init__(object_list, per_page)
        self.cap = cap

    @cached_property
    def ids(self) -> list[int]:
        queryset: QuerySet[Conversation] = self.object_list  # type: ignore[assignment]
        return list(queryset.values_list("pk", flat=True)[: self.cap + 1])

    @cached_property
    def count(self) -> int:
        return len(self.ids)

    @property
    def capped(self) -> bool:
        return self.count > self.cap

    def page(self, number: int | str) -> Page[Conversation]:
        number = self.validate_number(number)
        bottom = (number - 1) * self.per_page
        wanted = self.ids[bottom : bottom + self.per_page]
        # These ids came through conversation_search, i.e. the access rule: loading them by id
        # shows nothing the user may not see.
        loaded = {c.pk: c for c in _measured(_listed(Conversation.objects.filter(pk__in=wanted)))}
        return Page([loaded[pk] for pk in wanted if pk in loaded], number, self)


def conversation_page(
    conversations: QuerySet[Conversation], number: object, *, per_page: int = CONVERSATIONS_PER_PAGE
) -> Page[Conversation]:
    """One page of ``conversation_search`` results, counted up to ``LIST_COUNT_CAP`` or to the
    page after the one asked for, whichever is further (so every page can be reached and "next"
    is always right). An unreadable ``number`` is page 1; one past the end is the last page."""
    try:
        requested = max(1, int(str(number)))
    except ValueError:
        requested = 1
    cap = max(LIST_COUNT_CAP, (requested + 1) * per_page)
    return CappedPaginator(conversations, per_page, cap=cap).get_page(requested)


@dataclass(frozen=True)
class ConversationRow:
    """One line of the conversation list."""

    conversation: Conversation
    status: str
    duration_ms: float | None
    tokens: int | None
    tools: list[str]


def tool_label(server: str, tool: str) -> str:
    return f"{server}/{tool}" if server else tool


def conversation_rows(*, conversations: Sequence[Conversation]) -> list[ConversationRow]:
    """The list page's rows for a page of ``conversation_search`` results, with the tools each
    called (distinct ``server/tool`` names, in the order first called, a server by its current
    name). An ended turn's tools come from its summary (``conversations.summaries``); only turns
    without one have their steps read (one query for the page's turns, at most one each for
    their servers' names and for those steps)."""
    tools: dict[int, list[str]] = {conversation.pk: [] for conversation in conversations}
    turns = list(
        Turn.objects.filter(conversation__in=list(tools))
        .order_by("conversation_id", "seq")
        .values_list("conversation_id", "pk", "tools_called")
    )
    unsummarized = [pk for _, pk, called in turns if called is None]
    from_steps: dict[int, list[tuple[str, str]]] = {}
    if unsummarized:
        calls = (
            Step.objects.filter(kind=Step.Kind.TOOL, turn__in=unsummarized)
            .order_by("turn_id", "seq", "id")
            .values_list("turn_id", "server__name", "server_name", "tool_name")
        )
        for turn_id, server, server_name, tool in calls:
            from_steps.setdefault(turn_id, []).append((server or server_name or "", tool))
    names = _server_names(
        {
            entry[0]
            for _, _, called in turns
            if isinstance(called, list)
            for entry in called
            if isinstance(entry, list) and entry and _is_id(entry[0])
        }
    )
    for conversation_id, turn_id, called in turns:
        if called is None:
            pairs = from_steps.get(turn_id, [])
        else:
            pairs = [_summarized_call(entry, names) for entry in called] if isinstance(called, list) else []
        labels = tools[conversation_id]
        for server, tool in pairs:
            label = tool_label(server, tool)
            if label and label not in labels:
                labels.append(label)
    rows = []
    for conversation in conversations:
        duration: timedelta | None = getattr(conversation, "duration", None)
        tokens: int | None = getattr(conversation, "tokens", None)
        rows.append(
            ConversationRow(
                conversation=conversation,
                status=getattr(conversation, "latest_status", None) or "",
                duration_ms=duration.total_seconds() * 1000 if duration is not None else None,
                tokens=tokens,
                tools=tools[conversation.pk],
            )
        )
    return rows


def _server_names(ids: Collection[int]) -> dict[int, str]:
    """The current names of these servers (a server deleted since has none)."""
    if not ids:
        return {}
    servers = Step._meta.get_field("server").related_model  # not imported: it imports the gateway
    return dict(servers._default_manager.filter(pk__in=ids).values_list("pk", "name"))


def _is_id(value: object) -> bool:
    """Whether ``value`` can be a row's id (a summary edited by hand may hold anything)."""
    return type(value) is int and 0 < value < 2**63


def _summarized_call(entry: object, names: dict[int, str]) -> tuple[str, str]:
    """A summary's ``[server id, server name, tool name]`` as (server, tool): the server by its
    current name, by the name it had when the turn ran once it is gone. An entry of another
    shape (a summary edited by hand) names nothing."""
    if not isinstance(entry, list) or len(entry) != 3 or not isinstance(entry[2], str):
        return "", ""
    server_id, server_name, tool = entry
    server = names.get(server_id, "") if _is_id(server_id) else ""
    return server or (server_name if isinstance(server_name, str) else ""), tool


def exchange_get(*, conversation: Conversation, exchange_id: int) -> Exchange | None:
    """One exchange of ``conversation``; None if it is not one of its turns'."""
    return Exchange.objects.filter(turn__conversation=conversation, pk=exchange_id).first()


def turn_for_cancel(*, user: AbstractBaseUser | AnonymousUser, turn_id: int) -> Turn | None:
    """The turn ``user`` may cancel: one of their own conversations', or any for staff; None
    otherwise (a missing turn and another user's answer the same)."""
    if not user.is_authenticated:
        return None
    turns = Turn.objects.select_related("conversation").filter(pk=turn_id)
    if not getattr(user, "is_staff", False):
        turns = turns.filter(conversation__owner_id=user.pk)
    return turns.first()
