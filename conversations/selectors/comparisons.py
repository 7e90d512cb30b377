"""A comparison's reads: one question under several paradigms and models, each run measured."""

from __future__ import annotations

from dataclasses import dataclass, field
from uuid import UUID

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.db.models import (
    Prefetch,
    QuerySet,
)

from conversations.loop.providers import USAGE_INPUT_KEYS, USAGE_OUTPUT_KEYS
from conversations.models import Comparison, Conversation, Exchange, Step, Turn
from conversations.typealias import JSONValue

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
    ``problems`` are what its ``connect`` step reported as failed (a server that did not connect,
    tools withheld): a run that answered without the tools it was meant to have says so.
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
    problems: list[str] = field(default_factory=list)


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
        problems=[
            str(problem)
            for step in steps
            if step.kind == Step.Kind.CONNECT and step.status == Step.Status.ERROR
            for problem in (step.diagnostics if isinstance(step.diagnostics, list) else [step.diagnostics])
            if problem
        ],
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
