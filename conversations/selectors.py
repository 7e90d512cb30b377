"""Reads about conversations: what a user may see, and the transcript shapes the UI, API and CLI share."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from uuid import UUID

from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.db.models import Count, Prefetch, Q, QuerySet

from conversations.models import Comparison, Conversation, Exchange, ModelProfile, Step, Turn
from conversations.splicing import prompt_diff
from inspector.typealias import JSONDict, JSONValue
from servers.models import McpServer


def conversation_list(*, user: AbstractBaseUser | AnonymousUser) -> QuerySet[Conversation]:
    """The conversations ``user`` may see, newest first.

    The one access rule, used by every page, API call, export and websocket: a conversation is
    visible to its owner and to the members of any team the owner belongs to; staff see all.
    """
    if not user.is_authenticated:
        return Conversation.objects.none()
    visible = Conversation.objects.all()
    if not getattr(user, "is_staff", False):
        peers = get_user_model().objects.filter(inspector_teams__members=user.pk).values("pk")
        visible = visible.filter(Q(owner_id=user.pk) | Q(owner_id__in=peers))
    return (
        visible.select_related("model_profile", "owner")
        .annotate(turn_count=Count("turns"))
        .order_by("-created_at")
    )


def conversation_get(*, user: AbstractBaseUser | AnonymousUser, public_id: UUID | str) -> Conversation:
    """One conversation ``user`` may see.

    Raises:
        Conversation.DoesNotExist: no such conversation, or not this user's (the same answer).
    """
    return conversation_list(user=user).get(public_id=public_id)


def _exchanges() -> Prefetch[str, QuerySet[Exchange], str]:
    return Prefetch("exchanges", queryset=Exchange.objects.select_related("server").order_by("seq", "id"))


def _rows() -> QuerySet[Step]:
    children = Step.objects.select_related("server").prefetch_related(_exchanges()).order_by("seq")
    return (
        Step.objects.filter(parent__isnull=True)
        .select_related("server")
        .prefetch_related(_exchanges(), Prefetch("children", queryset=children))
        .order_by("seq")
    )


def turn_rows(*, turn: Turn) -> list[Step]:
    """The top-level steps of a turn (the page's rows), children and exchanges loaded."""
    return list(_rows().filter(turn=turn))


def step_row(*, conversation: Conversation, step_id: int) -> Step | None:
    """One row of a conversation, loaded for rendering; None if it is not this conversation's."""
    return _rows().filter(turn__conversation=conversation, pk=step_id).first()


def rows_changed_since(*, conversation: Conversation, since: datetime) -> list[Step]:
    """Rows touched at or after ``since`` (inclusive: a re-sent row replaces itself)."""
    return list(_rows().filter(turn__conversation=conversation, updated_at__gte=since))


def conversation_turns(*, conversation: Conversation) -> list[Turn]:
    return list(conversation.turns.order_by("seq"))


def turn_get(*, conversation: Conversation, turn_id: int) -> Turn | None:
    return conversation.turns.filter(pk=turn_id).first()


def profiles_for_form() -> QuerySet[ModelProfile]:
    return ModelProfile.objects.order_by("-is_demo", "name")


def servers_for_form() -> QuerySet[McpServer]:
    return McpServer.objects.filter(enabled=True).order_by("-is_demo", "name")


def _body(text: str) -> JSONValue:
    """A raw body as stored (the exact text), for the transcript."""
    return text


def exchange_json(exchange: Exchange) -> JSONDict:
    return {
        "id": exchange.pk,
        "seq": exchange.seq,
        "channel": exchange.channel,
        "direction": exchange.direction,
        "label": exchange.label,
        "server": exchange.server.name if exchange.server else None,
        "jsonrpc_id": exchange.jsonrpc_id or None,
        "status": exchange.status,
        "error": exchange.error,
        "started_at": exchange.started_at.isoformat(),
        "duration_ms": exchange.duration_ms,
        "request_headers": exchange.request_headers,
        "request_body": _body(exchange.request_body),
        "response_headers": exchange.response_headers,
        "response_body": _body(exchange.response_body),
    }


def step_json(step: Step) -> JSONDict:
    return {
        "id": step.pk,
        "seq": step.seq,
        "parent": step.parent_id,
        "kind": step.kind,
        "status": step.status,
        "title": step.title,
        "prompt": step.prompt,
        "prompt_exact": step.prompt_exact,
        "text": step.text,
        "calls": step.calls,
        "diagnostics": step.diagnostics,
        "server": step.server.name if step.server else None,
        "tool_name": step.tool_name,
        "arguments": step.arguments,
        "result": step.result,
        "is_error": step.is_error,
        "error": step.error,
        "started_at": step.started_at.isoformat(),
        "finished_at": step.finished_at.isoformat() if step.finished_at else None,
        "duration_ms": step.duration_ms,
        "exchanges": [exchange_json(e) for e in step.exchanges.all()],
    }


def turn_json(turn: Turn) -> JSONDict:
    steps = (
        Step.objects.filter(turn=turn).select_related("server").prefetch_related(_exchanges()).order_by("seq")
    )
    return {
        "id": turn.pk,
        "seq": turn.seq,
        "question": turn.question,
        "status": turn.status,
        "answer": turn.answer,
        "error": turn.error,
        "paradigm": turn.paradigm,
        "tool_choice": turn.tool_choice,
        "tool_choice_name": turn.tool_choice_name or None,
        "model": turn.model_name,
        "tools": turn.tools,
        "created_at": turn.created_at.isoformat(),
        "started_at": turn.started_at.isoformat() if turn.started_at else None,
        "finished_at": turn.finished_at.isoformat() if turn.finished_at else None,
        "steps": [step_json(s) for s in steps],
    }


def conversation_transcript(*, conversation: Conversation) -> JSONDict:
    """The whole conversation as JSON: every turn, step and raw exchange (API and ``ask --json``)."""
    return {
        "id": str(conversation.public_id),
        "title": conversation.title,
        "owner": conversation.owner.get_username(),
        "model_profile": {
            "name": conversation.model_profile.name,
            "provider": conversation.model_profile.provider,
            "model": conversation.model_profile.model,
            "demo": conversation.model_profile.is_demo,
        },
        "paradigm": conversation.paradigm,
        "tool_choice": conversation.tool_choice,
        "servers": [s.name for s in conversation.servers.order_by("name")],
        "created_at": conversation.created_at.isoformat(),
        "turns": [turn_json(t) for t in conversation.turns.order_by("seq")],
    }


def pretty_json(text: str) -> tuple[str, bool]:
    """``text`` pretty-printed if it is JSON; returns (text, was_json)."""
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False), True
    except (ValueError, TypeError):
        return text, False


