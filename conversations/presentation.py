"""What the pages and commands show of the selectors' reads: pretty-printed JSON, what changed in a
spliced prompt, a comparison's runs as JSON and its first tool call in each wire format, and how a
replay differs from the turn it replays."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from itertools import zip_longest
from typing import Literal, TypeAlias

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser

from conversations.escaping import carriable
from conversations.loop.providers import PROVIDERS, wire_excerpts
from conversations.loop.splicing import prompt_diff
from conversations.models import Comparison, Conversation, Exchange, Step, Turn
from conversations.selectors import (
    MODEL_CALL_KINDS,
    PREVIOUS_PROMPT,
    RunSummary,
    conversation_list,
    tool_label,
)
from conversations.strings import common_prefix_length
from conversations.typealias import JSONDict, JSONValue


def pretty_json(text: str) -> tuple[str, bool]:
    """``text`` pretty-printed if it is JSON; returns (text, was_json)."""
    try:
        # A "\ud800" escape in the body decodes to a lone surrogate: shown as the escape again.
        return carriable(json.dumps(json.loads(text), indent=2, ensure_ascii=False)), True
    except (ValueError, TypeError, RecursionError):  # RecursionError: JSON nested thousands deep
        return text, False


# --- the spliced prompt: what changed since the previous model call ----------------------------

DIFF_CONTEXT_LINES = 3


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


def _previous_prompt(step: Step) -> str | None:
    """The spliced prompt of the model call before ``step`` in its turn (None: none, or not one)."""
    if step.kind not in MODEL_CALL_KINDS or not step.prompt:
        return None
    loaded = getattr(step, PREVIOUS_PROMPT, None)
    if loaded is not None:
        return str(loaded) or None
    previous: str | None = (
        Step.objects.filter(turn_id=step.turn_id, seq__lt=step.seq, kind__in=MODEL_CALL_KINDS)
        .exclude(prompt="")
        .order_by("-seq")
        .values_list("prompt", flat=True)
        .first()
    )
    return previous


@dataclass(frozen=True)
class PromptChange:
    """How a spliced prompt differs from the previous model call's, found without a line diff.

    ``appended``: the previous prompt is where this one starts (a turn's prompts usually grow
    at the end); ``added_lines`` then counts the lines that follow it. ``first_line`` is the
    (1-based) line where the two first differ; ``delta_chars`` is the change in length. The line
    diff itself is ``step_prompt_diff``, loaded when asked for.
    """

    same: bool
    appended: bool
    first_line: int
    added_lines: int
    delta_chars: int


def step_prompt_change(*, step: Step) -> PromptChange | None:
    """What changed since the turn's previous model call, cheaply; None where there is nothing
    to compare (as ``step_prompt_diff``)."""
    previous = _previous_prompt(step)
    if previous is None:
        return None
    current = step.prompt
    shared = common_prefix_length(previous, current)
    appended = shared == len(previous)
    tail = current[shared:]
    added_lines = tail.count("\n") + (1 if tail and not tail.endswith("\n") else 0) if appended else 0
    return PromptChange(
        same=previous == current,
        appended=appended,
        first_line=current.count("\n", 0, shared) + 1,
        added_lines=added_lines,
        delta_chars=len(current) - len(previous),
    )


def step_prompt_diff(*, step: Step) -> PromptDiff | None:
    """What changed in the spliced prompt since the previous model call of the same turn.

    None for a step without a prompt, and for the first model call of its turn (nothing to
    compare with). The previous call is the nearest earlier decide/answer step (by ``seq``)
    that recorded a prompt.
    """
    previous = _previous_prompt(step)
    if previous is None:
        return None
    return prompt_diff_lines(previous, step.prompt)


# --- comparisons: a run's measurements as JSON ---------------------------------------------------


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
        "problems": [str(problem) for problem in run.problems],
    }


# --- comparisons: one tool call in each provider's wire format ---------------------------------

Marked = list[tuple[str, str]]


def json_marked(value: JSONValue, roles: dict[str, str], *, indent: int = 0, role: str = "") -> Marked:
    """``value`` as indented JSON text in pieces, each with the role (``name``, ``id``,
    ``arguments``, ...) of the nearest key above it in ``roles`` ("" for none)."""
    pad = "  " * indent
    pieces: Marked = []
    if isinstance(value, dict) and value:
        pieces.append(("{\n", role))
        for position, (key, item) in enumerate(value.items()):
            inner = roles.get(key, role)
            pieces.append((f"{pad}  ", role))
            pieces.append((f"{json.dumps(key, ensure_ascii=False)}: ", inner))
            pieces += json_marked(item, roles, indent=indent + 1, role=inner)
            pieces.append((",\n" if position < len(value) - 1 else "\n", role))
        pieces.append((pad + "}", role))
    elif isinstance(value, list) and value:
        pieces.append(("[\n", role))
        for position, item in enumerate(value):
            pieces.append((pad + "  ", role))
            pieces += json_marked(item, roles, indent=indent + 1, role=role)
            pieces.append((",\n" if position < len(value) - 1 else "\n", role))
        pieces.append((pad + "]", role))
    else:
        pieces.append((json.dumps(value, ensure_ascii=False), role))
    merged: Marked = []
    for text, kind in pieces:
        if merged and merged[-1][1] == kind:
            merged[-1] = (merged[-1][0] + text, kind)
        else:
            merged.append((text, kind))
    return merged


@dataclass(frozen=True)
class WireColumn:
    """One run's first tool call in its provider's wire format, from its recorded exchanges.

    ``sent`` is the call in the reply (None when the reply was streamed: see ``call_exchange``'s
    raw event stream); ``replayed`` the call as the next request sends it back; ``result`` the
    tool-result message of that request.
    """

    run: Conversation
    provider: str
    provider_label: str
    streamed: bool
    call_exchange: Exchange
    result_exchange: Exchange
    sent: Marked | None
    replayed: Marked
    result: Marked


def _json_or_none(text: str) -> JSONDict | None:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _wire_column(conversation: Conversation, exchanges: list[Exchange]) -> WireColumn | None:
    provider = conversation.model_profile.provider
    if provider not in PROVIDERS:
        return None
    for call_exchange, result_exchange in zip(exchanges, exchanges[1:], strict=False):
        request = _json_or_none(result_exchange.request_body)
        if request is None:
            continue
        found = wire_excerpts(provider, request, _json_or_none(call_exchange.response_body))
        if found is None:
            continue
        return WireColumn(
            run=conversation,
            provider=provider,
            provider_label=PROVIDERS[provider].label if provider in PROVIDERS else provider,
            streamed=_json_or_none(call_exchange.response_body) is None,
            call_exchange=call_exchange,
            result_exchange=result_exchange,
            sent=json_marked(found.sent, found.call_roles) if found.sent is not None else None,
            replayed=json_marked(found.replayed, found.call_roles),
            result=json_marked(found.result, found.result_roles),
        )
    return None


def comparison_wire_formats(*, comparison: Comparison) -> list[WireColumn]:
    """For each run of ``comparison`` that made a native tool call, that first call and its result
    as its provider's wire format carried them, in run order (runs without one are left out)."""
    conversations = list(comparison.conversations.select_related("model_profile").order_by("pk"))
    exchanges: dict[int, list[Exchange]] = {}
    llm = Exchange.objects.filter(
        turn__conversation__in=conversations, turn__seq=1, channel=Exchange.Channel.LLM, status="200"
    ).order_by("turn_id", "seq", "id")
    for exchange in llm.select_related("turn"):
        if exchange.turn is not None:
            exchanges.setdefault(exchange.turn.conversation_id, []).append(exchange)
    columns = [
        _wire_column(conversation, exchanges.get(conversation.pk, [])) for conversation in conversations
    ]
    return [column for column in columns if column is not None]


