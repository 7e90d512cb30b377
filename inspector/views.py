"""The inspection UI: the conversation list (find, import), one conversation's rows (export,
full bodies, the chain badge, replays and their differences), asking questions, and
comparisons (one question under several paradigms and models, side by side).

Login is enforced for every view by ``LoginRequiredMiddleware``; access to one conversation
or comparison is checked here, by looking it up among the user's own. Every view that shows a
conversation's record (its page, a turn, rows, a body, a prompt) writes a read-audit entry
(``conversations.record.audit.audit_read``: repeats within a few minutes are folded).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from uuid import UUID

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import content_disposition_header, url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from conversations import presentation, selectors, services
from conversations.capabilities import profile_capability_reset, profile_pickable, profiles_capabilities
from conversations.models import Comparison, Conversation, Step, Turn
from conversations.pricing import profile_price_set
from conversations.record.audit import audit_read
from conversations.record.transcripts.export import BINARY_FORMATS, EXPORT_FORMATS, MEDIA_TYPES, ExportFormat
from conversations.record.transcripts.importing import TranscriptError
from conversations.record.verification import conversation_verify
from conversations.signed_in import signed_in_user as _user
from conversations.typealias import JSONDict
from inspector import charts, fragments, walkthrough
from inspector.forms import (
    ComparisonForm,
    ConversationFilterForm,
    ConversationForm,
    PriceForm,
    ProviderComparisonForm,
    QuestionForm,
    TranscriptUploadForm,
)
from inspector.preferences import THEMES, preference_set, request_preferences
from servers.selectors import server_spawn_refusal, step_app_uri
from servers.services import app_operation_for_step, demo_server_ensure

COMPARISONS_PER_PAGE = 25
# The conversation page renders the rows of its newest turns up to about this many rows; the
# turns before them are folded (a header and a button that loads the turn, as it streamed).
PAGE_ROWS = 30
# A long turn the page shows renders its last rows whole; the earlier ones load on request (a
# 20-step turn was most of a big conversation's first paint; each row of it is ~30 KB, and in
# paired P6 runs 5 rows painted ~50 ms sooner than 8). Folding fewer than a few is not worth it.
TURN_ROWS = 5
TURN_FOLD_MIN = 3
# The page lists the headers of at most this many folded turns (the newest of them); the turns
# before those are one control that lists them EARLIER_TURNS at a time, on request (a 500-turn
# conversation's page was its 500 folded headers: work and HTML in proportion to its length).
FOLDED_TURNS = 20
EARLIER_TURNS = 50
# Up to this many exchanges the page verifies the hash chain by itself once it has loaded;
# beyond, on request (re-hashing a 1,000-step conversation takes seconds of server time).
CHAIN_AUTO_EXCHANGES = 300
STATUS_BAD_REQUEST = 400
STATUS_FORBIDDEN = 403
STATUS_CONFLICT = 409
EXPORT_SUFFIXES: dict[ExportFormat, str] = {
    "json": "json",
    "jsonl": "jsonl",
    "otel": "otlp.json",
    "otlp": "otlp.pb",
}
BODY_PARTS = ("request", "response")


def _conversation(request: HttpRequest, public_id: UUID, *, with_owner: bool = True) -> Conversation:
    """One of the user's conversations; anyone else's is a 404, exactly like a missing one."""
    try:
        return selectors.conversation_get(user=_user(request), public_id=public_id, with_owner=with_owner)
    except Conversation.DoesNotExist:
        raise Http404("No such conversation.") from None


def _comparison(request: HttpRequest, public_id: UUID) -> Comparison:
    """One of the user's comparisons; anyone else's is a 404, exactly like a missing one."""
    try:
        return selectors.comparison_get(user=_user(request), public_id=public_id)
    except Comparison.DoesNotExist:
        raise Http404("No such comparison.") from None


def _turn(conversation: Conversation, turn_id: int) -> Turn:
    turn = selectors.turn_get(conversation=conversation, turn_id=turn_id)
    if turn is None:
        raise Http404("No such turn.")
    return turn


def _step(conversation: Conversation, step_id: int) -> Step:
    step = selectors.step_get(conversation=conversation, step_id=step_id)
    if step is None:
        raise Http404("No such step.")
    return step


def _read(
    request: HttpRequest, conversation: Conversation, *, via: str, subject: str, detail: JSONDict
) -> None:
    """The user read part of the conversation's record (``conversations.record.audit.audit_read``)."""
    audit_read(actor=_user(request), conversation=conversation, via=via, subject=subject, detail=detail)


