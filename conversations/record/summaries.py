"""What the conversation list shows of an ended turn, worked out once from its steps.

The list shows each conversation's tokens and the tools it called; read from the steps, that is
every step of every listed conversation on every page (a 10,000-step conversation on the page:
its whole step table, 17,400 pages of it, for one number and a few names). An ended turn's
steps no longer change, so its seal (``integrity.turn_seal``), which reads them back anyway,
stores the two on the turn (``Turn.usage_total``, ``Turn.tools_called``); the list reads steps
only for turns without them (running, or ended before summaries were kept:
``selectors.conversation_search``, ``selectors.conversation_rows``).

``step_tokens`` is the Python twin of ``selectors.step_tokens_sql``: both give the same count
for every ``usage`` value (a test holds them to it).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from typing import Any, NamedTuple

from django.db import transaction
from django.db.models import Q

from conversations.models import Step, Turn

# What PostgreSQL's ``bigint`` holds: a larger count is no count (the SQL's cast would fail).
_BIGINT_MOST = 2**63 - 1
_DIGITS = re.compile(r"[0-9]+")


# A turn without a summary: SQL NULL, or a JSON null put there by hand, which reads as None in
# Python too (the list reads such a turn's steps). Any other value is a summary (one that is not
# a list names no tool).
UNSUMMARIZED = Q(tools_called__isnull=True) | Q(tools_called=None)


class TurnSummary(NamedTuple):
    usage_total: int | None
    tools_called: list[list[Any]]


def _usage_count(usage: object, key: str) -> int | None:
    """``usage[key]`` as the SQL reads it: a JSON whole number or a string of ASCII digits, no
    sign, point or exponent (its text must match ``^[0-9]+$``); anything else is no count."""
    if not isinstance(usage, dict):
        return None
    value = usage.get(key)
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        count = value if value >= 0 else None
    elif isinstance(value, str) and _DIGITS.fullmatch(value):
        count = int(value)
    else:
        return None
    return count if count is not None and count <= _BIGINT_MOST else None


def step_tokens(usage: object) -> int | None:
    """The tokens one model call used, as its provider reported them: OpenAI's ``total_tokens``,
    else Gemini's ``totalTokenCount``, else Anthropic's ``input_tokens`` + ``output_tokens``."""
    for key in ("total_tokens", "totalTokenCount"):
        count = _usage_count(usage, key)
        if count is not None:
            return count
    given, made = _usage_count(usage, "input_tokens"), _usage_count(usage, "output_tokens")
    return given + made if given is not None and made is not None else None


def turn_summary(steps: Iterable[Step]) -> TurnSummary:
    """The tokens of ``steps`` (NULL when none reported any) and the tools they called, each
    ``[server id, server name, tool name]`` once, in the order of ``steps``."""
    total: int | None = None
    tools: list[list[Any]] = []
    seen: set[tuple[Any, ...]] = set()
    for step in steps:
        count = step_tokens(step.usage)
        if count is not None:
            total = count if total is None else total + count
        if step.kind == Step.Kind.TOOL:
            called = (step.server_id, step.server_name, step.tool_name)
            if called not in seen:
                seen.add(called)
                tools.append(list(called))
    if total is not None and total > _BIGINT_MOST:
        total = None  # past what the column holds: no count rather than a failed seal
    return TurnSummary(total, tools)


def summary_extended(previous: TurnSummary | None, steps: Iterable[Step]) -> TurnSummary | None:
    """What ``turn_summary`` gives for the steps ``previous`` summarized (None: no step) and
    ``steps`` after them, from ``previous`` (a stored summary) without reading those steps; None
    when ``previous`` cannot tell (no tokens while ``steps`` report some: none were reported, or
    more than the column holds)."""
    if previous is None:
        return turn_summary(steps)
    if not all(isinstance(entry, list) for entry in previous.tools_called):
        return None
    total = previous.usage_total
    tools = [list(entry) for entry in previous.tools_called]
    seen = {tuple(entry) for entry in tools}
    for step in steps:
        count = step_tokens(step.usage)
        if count is not None:
            if total is None:
                return None
            total += count
        if step.kind == Step.Kind.TOOL:
            called = (step.server_id, step.server_name, step.tool_name)
            if called not in seen:
                seen.add(called)
                tools.append(list(called))
    if total is not None and total > _BIGINT_MOST:
        total = None
    return TurnSummary(total, tools)


def summary_matches(usage_total: object, tools_called: object, steps: Iterable[Step]) -> bool:
    """Whether a stored summary is what ``steps`` give (verification: the steps were just checked
    against their seal). A tool's server id is a link to a live row, not part of the record (the
    seal leaves a step's server out too): a deleted server unlinks the steps that called it, so
    where a step no longer names a server, any id the summary kept for it is accepted."""
    total, tools = turn_summary(steps)
    if usage_total != total or not isinstance(tools_called, list):
        return False
    ids: dict[tuple[Any, Any], set[Any]] = {}
    for server_id, name, tool in tools:
        ids.setdefault((name, tool), set()).add(server_id)
    kept: list[tuple[Any, Any]] = []
    for entry in tools_called:
        if not isinstance(entry, list) or len(entry) != 3:
            return False
        server_id, name, tool = entry
        if server_id is not None and type(server_id) is not int:  # a hand-made one: no id at all
            return False
        pair = (name, tool) if isinstance(name, str | None) and isinstance(tool, str) else None
        made = ids.get(pair) if pair is not None else None
        if pair is None or made is None or (server_id not in made and None not in made):
            return False
        if pair not in kept:
            kept.append(pair)
    return kept == list(ids)


def turns_summarize(*, batch: int = 500) -> int:
    """Summarize every ended turn that has no summary (ended before summaries were kept), ``batch``
    turns at a time, each batch in its own transaction; returns how many were summarized.

    An ended turn's steps are committed before it is marked ended and do not change after, so
    what is summarized here is what its seal would have summarized. Safe to run while turns run
    and to run again (a turn summarized meanwhile is left as it is). The steps are read as a
    stream, one turn's at a time in memory."""
    done = 0
    last = 0
    while True:
        ids = list(
            Turn.objects.filter(pk__gt=last, status__in=Turn.FINISHED)
            .filter(UNSUMMARIZED)
            .order_by("pk")
            .values_list("pk", flat=True)[:batch]
        )
        if not ids:
            return done
        steps = (
            Step.objects.filter(turn_id__in=ids)
            .only("turn_id", "seq", "kind", "usage", "server_id", "server_name", "tool_name")
            .order_by("turn_id", "seq", "id")
        )
        with transaction.atomic():
            for pk, made in itertools.groupby(steps.iterator(chunk_size=2000), key=lambda step: step.turn_id):
                done += _summarize(pk, made)
            # Turns without a step at all: an empty summary.
            done += (
                Turn.objects.filter(pk__in=ids, steps__isnull=True)
                .filter(UNSUMMARIZED)
                .update(usage_total=None, tools_called=[])
            )
        last = ids[-1]


def _summarize(turn_id: int, steps: Iterable[Step]) -> int:
    usage_total, tools_called = turn_summary(steps)
    return (
        Turn.objects.filter(pk=turn_id)
        .filter(UNSUMMARIZED)
        .update(usage_total=usage_total, tools_called=tools_called)
    )
