"""The parts of a long turn a page loads on request: the rows before the ones it shows, a batch
at a time, and the calls of a row between its first and last few (a model reply may ask for
thousands). Each answers with the same fragments the page renders, and only to those who may
see the conversation (anyone else: 404, as for a missing one); each read is audited."""

from __future__ import annotations

from uuid import UUID

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from conversations import presentation, selectors
from inspector.preferences import request_preferences
from inspector.templatetags.paging_tags import PARTS, more_calls, parsed_slice
from inspector.views import conversation_for, record_read, step_for, turn_for

STATUS_BAD_REQUEST = 400


def _bad(message: str) -> HttpResponse:
    return HttpResponse(message, status=STATUS_BAD_REQUEST, content_type="text/plain")


@require_GET
def turn_steps(request: HttpRequest, public_id: UUID, turn_id: int) -> HttpResponse:
    """The ``selectors.ROWS_BATCH`` rows of a turn before the row numbered ``before`` (the ones a long
    turn's block leaves out until asked), rendered as the page renders every row, after the
    control for the rows before them when there are more."""
    conversation = conversation_for(request, public_id)
    turn = turn_for(conversation, turn_id)
    before = presentation.plain_number(request.GET.get("before", ""), most=presentation.SEQ_MAX)
    if before is None:
        return _bad("'before' must be a step number")
    record_read(request, conversation, via="turn steps", subject=f"turn {turn.seq}", detail={"turn": turn.pk})
    rows = selectors.turn_rows(turn=turn, before_seq=before, last=selectors.ROWS_BATCH)
    earlier = selectors.turn_row_count_before(turn=turn, seq=rows[0].seq) if rows else 0
    context = {
        "conversation": conversation,
        "turn": turn,
        "rows": rows,
        "earlier": earlier,
        "teaching": request_preferences(request).teaching,
    }
    return render(request, "inspector/_steps.html", context)


@require_GET
def step_calls(request: HttpRequest, public_id: UUID, step_id: int) -> HttpResponse:
    """The calls of a row numbered ``start`` to ``stop`` (0-based, ``stop`` excluded), at most
    ``selectors.CALLS_BATCH`` of them: its parsed calls (``part=parsed``) or its tool calls
    (``part=tools``), as the row renders them, before the control for the rest when more remain."""
    conversation = conversation_for(request, public_id)
    step = step_for(conversation, step_id)
    turn = selectors.turn_get(conversation=conversation, turn_id=step.turn_id)
    if step.parent_id is not None or turn is None:
        raise Http404("Not a row.")
    step.turn = turn  # read without its message history, which no row shows
    part = next((name for name in PARTS if name == request.GET.get("part")), None)
    start = presentation.plain_number(request.GET.get("start", ""), most=presentation.SEQ_MAX)
    stop = presentation.plain_number(request.GET.get("stop", ""), most=presentation.SEQ_MAX)
    if part is None or start is None or stop is None or stop < start:
        return _bad("'part' must be parsed or tools, 'start' and 'stop' numbers with start <= stop")
    record_read(
        request,
        conversation,
        via="row calls",
        subject=f"step {step.pk} {part} {start}-{stop}",
        detail={"step": step.pk, "part": part, "start": start, "stop": stop},
    )
    end = min(stop, start + selectors.CALLS_BATCH)
    if part == "parsed":
        total = len(step.calls) if isinstance(step.calls, list) else 0
        items = parsed_slice(step=step, start=start, stop=min(end, total))
    else:
        total = step.children.count()
        items = list(selectors.row_calls(row=step, start=start, stop=end))
    end = min(end, total)
    context = {
        "conversation": conversation,
        "step": step,
        "part": part,
        "items": items,
        "more": more_calls(
            conversation=conversation, step=step, part=part, total=total, start=end, stop=min(stop, total)
        ),
        "teaching": request_preferences(request).teaching,
    }
    return render(request, "inspector/_calls.html", context)