# The access checks and the read audit the on-demand views (``inspector.paging_views``) share.
conversation_for = _conversation
turn_for = _turn
step_for = _step
record_read = _read


def _turn_read(request: HttpRequest, public_id: UUID, turn_id: int, *, via: str) -> tuple[Conversation, Turn]:
    """A turn of one of the user's conversations (anyone else's is a 404), its read audited."""
    conversation = _conversation(request, public_id)
    turn = _turn(conversation, turn_id)
    _read(request, conversation, via=via, subject=f"turn {turn.seq}", detail={"turn": turn.pk})
    return conversation, turn


def _step_read(request: HttpRequest, public_id: UUID, step_id: int, *, via: str) -> tuple[Conversation, Step]:
    """A step of one of the user's conversations (anyone else's is a 404), its read audited."""
    conversation = _conversation(request, public_id)
    step = _step(conversation, step_id)
    _read(request, conversation, via=via, subject=f"step {step.pk}", detail={"step": step.pk})
    return conversation, step


def _spawn_refusals(request: HttpRequest, conversation: Conversation) -> list[str]:
    """Why the user may not ask here: a server whose process only staff may start, when the user
    is not the owner (the turn runs on the owner's rights, which the runner checks itself)."""
    user = _user(request)
    if conversation.owner_id == user.pk:
        return []
    servers = conversation.servers.filter(enabled=True).order_by("name")
    return [refusal for server in servers if (refusal := server_spawn_refusal(server=server, user=user))]


def _refused_to_viewer(request: HttpRequest, conversation: Conversation, what: str) -> HttpResponse | None:
    """The page with a 403 (no leak: a viewer sees it) if the user follows it read-only; else None."""
    if not selectors.following(conversation):
        return None
    problem = f"You follow this conversation read-only, as a viewer of its owner's team: you may not {what}."
    return _detail_page(request, conversation, QuestionForm(), status=STATUS_FORBIDDEN, problem=problem)


def _audit_runs(request: HttpRequest, comparison: Comparison, via: str) -> None:
    """A comparison shows its runs' answers and wire formats: a read of each run's conversation."""
    for conversation in comparison.conversations.all():
        audit_read(actor=_user(request), conversation=conversation, via=via)


def _turn_in_progress(turns: list[Turn]) -> bool:
    return bool(turns) and not turns[-1].is_finished


def _since(raw: str | None) -> datetime | None:
    """An ISO-8601 ``since`` parameter, naive taken as UTC; None if absent or unreadable."""
    if not raw:
        return None
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError:
        return None
    return timezone.make_aware(moment, UTC) if timezone.is_naive(moment) else moment


def _list_page(
    request: HttpRequest,
    form: ConversationForm,
    *,
    upload: TranscriptUploadForm | None = None,
    status: int = 200,
) -> HttpResponse:
    """The list page: the filters come from the query string whatever the request's method."""
    filters = ConversationFilterForm(request.GET)
    if not filters.is_valid():
        status = STATUS_BAD_REQUEST  # the valid filters still apply; the form says what is wrong
    conversations = selectors.conversation_search(user=_user(request), filters=filters.filters())
    page = selectors.conversation_page(conversations, request.GET.get("page"))
    context = {
        "page": page,
        "rows": selectors.conversation_rows(conversations=list(page.object_list)),
        "form": form,
        "filters": filters,
        "upload": upload or TranscriptUploadForm(),
    }
    return render(request, "inspector/conversation_list.html", context, status=status)