# --- the spliced prompt: what changed since the previous model call ----------------------------

DIFF_CONTEXT_LINES = 3
MODEL_CALL_KINDS = (Step.Kind.DECIDE, Step.Kind.ANSWER)


@dataclass(frozen=True)
class PromptDiff:
    """A line diff of two spliced prompts, trimmed to the changes and a little context.

    ``lines`` holds ``(op, text)`` pairs: ``"+"`` added, ``"-"`` removed, ``" "`` unchanged
    context, ``"@"`` a run of unchanged lines left out (``text`` says how many).
    """

    lines: list[tuple[str, str]]
    added: int
    removed: int


def _context(lines: list[str], *, before: bool, after: bool) -> list[tuple[str, str]]:
    """Unchanged lines, cut to the few next to a change (``before``: a change precedes them)."""
    keep_head = DIFF_CONTEXT_LINES if before else 0
    keep_tail = DIFF_CONTEXT_LINES if after else 0
    if len(lines) <= keep_head + keep_tail:
        return [(" ", line) for line in lines]
    head, tail = lines[:keep_head], lines[len(lines) - keep_tail :]
    gap = [("@", f"{len(lines) - keep_head - keep_tail} unchanged line(s)")]
    return [(" ", line) for line in head] + gap + [(" ", line) for line in tail]


def prompt_diff_lines(previous: str, current: str) -> PromptDiff:
    """``current`` against ``previous`` line by line (``splicing.prompt_diff``), with some context."""
    chunks = prompt_diff(previous, current)
    if all(op == "same" for op, _ in chunks):
        return PromptDiff(lines=[], added=0, removed=0)
    lines: list[tuple[str, str]] = []
    added = removed = 0
    for index, (op, text) in enumerate(chunks):
        chunk = text.splitlines()
        if op == "added":
            lines.extend(("+", line) for line in chunk)
            added += len(chunk)
        elif op == "removed":
            lines.extend(("-", line) for line in chunk)
            removed += len(chunk)
        else:
            lines.extend(_context(chunk, before=index > 0, after=index < len(chunks) - 1))
    return PromptDiff(lines=lines, added=added, removed=removed)


def step_prompt_diff(*, step: Step) -> PromptDiff | None:
    """What changed in the spliced prompt since the previous model call of the same turn.

    None for a step without a prompt, and for the first model call of its turn (nothing to
    compare with). The previous call is the nearest earlier decide/answer step (by ``seq``)
    that recorded a prompt.
    """
    if step.kind not in MODEL_CALL_KINDS or not step.prompt:
        return None
    previous = (
        Step.objects.filter(turn_id=step.turn_id, seq__lt=step.seq, kind__in=MODEL_CALL_KINDS)
        .exclude(prompt="")
        .order_by("-seq")
        .values_list("prompt", flat=True)
        .first()
    )
    if previous is None:
        return None
    return prompt_diff_lines(previous, step.prompt)


# --- comparisons: one question under several paradigms and models --------------------------------

# The names providers give their token counts (OpenAI Chat / Responses, Anthropic, Gemini).
USAGE_IN_KEYS = ("prompt_tokens", "input_tokens", "promptTokenCount")
USAGE_OUT_KEYS = ("completion_tokens", "output_tokens", "candidatesTokenCount")


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
        tokens_in=_count_sum([step.usage for step in model_steps], USAGE_IN_KEYS),
        tokens_out=_count_sum([step.usage for step in model_steps], USAGE_OUT_KEYS),
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


def run_summary_json(run: RunSummary) -> JSONDict:
    """A run's measurements as JSON (``ask --compare --json``)."""
    return {
        "conversation": str(run.conversation.public_id),
        "paradigm": run.paradigm,
        "profile": run.profile,
        "model": run.model,
        "demo": run.is_demo,
        "status": run.status,
        "steps": run.steps,
        "model_calls": run.model_calls,
        "tokens_in": run.tokens_in,
        "tokens_out": run.tokens_out,
        "prompt_tokens": run.prompt_tokens,
        "prompt_encodings": list(run.prompt_encodings),
        "llm_ms": run.llm_ms,
        "wall_ms": run.wall_ms,
        "tool": run.tool or None,
        "arguments": run.arguments,
        "answered": run.answered,
        "answer": run.answer,
        "error": run.error,
    }