@dataclass(frozen=True)
class SentColumn:
    """What one run of a comparison sent its model on one of its model calls, and what came back:
    the spliced prompt of that call and its raw reply, as recorded. ``position`` is the call shown
    (from 1; 0 when the run has no such call) of the run's ``calls``."""

    run: Conversation
    prompt: str
    prompt_exact: bool
    reply: str
    # Where the prompt's text comes from (``Step.prompt_source``): what its label may claim.
    prompt_source: str
    exchange: Exchange | None
    position: int = 0
    calls: int = 0


# Which model call of each run Compare's "What was sent" shows: the first, the last, or the Nth.
SentCall: TypeAlias = Literal["first", "last"] | int
SENT_CALL_MAX = 999


# The largest turn or step number (their ``seq`` is a PositiveIntegerField), and the largest
# row id a request may name (ids are 64-bit).
SEQ_MAX = 2**31 - 1
ID_MAX = 2**63 - 1
_PLAIN_NUMBER = re.compile(r"[0-9]{1,19}")


def plain_number(raw: str, *, most: int) -> int | None:
    """A request parameter as a number of ASCII digits from 0 to ``most``, else None.
    (``str.isdigit`` also accepts "²" and other digits ``int`` refuses, at any length: a query
    parameter is whatever the sender typed.)"""
    if not _PLAIN_NUMBER.fullmatch(raw):
        return None
    number = int(raw)
    return number if number <= most else None