def _detail_page(
    request: HttpRequest,
    conversation: Conversation,
    form: QuestionForm,
    *,
    status: int = 200,
    problem: str = "",
) -> HttpResponse:
    # The shown turns are the newest, within PAGE_ROWS rows (at least one row each, but for
    # a turn without rows): these many newest turns hold them and the folded ones listed.
    turns = selectors.conversation_turns(conversation=conversation, newest=PAGE_ROWS + 1 + FOLDED_TURNS)
    counts = selectors.turn_row_counts(conversation=conversation, turns=turns)
    shown = _turns_shown(turns, counts)
    turns = turns[max(0, len(turns) - len(shown) - FOLDED_TURNS) :]
    earlier = selectors.turn_count_before(conversation=conversation, seq=turns[0].seq) if turns else 0
    # (turn, rows, row count, earlier rows not rendered): a turn before the shown ones has no rows
    # loaded (it is folded); a shown long turn renders its last TURN_ROWS rows; the other shown
    # turns' rows are read together.
    whole = selectors.turns_rows(
        turns=[turn for turn in turns if turn.pk in shown and not _long(counts.get(turn.pk, 0))]
    )
    turn_rows = [
        _turn_rows(turn, counts.get(turn.pk, 0), shown=turn.pk in shown, rows=whole.get(turn.pk))
        for turn in turns
    ]
    changed = selectors.conversation_changed_at(conversation=conversation)
    exchanges = selectors.exchange_count(conversation=conversation)
    context = {
        "conversation": conversation,
        "turns": turn_rows,
        "folded": earlier + len(turns) - len(shown),
        "earlier_turns": _earlier_turns(conversation, turns[0].seq, earlier) if earlier else None,
        "servers": conversation.servers.order_by("name"),
        "form": form,
        "problem": problem,
        "busy": _turn_in_progress(turns),
        "since": fragments.timestamp_iso(changed) if changed else fragments.catch_up_mark([]),
        "ws_path": f"/ws/conversations/{conversation.public_id}/",
        "replay": presentation.replay_summary(user=_user(request), conversation=conversation),
        "exchanges": exchanges,
        "chain_auto": exchanges <= CHAIN_AUTO_EXCHANGES,
    }
    return render(request, "inspector/conversation_detail.html", context, status=status)


def _long(count: int) -> bool:
    """Whether a turn of ``count`` rows renders only its last ``TURN_ROWS`` (the rest on demand)."""
    return count >= TURN_ROWS + TURN_FOLD_MIN


def _turn_rows(
    turn: Turn, count: int, *, shown: bool, rows: list[Step] | None = None
) -> tuple[Turn, list[Step] | None, int, int]:
    """``rows``: the turn's whole rows when already read (``selectors.turns_rows``)."""
    if not shown:
        return turn, None, count, 0
    if not _long(count):
        return turn, rows if rows is not None else selectors.turn_rows(turn=turn), count, 0
    last = selectors.turn_rows(turn=turn, last=TURN_ROWS)
    return turn, last, count, count - len(last)


def _earlier_turns(conversation: Conversation, before: int, count: int) -> dict[str, object]:
    """The control that lists the ``count`` turns numbered below ``before``, a batch at a time."""
    url = reverse("inspector-turns-earlier", args=[conversation.public_id])
    return {
        "before": before,
        "count": count,
        "batch": min(count, EARLIER_TURNS),
        "url": f"{url}?before={before}",
    }


def _turns_shown(turns: list[Turn], counts: dict[int, int]) -> set[int]:
    """The ids of the newest turns whose rows the page renders: as many as fit in
    ``PAGE_ROWS`` rows, and always the newest one. Older turns are folded and load on demand."""
    shown: set[int] = set()
    rows = 0
    for turn in reversed(turns):
        rows += counts.get(turn.pk, 0)
        if shown and rows > PAGE_ROWS:
            break
        shown.add(turn.pk)
    return shown


def _export_format(raw: str | None) -> ExportFormat | None:
    return next((fmt for fmt in EXPORT_FORMATS if fmt == raw), None)


@require_GET
def conversation_list(request: HttpRequest) -> HttpResponse:
    return _list_page(request, ConversationForm(user=_user(request)))


@require_POST
def conversation_create(request: HttpRequest) -> HttpResponse:
    form = ConversationForm(request.POST, user=_user(request))
    if not form.is_valid():
        return _list_page(request, form, status=STATUS_BAD_REQUEST)
    conversation, _ = services.conversation_start(
        owner=_user(request),
        model_profile=form.cleaned_data["model_profile"],
        question=form.cleaned_data["question"],
        servers=form.cleaned_data["servers"],
        paradigm=form.cleaned_data["paradigm"],
        tool_choice=form.cleaned_data["tool_choice"],
        tool_choice_name=form.cleaned_data["tool_choice_name"],
    )
    return redirect("inspector-conversation", public_id=conversation.public_id)


