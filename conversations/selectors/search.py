"""Finding conversations: the list's filters, full-text search, sorting, the capped pager and
the list's rows."""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from functools import cached_property

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.contrib.postgres.search import SearchQuery, SearchVector
from django.core.paginator import Page, Paginator
from django.db import connection
from django.db.models import (
    BigIntegerField,
    Case,
    DurationField,
    ExpressionWrapper,
    F,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
    When,
)
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Coalesce, Least, Left, Substr

from conversations.models import FTS_BODY_CHARS, Conversation, Exchange, Step, Turn
from conversations.record.summaries import UNSUMMARIZED
from conversations.selectors.access import _listed, conversation_list
from conversations.selectors.scopes import scoped_text_match


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
    (``conversations.selectors.scopes``: questions, answers, tool calls and results unless the raw payloads
    are asked for). ``sort`` — a key of ``SORTS``.
    """

    q: str = ""
    # Where ``q`` is looked for (``conversations.selectors.scopes.SCOPES``; none: its default scopes).
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
    # or ended before summaries were kept), summed from its steps (``conversations.record.summaries``).
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
# The highest page number a list is asked for (one past the end is the last page anyway).
PAGE_MOST = 10**9


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
        # A number past any list is its last page; kept within what a SQL LIMIT takes.
        requested = min(max(1, int(str(number))), PAGE_MOST)
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
    name). An ended turn's tools come from its summary (``conversations.record.summaries``); only turns
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