def sent_call(raw: str | None) -> SentCall:
    """The model call a request asks for (``?call=first|last|N``); anything else is the first."""
    if raw == "last":
        return "last"
    number = plain_number(raw or "", most=SENT_CALL_MAX)
    return number if number is not None and number > 0 else "first"


def _picked(count: int, call: SentCall) -> int:
    """The index of the call to show among ``count`` (-1: none)."""
    if count == 0:
        return -1
    if call == "first":
        return 0
    if call == "last":
        return count - 1
    return call - 1 if call <= count else -1


def comparison_sent(*, comparison: Comparison, call: SentCall = "first") -> list[SentColumn]:
    """For each run of ``comparison`` (run order), one model call of its first turn — the first,
    the last or the Nth (``call``) — with its prompt and raw reply; a run that has made no such
    call yet has empty ones (and says how many it made)."""
    conversations = list(comparison.conversations.select_related("model_profile").order_by("pk"))
    model_calls: dict[int, list[int]] = {}
    rows = (
        Step.objects.filter(turn__conversation__in=conversations, turn__seq=1, parent__isnull=True)
        .exclude(kind=Step.Kind.TOOL)
        .exclude(prompt="")
        .order_by("turn_id", "seq")
        .values_list("pk", "turn__conversation_id")
    )
    for step_id, conversation_id in rows:
        model_calls.setdefault(conversation_id, []).append(step_id)
    chosen: dict[int, int] = {}
    for conversation_id, step_ids in model_calls.items():
        index = _picked(len(step_ids), call)
        if index >= 0:
            chosen[conversation_id] = step_ids[index]
    steps = {step.pk: step for step in Step.objects.filter(pk__in=list(chosen.values()))}
    columns: list[SentColumn] = []
    for conversation in conversations:
        step_ids = model_calls.get(conversation.pk, [])
        step = steps.get(chosen.get(conversation.pk, 0))
        exchange = (
            step.exchanges.filter(channel=Exchange.Channel.LLM).order_by("seq", "id").first()
            if step is not None
            else None
        )
        columns.append(
            SentColumn(
                run=conversation,
                prompt=step.prompt if step is not None else "",
                prompt_exact=step.prompt_exact if step is not None else False,
                prompt_source=step.prompt_source if step is not None else "",
                reply=exchange.response_body if exchange is not None else "",
                exchange=exchange,
                position=step_ids.index(step.pk) + 1 if step is not None else 0,
                calls=len(step_ids),
            )
        )
    return columns


def sent_prompt_diff(columns: list[SentColumn], first: int, second: int) -> PromptDiff | None:
    """The line diff of two runs' prompts (``first`` and ``second``: 0-based positions in
    ``columns``); None for a position out of range or the same run twice."""
    if first == second or not (0 <= first < len(columns) and 0 <= second < len(columns)):
        return None
    return prompt_diff_lines(columns[first].prompt, columns[second].prompt)


# --- replays: the same question against today's servers and profile, compared ---------------------


@dataclass(frozen=True)
class Compared:
    """One value of the original turn beside the replay's."""

    original: JSONValue
    replay: JSONValue

    @property
    def same(self) -> bool:
        return self.original == self.replay


@dataclass(frozen=True)
class ToolChange:
    """A tool offered to both turns whose definition changed."""

    tool: str
    schema: PromptDiff | None
    description: Compared | None


@dataclass(frozen=True)
class ToolListDiff:
    """The tools offered to the replay against those the original was offered, by ``server/name``."""

    added: list[str]
    removed: list[str]
    changed: list[ToolChange]
    unchanged: int

    @property
    def same(self) -> bool:
        return not (self.added or self.removed or self.changed)


@dataclass(frozen=True)
class CallDiff:
    """The n-th tool call of each turn (``None`` on the side that made fewer calls)."""

    index: int
    tool: Compared
    arguments: Compared
    result: Compared
    status: Compared

    @property
    def same(self) -> bool:
        return self.tool.same and self.arguments.same and self.result.same and self.status.same


@dataclass(frozen=True)
class ReplayDiff:
    """What a replay did differently from the turn it replays: tools offered, calls, outcome."""

    original: Turn
    replay: Turn
    tools: ToolListDiff
    calls: list[CallDiff]
    status: Compared
    answer: Compared
    error: Compared

    @property
    def same(self) -> bool:
        return (
            self.tools.same
            and all(call.same for call in self.calls)
            and self.status.same
            and self.answer.same
            and self.error.same
        )