@require_GET
def conversation_detail(request: HttpRequest, public_id: UUID) -> HttpResponse:
    conversation = _conversation(request, public_id)
    audit_read(actor=_user(request), conversation=conversation, via="page")
    return _detail_page(request, conversation, QuestionForm())


@require_POST
def turn_create(request: HttpRequest, public_id: UUID) -> HttpResponse:
    # The owner's id is all the question needs; a refused one's page reads the owner then.
    conversation = _conversation(request, public_id, with_owner=False)
    if refused := _refused_to_viewer(request, conversation, "ask in it"):
        return refused
    form = QuestionForm(request.POST)
    if not form.is_valid():
        return _detail_page(request, conversation, form, status=STATUS_BAD_REQUEST)
    if conversation.read_only:
        problem = (
            "This conversation was recorded by a proxy: its host asks the questions."
            if conversation.recorded_by_proxy
            else "This conversation was imported from a transcript: it is read-only."
        )
        return _detail_page(request, conversation, form, status=STATUS_CONFLICT, problem=problem)
    refusals = _spawn_refusals(request, conversation)
    if refusals:
        problem = "Not asked: " + " ".join(refusals)
        return _detail_page(request, conversation, form, status=STATUS_FORBIDDEN, problem=problem)
    try:
        services.turn_start(
            conversation=conversation, question=form.cleaned_data["question"], asked_by=_user(request)
        )
    except services.TurnInProgress:
        form.add_error(
            None, "The previous turn is still running; ask again when it has finished, or cancel it."
        )
        return _detail_page(request, conversation, form, status=STATUS_CONFLICT)
    return redirect("inspector-conversation", public_id=conversation.public_id)


@require_POST
def step_app(request: HttpRequest, public_id: UUID, step_id: int) -> HttpResponse:
    """Open the MCP App of a tool call a turn made: on the workbench page that hosts it
    (``servers.services.app_operation_for_step``), with the call's recorded arguments and result."""
    conversation = _conversation(request, public_id)
    if refused := _refused_to_viewer(request, conversation, "open its apps (they call its servers)"):
        return refused
    step = (
        Step.objects.filter(
            pk=step_id, turn__conversation=conversation, kind=Step.Kind.TOOL, server__isnull=False
        )
        .select_related("turn")
        .first()
    )
    if step is None or not step_app_uri(step=step):
        raise Http404("No such tool step with an app.")
    operation = app_operation_for_step(step=step, user=_user(request))
    return redirect("servers-operation", public_id=operation.public_id)


@require_POST
def turn_cancel(request: HttpRequest, public_id: UUID, turn_id: int) -> HttpResponse:
    """The page's Cancel button: the same as ``POST /api/turns/<id>/cancel``, then back to the page
    (which shows the turn end live)."""
    conversation = _conversation(request, public_id)
    if refused := _refused_to_viewer(request, conversation, "cancel its turns"):
        return refused
    turn = selectors.turn_for_cancel(user=_user(request), turn_id=turn_id)
    if turn is None or turn.conversation_id != conversation.pk:
        raise Http404("No such turn.")
    try:
        services.turn_cancel(turn=turn, actor=_user(request))
    except services.TurnNotCancellable:
        messages.info(request, f"Turn {turn.seq} had already finished: there was nothing to cancel.")
    return redirect("inspector-conversation", public_id=conversation.public_id)


def _import_verdict(conversation: Conversation) -> str:
    verification = (conversation.imported_meta or {}).get("verification")
    detail = verification.get("detail") if isinstance(verification, dict) else None
    return str(detail or "not checked")


@require_POST
def conversation_import(request: HttpRequest) -> HttpResponse:
    upload = TranscriptUploadForm(request.POST, request.FILES)
    if not upload.is_valid():
        return _list_page(
            request, ConversationForm(user=_user(request)), upload=upload, status=STATUS_BAD_REQUEST
        )
    transcript = upload.cleaned_data["transcript"]
    try:
        conversation = services.conversation_import(
            data=transcript.read(), actor=_user(request), source=transcript.name or "upload"
        )
    except TranscriptError as exc:
        upload.add_error("transcript", f"This file cannot be imported: {exc}")
        return _list_page(
            request, ConversationForm(user=_user(request)), upload=upload, status=STATUS_BAD_REQUEST
        )
    messages.success(request, f"Imported, read-only. The file's chain: {_import_verdict(conversation)}.")
    return redirect("inspector-conversation", public_id=conversation.public_id)


