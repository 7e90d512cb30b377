"""The inspection UI: the conversation list, one conversation's rows, asking questions, and
comparisons (one question under several paradigms and models, side by side).

Login is enforced for every view by ``LoginRequiredMiddleware``; access to one conversation
or comparison is checked here, by looking it up among the user's own.
"""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import UUID

from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from conversations import selectors, services
from conversations.models import Comparison, Conversation, Turn
from inspector import fragments
from inspector.forms import ComparisonForm, ConversationForm, QuestionForm

CONVERSATIONS_PER_PAGE = 25
COMPARISONS_PER_PAGE = 25
STATUS_BAD_REQUEST = 400
STATUS_CONFLICT = 409


def _user(request: HttpRequest) -> AbstractBaseUser:
    """The signed-in user (the middleware lets no one else through; this narrows the type)."""
    user = request.user
    if not isinstance(user, AbstractBaseUser) or not user.is_authenticated:
        raise PermissionDenied
    return user


def _conversation(request: HttpRequest, public_id: UUID) -> Conversation:
    """One of the user's conversations; anyone else's is a 404, exactly like a missing one."""
    try:
        return selectors.conversation_get(user=_user(request), public_id=public_id)
    except Conversation.DoesNotExist:
        raise Http404("No such conversation.") from None


def _comparison(request: HttpRequest, public_id: UUID) -> Comparison:
    """One of the user's comparisons; anyone else's is a 404, exactly like a missing one."""
    try:
        return selectors.comparison_get(user=_user(request), public_id=public_id)
    except Comparison.DoesNotExist:
        raise Http404("No such comparison.") from None


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


def _list_page(request: HttpRequest, form: ConversationForm, *, status: int = 200) -> HttpResponse:
    conversations = selectors.conversation_list(user=_user(request))
    page = Paginator(conversations, CONVERSATIONS_PER_PAGE).get_page(request.GET.get("page"))
    return render(request, "inspector/conversation_list.html", {"page": page, "form": form}, status=status)


def _detail_page(
    request: HttpRequest, conversation: Conversation, form: QuestionForm, *, status: int = 200
) -> HttpResponse:
    turns = selectors.conversation_turns(conversation=conversation)
    turn_rows = [(turn, selectors.turn_rows(turn=turn)) for turn in turns]
    context = {
        "conversation": conversation,
        "turns": turn_rows,
        "servers": conversation.servers.order_by("name"),
        "form": form,
        "busy": _turn_in_progress(turns),
        "since": fragments.catch_up_mark(turn_rows),
        "ws_path": f"/ws/conversations/{conversation.public_id}/",
    }
    return render(request, "inspector/conversation_detail.html", context, status=status)


@require_GET
def conversation_list(request: HttpRequest) -> HttpResponse:
    return _list_page(request, ConversationForm())


@require_POST
def conversation_create(request: HttpRequest) -> HttpResponse:
    form = ConversationForm(request.POST)
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
    services.audit_record(
        actor=_user(request), action="opened", conversation=conversation, detail={"via": "page"}
    )
    return _detail_page(request, conversation, QuestionForm())


@require_POST
def turn_create(request: HttpRequest, public_id: UUID) -> HttpResponse:
    conversation = _conversation(request, public_id)
    form = QuestionForm(request.POST)
    if not form.is_valid():
        return _detail_page(request, conversation, form, status=STATUS_BAD_REQUEST)
    if conversation.read_only:
        form.add_error(None, "This conversation was imported from a transcript: it is read-only.")
        return _detail_page(request, conversation, form, status=STATUS_CONFLICT)
    if _turn_in_progress(selectors.conversation_turns(conversation=conversation)):
        # Each turn's history is the previous turn's transcript: it must be finished first.
        form.add_error(None, "The previous turn is still running; ask again when it has finished.")
        return _detail_page(request, conversation, form, status=STATUS_CONFLICT)
    services.turn_start(conversation=conversation, question=form.cleaned_data["question"])
    return redirect("inspector-conversation", public_id=conversation.public_id)


@require_GET
def conversation_rows(request: HttpRequest, public_id: UUID) -> JsonResponse:
    """Plain-HTTP catch-up: the same messages the websocket sends for ``catch_up``."""
    conversation = _conversation(request, public_id)
    since = _since(request.GET.get("since"))
    if since is None:
        return JsonResponse({"error": "'since' must be an ISO-8601 timestamp"}, status=STATUS_BAD_REQUEST)
    messages = fragments.render_catch_up(conversation=conversation, since=since)
    return JsonResponse({"messages": messages})


def _comparisons_page(request: HttpRequest, form: ComparisonForm, *, status: int = 200) -> HttpResponse:
    comparisons = selectors.comparison_list(user=_user(request))
    page = Paginator(comparisons, COMPARISONS_PER_PAGE).get_page(request.GET.get("page"))
    return render(request, "inspector/comparison_list.html", {"page": page, "form": form}, status=status)


def _columns_context(comparison: Comparison) -> dict[str, object]:
    """What ``_compare_columns.html`` needs; the page and the summary endpoint both use it."""
    runs = selectors.comparison_runs(comparison=comparison)
    return {"comparison": comparison, "runs": runs, "finished": all(run.finished for run in runs)}


@require_GET
def comparison_list(request: HttpRequest) -> HttpResponse:
    return _comparisons_page(request, ComparisonForm())


@require_POST
def comparison_create(request: HttpRequest) -> HttpResponse:
    form = ComparisonForm(request.POST)
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


@require_GET
def comparison_detail(request: HttpRequest, public_id: UUID) -> HttpResponse:
    comparison = _comparison(request, public_id)
    context = _columns_context(comparison)
    return render(request, "inspector/comparison_detail.html", context)


@require_GET
def comparison_summary(request: HttpRequest, public_id: UUID) -> HttpResponse:
    """The columns alone, re-fetched by the page whenever one of its runs' websockets rings."""
    comparison = _comparison(request, public_id)
    return render(request, "inspector/_compare_columns.html", _columns_context(comparison))