def _offered(tools: JSONValue) -> dict[str, JSONDict]:
    """A turn's stored tool list by ``server/name``."""
    offered: dict[str, JSONDict] = {}
    for tool in tools if isinstance(tools, list) else []:
        if isinstance(tool, dict):
            offered[tool_label(str(tool.get("server") or ""), str(tool.get("name") or ""))] = tool
    return offered


def _schema_text(schema: JSONValue) -> str:
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False)


def _tool_change(name: str, before: JSONDict, after: JSONDict) -> ToolChange | None:
    old_schema, new_schema = before.get("inputSchema"), after.get("inputSchema")
    old_text, new_text = before.get("description") or "", after.get("description") or ""
    if old_schema == new_schema and old_text == new_text:
        return None
    return ToolChange(
        tool=name,
        schema=(
            prompt_diff_lines(_schema_text(old_schema), _schema_text(new_schema))
            if old_schema != new_schema
            else None
        ),
        description=Compared(old_text, new_text) if old_text != new_text else None,
    )


def tool_list_diff(*, original: JSONValue, replay: JSONValue) -> ToolListDiff:
    """Two stored tool lists (``Turn.tools``) compared by ``server/name``: inputSchema and description."""
    before, after = _offered(original), _offered(replay)
    changed = [
        change
        for name in before
        if name in after and (change := _tool_change(name, before[name], after[name])) is not None
    ]
    return ToolListDiff(
        added=[name for name in after if name not in before],
        removed=[name for name in before if name not in after],
        changed=changed,
        unchanged=len([name for name in before if name in after]) - len(changed),
    )


def _tool_calls(turn: Turn) -> list[Step]:
    return list(Step.objects.filter(turn=turn, kind=Step.Kind.TOOL).select_related("server").order_by("seq"))


def _outcome(step: Step) -> JSONValue:
    """What came back from a call: the result, else the error text (a call never sent has only that)."""
    return step.result if step.result is not None else (step.error or None)


def _call_side(step: Step | None) -> tuple[JSONValue, JSONValue, JSONValue, JSONValue]:
    if step is None:
        return None, None, None, None
    tool = tool_label(step.server.name if step.server else step.server_name, step.tool_name)
    return tool, step.arguments, _outcome(step), step.status


def replay_diff(*, original: Turn, replay: Turn) -> ReplayDiff:
    """The replay against the original, call by call in the order the calls were made."""
    calls = []
    pairs = zip_longest(_tool_calls(original), _tool_calls(replay))
    for index, (before, after) in enumerate(pairs, start=1):
        old, new = _call_side(before), _call_side(after)
        calls.append(
            CallDiff(
                index=index,
                tool=Compared(old[0], new[0]),
                arguments=Compared(old[1], new[1]),
                result=Compared(old[2], new[2]),
                status=Compared(old[3], new[3]),
            )
        )
    return ReplayDiff(
        original=original,
        replay=replay,
        tools=tool_list_diff(original=original.tools, replay=replay.tools),
        calls=calls,
        status=Compared(original.status, replay.status),
        answer=Compared(original.answer, replay.answer),
        error=Compared(original.error, replay.error),
    )


@dataclass(frozen=True)
class ReplaySummary:
    """A replay conversation's link to what it replays, for its page.

    ``original`` is None when the user may not see the original conversation (the replay's
    owner may have had access that this viewer lacks); ``diff`` is None until both turns exist
    and the replay has finished.
    """

    original: Turn | None
    replay: Turn | None
    diff: ReplayDiff | None


def replay_summary(
    *, user: AbstractBaseUser | AnonymousUser, conversation: Conversation
) -> ReplaySummary | None:
    """How a replay conversation differs from the turn it replays; None if it replays nothing.

    The replay is the conversation's first turn; the original is looked up among the
    conversations ``user`` may see, so a replay never shows a record its viewer could not open.
    """
    if conversation.replay_of_id is None:
        return None
    original = (
        Turn.objects.filter(
            pk=conversation.replay_of_id, conversation__in=conversation_list(user=user).values("pk")
        )
        .select_related("conversation")
        .first()
    )
    replay = conversation.turns.order_by("seq").first()
    finished = original is not None and replay is not None and replay.is_finished
    diff = replay_diff(original=original, replay=replay) if finished and original and replay else None
    return ReplaySummary(original=original, replay=replay, diff=diff)