@require_GET
def conversation_export(request: HttpRequest, public_id: UUID) -> HttpResponse:
    conversation = _conversation(request, public_id)
    fmt = _export_format(request.GET.get("format", "json"))
    if fmt is None:
        choices = ", ".join(EXPORT_FORMATS)
        return HttpResponse(
            f"format must be one of {choices}", status=STATUS_BAD_REQUEST, content_type="text/plain"
        )
    data = services.conversation_export(conversation=conversation, fmt=fmt, actor=_user(request), via="page")
    charset = "" if fmt in BINARY_FORMATS else "; charset=utf-8"
    response = HttpResponse(data, content_type=f"{MEDIA_TYPES[fmt]}{charset}")
    filename = f"conversation-{conversation.public_id}.{EXPORT_SUFFIXES[fmt]}"
    response["Content-Disposition"] = content_disposition_header(as_attachment=True, filename=filename)
    return response


@require_GET
def exchange_body(request: HttpRequest, public_id: UUID, exchange_id: int) -> HttpResponse:
    """One whole raw body: highlighted HTML for the page, or with ``raw=1`` the exact stored text."""
    conversation = _conversation(request, public_id)
    exchange = selectors.exchange_get(conversation=conversation, exchange_id=exchange_id)
    if exchange is None:
        raise Http404("No such exchange.")
    part = request.GET.get("part")
    if part not in BODY_PARTS:
        return HttpResponse(
            "part must be request or response", status=STATUS_BAD_REQUEST, content_type="text/plain"
        )
    _read(
        request,
        conversation,
        via="exchange body",
        subject=f"exchange {exchange.pk} {part}",
        detail={"exchange": exchange.pk, "part": part},
    )
    body = exchange.request_body if part == "request" else exchange.response_body
    if request.GET.get("raw"):
        # text/plain (with nosniff): a browser shows a recorded body, never runs it.
        return HttpResponse(body, content_type="text/plain; charset=utf-8")
    return render(request, "inspector/_exchange_body.html", {"body": body})


@require_GET
def step_prompt(request: HttpRequest, public_id: UUID, step_id: int) -> HttpResponse:
    """A step's whole spliced prompt: escaped HTML for the page, or with ``raw=1`` the exact text."""
    _, step = _step_read(request, public_id, step_id, via="spliced prompt")
    if request.GET.get("raw"):
        return HttpResponse(step.prompt, content_type="text/plain; charset=utf-8")
    return render(request, "inspector/_exchange_body.html", {"body": step.prompt})


@require_GET
def step_prompt_diff(request: HttpRequest, public_id: UUID, step_id: int) -> HttpResponse:
    """The line diff of a step's spliced prompt against the turn's previous model call's."""
    _, step = _step_read(request, public_id, step_id, via="prompt diff")
    diff = presentation.step_prompt_diff(step=step)
    if diff is None:
        raise Http404("This step has no previous model call to compare with.")
    return render(request, "inspector/_prompt_diff.html", {"diff": diff})


@require_GET
def conversation_chain(request: HttpRequest, public_id: UUID) -> HttpResponse:
    """The hash-chain badge: every exchange re-hashed (the page loads it after it has painted)."""
    conversation = _conversation(request, public_id)
    chain = conversation_verify(conversation=conversation)
    return render(request, "inspector/_chain_badge.html", {"conversation": conversation, "chain": chain})


@require_GET
def turn_detail(request: HttpRequest, public_id: UUID, turn_id: int) -> HttpResponse:
    """One whole turn block with its rows, as the page renders it (a folded turn, unfolded)."""
    conversation, turn = _turn_read(request, public_id, turn_id, via="turn")
    rows = selectors.turn_rows(turn=turn)
    context = fragments.turn_context(
        conversation=conversation, turn=turn, rows=rows, teaching=request_preferences(request).teaching
    )
    return render(request, fragments.TURN_TEMPLATE, context)


