"""What a row shows of a model reply's many calls: the first and last few, and a control that
loads the ones between on request (``inspector.views.step_calls``), a batch at a time.

A reply may ask for thousands of calls (a hostile model with the call limits raised, an imported
trace, an old record): its row then shows ``CALLS_HEAD`` parsed calls and tool calls, the
control, and the last ``CALLS_TAIL`` of each (``conversations.selectors.rows``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from django import template
from django.urls import reverse

from conversations.models import Conversation, Step
from conversations.selectors import CALLS_BATCH, CALLS_COUNT, CALLS_HEAD, CALLS_TAIL, ROWS_BATCH, loaded_calls
from conversations.typealias import JSONValue

register = template.Library()

Part = Literal["parsed", "tools"]
PARTS: tuple[Part, ...] = ("parsed", "tools")
NOUNS: dict[Part, str] = {"parsed": "parsed call", "tools": "tool call"}


@dataclass(frozen=True)
class CutCalls:
    """The calls of one row a page shows: ``head`` and ``tail`` whole; the ``hidden`` ones
    between (numbered ``start`` to ``stop``, 0-based, ``stop`` excluded) load from ``url``."""

    part: Part
    total: int
    head: list[object] = field(default_factory=list)
    tail: list[object] = field(default_factory=list)
    start: int = 0
    stop: int = 0
    url: str = ""

    @property
    def hidden(self) -> int:
        return self.stop - self.start

    @property
    def batch(self) -> int:
        return min(self.hidden, CALLS_BATCH)

    @property
    def batch_size(self) -> int:
        return CALLS_BATCH

    @property
    def noun(self) -> str:
        return NOUNS[self.part]


def calls_url(*, conversation: Conversation, step: Step, part: Part, start: int, stop: int) -> str:
    """Where the calls of ``step`` numbered ``start`` to ``stop`` load from."""
    url = reverse("inspector-step-calls", args=[conversation.public_id, step.pk])
    return f"{url}?part={part}&start={start}&stop={stop}"


def more_calls(
    *, conversation: Conversation, step: Step, part: Part, total: int, start: int, stop: int
) -> CutCalls | None:
    """The control for the calls of ``step`` numbered ``start`` to ``stop`` (None: none left)."""
    if start >= stop:
        return None
    url = calls_url(conversation=conversation, step=step, part=part, start=start, stop=stop)
    return CutCalls(part=part, total=total, start=start, stop=stop, url=url)


def _conversation(step: Step, conversation: object) -> Conversation:
    if isinstance(conversation, Conversation):
        return conversation
    return Conversation.objects.get(turns__steps=step)


@register.filter
def tool_calls_shown(step: Step, conversation: object = None) -> CutCalls:
    """The tool calls (child steps) of a row as its page shows them: all when they are few;
    else the first and last few the row was loaded with (``selectors.turn_rows``)."""
    loaded = loaded_calls(step)
    total = max(getattr(step, CALLS_COUNT, 0), len(loaded))
    if total <= len(loaded):
        return CutCalls(part="tools", total=total, head=list(loaded))
    head = loaded[:CALLS_HEAD]
    tail = loaded[CALLS_HEAD:]
    return CutCalls(
        part="tools",
        total=total,
        head=list(head),
        tail=list(tail),
        start=len(head),
        stop=total - len(tail),
        url=calls_url(
            conversation=_conversation(step, conversation),
            step=step,
            part="tools",
            start=len(head),
            stop=total - len(tail),
        ),
    )


def _numbered(calls: list[JSONValue], start: int, stop: int) -> list[object]:
    return [(call, index + 1) for index, call in enumerate(calls[start:stop], start=start)]


@register.filter
def parsed_calls(step: Step, conversation: object = None) -> CutCalls:
    """The parsed calls of a row, each with its number (from 1), as ``tool_calls_shown``
    shows tool calls: all when few, else the first and last few and the control."""
    calls = step.calls if isinstance(step.calls, list) else []
    total = len(calls)
    if total <= CALLS_HEAD + CALLS_TAIL:
        return CutCalls(part="parsed", total=total, head=_numbered(calls, 0, total))
    stop = total - CALLS_TAIL
    return CutCalls(
        part="parsed",
        total=total,
        head=_numbered(calls, 0, CALLS_HEAD),
        tail=_numbered(calls, stop, total),
        start=CALLS_HEAD,
        stop=stop,
        url=calls_url(
            conversation=_conversation(step, conversation),
            step=step,
            part="parsed",
            start=CALLS_HEAD,
            stop=stop,
        ),
    )


@register.filter
def rows_batch(earlier: int) -> int:
    """How many of a turn's ``earlier`` rows not shown one click of its control loads."""
    return min(earlier, ROWS_BATCH)


def parsed_slice(*, step: Step, start: int, stop: int) -> list[object]:
    """The parsed calls of ``step`` numbered ``start`` to ``stop``, each with its number."""
    calls = step.calls if isinstance(step.calls, list) else []
    return _numbered(calls, start, stop)