@require_GET
def turns_earlier(request: HttpRequest, public_id: UUID) -> HttpResponse:
    """The folded headers of the ``EARLIER_TURNS`` turns before the one numbered ``before`` (the
    turns a long conversation's page does not list until asked), in order, after the control
    for the turns before them when there are more."""
    conversation = _conversation(request, public_id)
    before = presentation.plain_number(request.GET.get("before", ""), most=presentation.SEQ_MAX)
    if before is None:
        return HttpResponse(
            "'before' must be a turn number", status=STATUS_BAD_REQUEST, content_type="text/plain"
        )
    _read(
        request,
        conversation,
        via="earlier turns",
        subject=f"turns before {before}",
        detail={"before": before},
    )
    turns = selectors.conversation_turns(conversation=conversation, newest=EARLIER_TURNS, before_seq=before)
    counts = selectors.turn_row_counts(conversation=conversation, turns=turns)
    earlier = selectors.turn_count_before(conversation=conversation, seq=turns[0].seq) if turns else 0
    context = {
        "conversation": conversation,
        "turns": [_turn_rows(turn, counts.get(turn.pk, 0), shown=False) for turn in turns],
        "earlier_turns": _earlier_turns(conversation, turns[0].seq, earlier) if earlier else None,
    }
    return render(request, "inspector/_turns_earlier.html", context)


@require_POST
def turn_replay(request: HttpRequest, public_id: UUID, turn_id: int) -> HttpResponse:
    conversation = _conversation(request, public_id)
    turn = _turn(conversation, turn_id)
    if refused := _refused_to_viewer(request, conversation, "replay its turns"):
        return refused
    try:
        replay, _ = services.turn_replay(turn=turn, actor=_user(request))
    except services.ReplayError as exc:
        problem = f"Turn {turn.seq} cannot be replayed: {exc}."
        return _detail_page(request, conversation, QuestionForm(), status=STATUS_CONFLICT, problem=problem)
    return redirect("inspector-conversation", public_id=replay.public_id)


# The longest ``view`` the plain-HTTP catch-up reads (a page's own is a few kB: the turns it
# lists and the rows changed in the catch-up's window).
VIEW_MAX_CHARS = 65_536


@require_GET
def conversation_rows(request: HttpRequest, public_id: UUID) -> JsonResponse:
    """Plain-HTTP catch-up: the same messages the websocket sends for ``catch_up``, with the
    page's ``view`` (JSON, optional) taken as the socket takes it: only what the page would
    apply is rendered."""
    conversation = _conversation(request, public_id)
    since = _since(request.GET.get("since"))
    if since is None:
        return JsonResponse({"error": "'since' must be an ISO-8601 timestamp"}, status=STATUS_BAD_REQUEST)
    try:
        view = _page_view(request.GET.get("view"))
    except ValueError as exc:
        return JsonResponse({"error": str(exc)}, status=STATUS_BAD_REQUEST)
    audit_read(actor=_user(request), conversation=conversation, via="rows")
    messages = fragments.render_catch_up(
        conversation=conversation, since=since, teaching=request_preferences(request).teaching, view=view
    )
    return JsonResponse({"messages": messages})


def _page_view(raw: str | None) -> fragments.PageView | None:
    """The catch-up's ``view`` parameter read (``fragments.page_view_from_json``); None if absent.

    Raises:
        ValueError: too long, not JSON (or nested past what ``json`` reads), or not a view's shape.
    """
    if raw is None:
        return None
    if len(raw) > VIEW_MAX_CHARS:
        raise ValueError(f"'view' is longer than {VIEW_MAX_CHARS} characters")
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        raise ValueError("'view' must be JSON") from None
    return fragments.page_view_from_json(value)


def _comparisons_page(
    request: HttpRequest,
    form: ComparisonForm,
    *,
    status: int = 200,
    providers: ProviderComparisonForm | None = None,
) -> HttpResponse:
    comparisons = selectors.comparison_list(user=_user(request))
    page = Paginator(comparisons, COMPARISONS_PER_PAGE).get_page(request.GET.get("page"))
    context = {"page": page, "form": form, "providers": providers or ProviderComparisonForm()}
    return render(request, "inspector/comparison_list.html", context, status=status)


def _columns_context(comparison: Comparison) -> dict[str, object]:
    """What ``_compare_columns.html`` needs; the page and the summary endpoint both use it."""
    runs = selectors.comparison_runs(comparison=comparison)
    return {
        "comparison": comparison,
        "runs": runs,
        "finished": all(run.finished for run in runs),
        "wire": presentation.comparison_wire_formats(comparison=comparison),
        "charts": charts.comparison_charts(runs),
    }


@require_GET
def comparison_list(request: HttpRequest) -> HttpResponse:
    """The comparisons and the two forms. ``?from=<conversation>&turn=<id>`` (a turn's "Compare
    providers" link) fills the providers form with that turn's question: a turn the user may
    see (``visible_to``: a team's, a followed one's), its read audited; anyone else's is a 404."""
    providers = None
    if "from" in request.GET or "turn" in request.GET:
        turn = _turn_from(request)
        providers = ProviderComparisonForm(initial={"question": turn.question})
    return _comparisons_page(request, ComparisonForm(user=_user(request)), providers=providers)


def _turn_from(request: HttpRequest) -> Turn:
    try:
        public_id = UUID(request.GET.get("from", ""))
    except ValueError:
        raise Http404("No such turn.") from None
    turn_id = presentation.plain_number(request.GET.get("turn", ""), most=presentation.ID_MAX)
    if turn_id is None:
        raise Http404("No such turn.")
    _, turn = _turn_read(request, public_id, turn_id, via="compare providers")
    return turn


@require_POST
def comparison_create(request: HttpRequest) -> HttpResponse:
    form = ComparisonForm(request.POST, user=_user(request))
    if not form.is_valid():
        return _comparisons_page(request, form, status=STATUS_BAD_REQUEST)
    comparison, _ = services.comparison_start(
        owner=_user(request),
        question=form.cleaned_data["question"],
        runs=form.runs(),
        servers=form.cleaned_data["servers"],
        tool_choice=form.cleaned_data["tool_choice"],
        tool_choice_name=form.cleaned_data["tool_choice_name"],
    )
    return redirect("inspector-comparison", public_id=comparison.public_id)


@require_POST
def comparison_providers_create(request: HttpRequest) -> HttpResponse:
    """The question under the demo model in every provider wire format, streamed or not."""
    form = ProviderComparisonForm(request.POST)
    if not form.is_valid():
        return _comparisons_page(
            request, ComparisonForm(user=_user(request)), status=STATUS_BAD_REQUEST, providers=form
        )
    comparison, _ = services.comparison_providers_start(
        owner=_user(request),
        question=form.cleaned_data["question"],
        stream=form.cleaned_data["stream"],
        servers=[demo_server_ensure()],
    )
    return redirect("inspector-comparison", public_id=comparison.public_id)


@require_GET
def comparison_detail(request: HttpRequest, public_id: UUID) -> HttpResponse:
    comparison = _comparison(request, public_id)
    _audit_runs(request, comparison, "comparison")
    context = _columns_context(comparison)
    # ``?call=first|last|N``: which model call of each run "What was sent" shows.
    call = presentation.sent_call(request.GET.get("call"))
    sent = presentation.comparison_sent(comparison=comparison, call=call)
    # ``?a=&b=``: the two runs (numbered from 1) whose prompts are diffed; the first two by default.
    first, second = _run_number(request.GET.get("a"), 1), _run_number(request.GET.get("b"), 2)
    context.update(
        sent=sent,
        sent_call=call,
        sent_calls=range(2, max((column.calls for column in sent), default=0) + 1),
        diff_a=first,
        diff_b=second,
        sent_diff=presentation.sent_prompt_diff(sent, first - 1, second - 1),
    )
    return render(request, "inspector/comparison_detail.html", context)


def _run_number(raw: str | None, default: int) -> int:
    number = presentation.plain_number(raw or "", most=999)
    return number if number is not None else default


@require_GET
def comparison_summary(request: HttpRequest, public_id: UUID) -> HttpResponse:
    """The columns alone, re-fetched by the page whenever one of its runs' websockets rings."""
    comparison = _comparison(request, public_id)
    _audit_runs(request, comparison, "comparison summary")
    return render(request, "inspector/_compare_columns.html", _columns_context(comparison))


@require_GET
def turn_walk(request: HttpRequest, public_id: UUID, turn_id: int) -> HttpResponse:
    """One turn, one slide at a time (``?at=N``, from 1, or ``last``): the step-through for a
    projector. A turn of many rows has pages of them (``&page=P``), read one at a time."""
    conversation, turn = _turn_read(request, public_id, turn_id, via="step-through")
    page = presentation.plain_number(request.GET.get("page", "1"), most=presentation.SEQ_MAX)
    raw_at = request.GET.get("at", "1")
    at = None if raw_at == "last" else presentation.plain_number(raw_at, most=presentation.SEQ_MAX) or 1
    deck = walkthrough.turn_deck(turn, page=page or 1, at=at)
    context = {"conversation": conversation, "turn": turn, "deck": deck}
    return render(request, "inspector/turn_walk.html", context)


def _back(request: HttpRequest) -> str:
    """Where a form of the site header came from (only a path of this site)."""
    target = request.POST.get("next", "")
    if url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return "/"


@require_POST
def preferences_update(request: HttpRequest) -> HttpResponse:
    """The header's switches: teaching mode (``teaching`` on/off), the class view (``class_view``
    on/off) and the colour scheme (``theme``). A script gets 204; a plain form post goes back
    where it came from."""
    teaching = request.POST.get("teaching")
    class_view = request.POST.get("class_view")
    theme = request.POST.get("theme")
    if (
        teaching not in (None, "on", "off")
        or class_view not in (None, "on", "off")
        or (theme is not None and theme not in THEMES)
    ):
        return HttpResponse(
            f"teaching and class_view must be on or off; theme one of {', '.join(THEMES)}",
            status=STATUS_BAD_REQUEST,
            content_type="text/plain",
        )
    preference_set(
        user=_user(request),
        teaching=None if teaching is None else teaching == "on",
        theme=theme,
        class_view=None if class_view is None else class_view == "on",
    )
    if request.headers.get("X-Requested-With") == "fetch":
        return HttpResponse(status=204)
    return redirect(_back(request))


@require_GET
def profile_list(request: HttpRequest) -> HttpResponse:
    """The model profiles: their capabilities, and what was learned at run time, when and why."""
    return render(request, "inspector/profile_list.html", {"profiles": profiles_capabilities()})


@require_POST
def profile_price(request: HttpRequest) -> HttpResponse:
    """Set a shared profile's prices: staff only, since a price changes the cost every user's
    pages show (anyone else gets 404, and reads the prices with who set them). Audited."""
    actor = _user(request)
    if not getattr(actor, "is_staff", False):
        raise Http404("No such page.")
    form = PriceForm(request.POST)
    profile_id = presentation.plain_number(request.POST.get("profile", ""), most=presentation.ID_MAX)
    profile = profile_pickable(profile_id=profile_id) if profile_id is not None else None
    if profile is None:
        raise Http404("No such model profile.")
    if not form.is_valid():
        problems = "; ".join(str(error) for errors in form.errors.values() for error in errors)
        messages.error(request, f"{profile.name}: prices not saved: {problems}")
        return redirect("inspector-profiles")
    profile_price_set(
        profile=profile,
        input_per_million=form.cleaned_data["input_per_million"],
        output_per_million=form.cleaned_data["output_per_million"],
        source=form.cleaned_data["source"],
        actor=actor,
    )
    messages.success(request, f"{profile.name}: prices saved.")
    return redirect("inspector-profiles")


@require_POST
def profile_reset(request: HttpRequest) -> HttpResponse:
    """Forget a learned capability of a shared profile: it goes back to unknown, so ``auto`` tries
    it again (and learns it again if the provider still refuses). Any signed-in user may: it can
    only make the app try more, never less; each reset is audited."""
    profile_id = presentation.plain_number(request.POST.get("profile", ""), most=presentation.ID_MAX)
    profile = profile_pickable(profile_id=profile_id) if profile_id is not None else None
    capability = request.POST.get("capability", "")
    if profile is None:
        raise Http404("No such model profile.")
    if profile_capability_reset(profile=profile, capability=capability, actor=_user(request)):
        messages.success(
            request, f"{profile.name}: {capability} is unknown again; auto will try it next time."
        )
    else:
        messages.info(request, f"{profile.name}: nothing was learned about {capability}.")
    return redirect("inspector-profiles")
