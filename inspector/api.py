"""The JSON API for scripts: conversation transcripts, the conversation list, evals (suites, runs
and their results), tokens, the schema.

Every view here is exempt from the site's ``LoginRequiredMiddleware`` (which would answer a
token-authenticated script with a redirect to the login page) and relies on DRF's
``IsAuthenticated`` instead, so an anonymous call gets a 401 JSON answer. Token auth is tried
first so that 401 carries ``WWW-Authenticate: Token``; the browser's session works too.
"""

from __future__ import annotations

from uuid import UUID

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.decorators import login_not_required
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import OuterRef, QuerySet, Subquery
from django.urls import reverse
from django.utils.decorators import method_decorator
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
    inline_serializer,
)
from drf_spectacular.views import SpectacularJSONAPIView
from rest_framework import serializers
from rest_framework.authentication import BaseAuthentication, SessionAuthentication
from rest_framework.authtoken.views import ObtainAuthToken
from rest_framework.exceptions import NotFound, PermissionDenied, Throttled, ValidationError
from rest_framework.generics import ListAPIView
from rest_framework.pagination import PageNumberPagination
from rest_framework.permissions import BasePermission, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from conversations.models import Conversation, Turn
from conversations.presentation import SEQ_MAX, plain_number
from conversations.record.audit import audit_read
from conversations.record.transcripts.document import transcript_document, turn_steps_page
from conversations.selectors import (
    conversation_get,
    conversation_list,
    may_act,
    text_match,
    turn_for_cancel,
    turn_for_reading,
)
from conversations.selectors.scopes import SCOPES, scoped_text_match
from conversations.services import TurnNotCancellable, turn_cancel
from inspector.evals.models import EvalRun, Suite
from inspector.evals.selectors import progress_json, run_get, run_list, run_progress, suite_get, suite_list
from inspector.evals.services import run_cancel, run_results_read, run_start, suite_save_checked
from inspector.evals.suites import SuiteError
from inspector.serializers import (
    ConversationSummarySerializer,
    EvalResultsSerializer,
    EvalRunStartSerializer,
    EvalRunSummarySerializer,
    EvalSuiteInputSerializer,
    EvalSuiteSerializer,
    TranscriptDocument,
)
from inspector.throttle import LoginThrottled, client_address, login_failure_record, login_throttle_check
from inspector.tokens import ExpiringTokenAuthentication, token_obtain, token_revoke

API_AUTHENTICATION: list[type[BaseAuthentication]] = [ExpiringTokenAuthentication, SessionAuthentication]
API_PERMISSIONS: list[type[BasePermission]] = [IsAuthenticated]


# What a viewer of a team is told when they try to act on a member's conversation they may see.
READ_ONLY = "You follow this conversation read-only, as a viewer of its owner's team: you may not {}."


class ConversationPagination(PageNumberPagination):
    page_size = 50


# A turn's steps in one answer at most: a turn of more (thousands of calls of one model reply,
# an imported trace) holds its first ones, ``steps_count`` and a ``steps_next`` link to the rest.
API_STEPS_PAGE = 500


def _steps_url(request: Request, turn_id: int, after: int) -> str:
    return request.build_absolute_uri(reverse("api-turn-steps", args=[turn_id]) + f"?after={after}")


def _with_last_turn_status(conversations: QuerySet[Conversation]) -> QuerySet[Conversation]:
    """Annotate each conversation with the status of its latest turn (one query for the page)."""
    last_turn = Turn.objects.filter(conversation=OuterRef("pk")).order_by("-seq").values("status")[:1]
    return conversations.annotate(last_turn_status=Subquery(last_turn))


@method_decorator(login_not_required, name="dispatch")
@extend_schema_view(
    get=extend_schema(
        parameters=[
            OpenApiParameter("q", str, description='Words or "phrases" to look for (in ``scope``).'),
            OpenApiParameter(
                "scope",
                str,
                many=True,
                enum=list(SCOPES),
                description="Where ``q`` is looked for, repeatable; none: question, answer, call, result.",
            ),
        ]
    )
)
class ConversationListView(ListAPIView[Conversation]):
    """The signed-in user's conversations, newest first, paginated with ``?page=``; with ``?q=``
    those with the text in one of the ``scope``s (``conversations.selectors.scopes``)."""

    authentication_classes = API_AUTHENTICATION
    permission_classes = API_PERMISSIONS
    serializer_class = ConversationSummarySerializer
    pagination_class = ConversationPagination

    def get_queryset(self) -> QuerySet[Conversation]:
        conversations = conversation_list(user=self.request.user)
        text = self.request.query_params.get("q", "").strip()
        if text:
            try:
                match = scoped_text_match(text, self.request.query_params.getlist("scope"), raw=text_match)
            except ValueError as exc:
                raise ValidationError({"scope": str(exc)}) from exc
            conversations = conversations.filter(match)
        return _with_last_turn_status(conversations)


@method_decorator(login_not_required, name="dispatch")
class ConversationTranscriptView(APIView):
    """One conversation as its transcript document: every turn, step and raw exchange, signed —
    the same document as the ``json`` export and ``ask --json``, but that a turn of more than
    ``API_STEPS_PAGE`` steps holds its first ones, with ``steps_count`` and ``steps_next``, the
    link to the next ones (``GET /api/turns/<id>/steps``; the export is always whole)."""

    authentication_classes = API_AUTHENTICATION
    permission_classes = API_PERMISSIONS

    @extend_schema(
        responses={
            200: TranscriptDocument,
            404: OpenApiResponse(description="No such conversation, or not yours (the same answer)."),
        },
    )
    def get(self, request: Request, public_id: UUID) -> Response:
        try:
            conversation = conversation_get(user=request.user, public_id=public_id)
        except Conversation.DoesNotExist:
            raise NotFound("No such conversation.") from None
        if isinstance(request.user, AbstractBaseUser):
            audit_read(actor=request.user, conversation=conversation, via="api")
        document = transcript_document(conversation=conversation, steps_per_turn=API_STEPS_PAGE)
        for turn in document["turns"]:
            if "steps_count" in turn and turn["steps"]:
                turn["steps_next"] = _steps_url(request, turn["id"], turn["steps"][-1]["seq"])
        return Response(document)


@method_decorator(login_not_required, name="dispatch")
class TurnStepsView(APIView):
    """The steps of a turn numbered after ``after`` (0: from its first), ``API_STEPS_PAGE`` at
    most, each with its exchanges as the transcript document holds them, and ``next``, the link
    to the ones after them (null at the end)."""

    authentication_classes = API_AUTHENTICATION
    permission_classes = API_PERMISSIONS

    @extend_schema(
        parameters=[
            OpenApiParameter("after", int, description="the step number the page starts after (default 0)")
        ],
        responses={
            200: inline_serializer(
                "TurnSteps",
                {
                    "turn": serializers.IntegerField(),
                    "steps_count": serializers.IntegerField(),
                    "steps": serializers.ListField(child=serializers.DictField()),
                    "next": serializers.URLField(allow_null=True),
                },
            ),
            400: OpenApiResponse(description="'after' is not a step number."),
            404: OpenApiResponse(description="No such turn, or not yours (the same answer)."),
        },
    )
    def get(self, request: Request, turn_id: int) -> Response:
        turn = turn_for_reading(user=request.user, turn_id=turn_id)
        if turn is None or not isinstance(request.user, AbstractBaseUser):
            raise NotFound("No such turn.")
        after = plain_number(request.query_params.get("after", "0") or "0", most=SEQ_MAX)
        if after is None:
            raise ValidationError({"after": "must be a step number"})
        audit_read(
            actor=request.user,
            conversation=turn.conversation,
            via="api",
            subject=f"turn {turn.seq} steps after {after}",
            detail={"turn": turn.pk, "after": after},
        )
        steps = turn_steps_page(turn=turn, after=after, limit=API_STEPS_PAGE)
        more = bool(steps) and turn.steps.filter(seq__gt=steps[-1]["seq"]).exists()
        return Response(
            {
                "turn": turn.pk,
                "steps_count": turn.steps.count(),
                "steps": steps,
                "next": _steps_url(request, turn.pk, steps[-1]["seq"]) if more else None,
            }
        )


@method_decorator(login_not_required, name="dispatch")
class TurnCancelView(APIView):
    """Stop a queued or running turn (the owner or staff); it ends ``cancelled`` within seconds,
    keeping everything recorded so far. Answers 202 with the turn's state (``cancelled`` at once
    for a queued turn; for a running one ``running`` with ``cancel_requested_at`` set until its
    runner stops), 409 if the turn had already finished."""

    authentication_classes = API_AUTHENTICATION
    permission_classes = API_PERMISSIONS

    @extend_schema(
        request=None,
        responses={
            202: inline_serializer(
                "TurnCancel",
                {
                    "turn": serializers.IntegerField(),
                    "status": serializers.ChoiceField(choices=Turn.Status.choices),
                    "cancel_requested_at": serializers.DateTimeField(allow_null=True),
                    "cancel_requested_by": serializers.CharField(),
                },
            ),
            403: OpenApiResponse(description="A viewer of the owner's team: they follow it read-only."),
            404: OpenApiResponse(description="No such turn, or not yours (the same answer)."),
            409: OpenApiResponse(description="The turn has already finished."),
        },
    )
    def post(self, request: Request, turn_id: int) -> Response:
        turn = turn_for_cancel(user=request.user, turn_id=turn_id)
        if turn is None or not isinstance(request.user, AbstractBaseUser):
            # A viewer of the owner's team sees the turn: told why, not told it is missing.
            seen = turn_for_reading(user=request.user, turn_id=turn_id)
            if seen is not None and not may_act(request.user, seen.conversation.owner_id):
                raise PermissionDenied(READ_ONLY.format("cancel its turns"))
            raise NotFound("No such turn.")
        try:
            turn = turn_cancel(turn=turn, actor=request.user)
        except TurnNotCancellable as exc:
            return Response({"detail": str(exc), "status": turn.status}, status=409)
        return Response(
            {
                "turn": turn.pk,
                "status": turn.status,
                "cancel_requested_at": turn.cancel_requested_at,
                "cancel_requested_by": turn.cancel_requested_by,
            },
            status=202,
        )


_NOT_YOURS = "No such {}, or not yours (the same answer)."


def _suite_error(exc: SuiteError) -> Response:
    return Response({"detail": str(exc), "field": exc.field}, status=400)


def _run_summary(run: EvalRun) -> dict[str, object]:
    return {
        "run": str(run.public_id),
        "suite": run.suite.name,
        "suite_id": str(run.suite.public_id),
        "status": run.status,
        "created_at": run.created_at.isoformat(),
        "progress": progress_json(run_progress(run=run)),
    }


@method_decorator(login_not_required, name="dispatch")
class EvalSuiteListView(APIView):
    """The signed-in user's eval suites (GET), or a new one from its YAML or JSON text (POST).
    A suite that is not valid answers 400 with ``field`` naming where."""

    authentication_classes = API_AUTHENTICATION
    permission_classes = API_PERMISSIONS

    @extend_schema(responses={200: EvalSuiteSerializer(many=True)})
    def get(self, request: Request) -> Response:
        assert isinstance(request.user, AbstractBaseUser)  # IsAuthenticated
        return Response(EvalSuiteSerializer(suite_list(user=request.user), many=True).data)

    @extend_schema(
        request=EvalSuiteInputSerializer,
        responses={
            201: EvalSuiteSerializer,
            400: OpenApiResponse(
                description='{"detail": "cases[0].expect: is required ...", "field": "cases[0].expect"}'
            ),
        },
    )
    def post(self, request: Request) -> Response:
        assert isinstance(request.user, AbstractBaseUser)  # IsAuthenticated
        given = EvalSuiteInputSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        try:
            suite = suite_save_checked(owner=request.user, text=given.validated_data["text"])
        except SuiteError as exc:
            return _suite_error(exc)
        return Response(EvalSuiteSerializer(suite).data, status=201)


@method_decorator(login_not_required, name="dispatch")
class EvalSuiteDetailView(APIView):
    """One of the user's suites (GET), changed from new text (PUT)."""

    authentication_classes = API_AUTHENTICATION
    permission_classes = API_PERMISSIONS

    def _suite(self, request: Request, public_id: UUID) -> Suite:
        try:
            return suite_get(user=request.user, public_id=public_id)
        except Suite.DoesNotExist:
            raise NotFound(_NOT_YOURS.format("suite")) from None

    @extend_schema(
        responses={200: EvalSuiteSerializer, 404: OpenApiResponse(description=_NOT_YOURS.format("suite"))}
    )
    def get(self, request: Request, public_id: UUID) -> Response:
        return Response(EvalSuiteSerializer(self._suite(request, public_id)).data)

    @extend_schema(
        request=EvalSuiteInputSerializer,
        responses={
            200: EvalSuiteSerializer,
            400: OpenApiResponse(description="Not a valid suite; ``field`` names where."),
            404: OpenApiResponse(description=_NOT_YOURS.format("suite")),
        },
    )
    def put(self, request: Request, public_id: UUID) -> Response:
        assert isinstance(request.user, AbstractBaseUser)  # IsAuthenticated
        suite = self._suite(request, public_id)
        given = EvalSuiteInputSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        try:
            suite = suite_save_checked(owner=request.user, text=given.validated_data["text"], suite=suite)
        except SuiteError as exc:
            return _suite_error(exc)
        return Response(EvalSuiteSerializer(suite).data)


@method_decorator(login_not_required, name="dispatch")
class EvalRunListView(APIView):
    """The user's eval runs, newest first (GET; ``?suite=`` one suite's), or a new run of a suite
    (POST: answers 202 at once; read its progress and results at the run's URL)."""

    authentication_classes = API_AUTHENTICATION
    permission_classes = API_PERMISSIONS

    @extend_schema(responses={200: EvalRunSummarySerializer(many=True)})
    def get(self, request: Request) -> Response:
        assert isinstance(request.user, AbstractBaseUser)  # IsAuthenticated
        suite = None
        if request.query_params.get("suite"):
            try:
                suite = suite_get(user=request.user, public_id=request.query_params["suite"])
            except (Suite.DoesNotExist, ValueError, DjangoValidationError):
                raise NotFound(_NOT_YOURS.format("suite")) from None
        runs = run_list(user=request.user, suite=suite)[:200]
        return Response([_run_summary(run) for run in runs])

    @extend_schema(
        request=EvalRunStartSerializer,
        responses={
            202: EvalRunSummarySerializer,
            400: OpenApiResponse(
                description="The suite cannot run (an unknown profile or server...); ``field`` names where."
            ),
            404: OpenApiResponse(description=_NOT_YOURS.format("suite")),
        },
    )
    def post(self, request: Request) -> Response:
        assert isinstance(request.user, AbstractBaseUser)  # IsAuthenticated
        given = EvalRunStartSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        try:
            suite = suite_get(user=request.user, public_id=given.validated_data["suite"])
        except Suite.DoesNotExist:
            raise NotFound(_NOT_YOURS.format("suite")) from None
        try:
            run = run_start(
                suite=suite,
                user=request.user,
                concurrency=given.validated_data.get("concurrency"),
                repeats=given.validated_data.get("repeats"),
            )
        except SuiteError as exc:
            return _suite_error(exc)
        return Response(_run_summary(run), status=202)


@method_decorator(login_not_required, name="dispatch")
class EvalRunDetailView(APIView):
    """A run's status, progress and results: the same object as ``manage.py eval run --json``."""

    authentication_classes = API_AUTHENTICATION
    permission_classes = API_PERMISSIONS

    @extend_schema(
        responses={200: EvalResultsSerializer, 404: OpenApiResponse(description=_NOT_YOURS.format("run"))}
    )
    def get(self, request: Request, public_id: UUID) -> Response:
        try:
            run = run_get(user=request.user, public_id=public_id)
        except EvalRun.DoesNotExist:
            raise NotFound(_NOT_YOURS.format("run")) from None
        assert isinstance(request.user, AbstractBaseUser)  # IsAuthenticated
        return Response(run_results_read(run=run, actor=request.user, via="api"))


@method_decorator(login_not_required, name="dispatch")
class EvalRunCancelView(APIView):
    """Stop a run: no more cases start and the turns in flight are cancelled; the run ends
    ``cancelled``. 202 with the run's summary; cancelling a finished run changes nothing."""

    authentication_classes = API_AUTHENTICATION
    permission_classes = API_PERMISSIONS

    @extend_schema(
        request=None,
        responses={202: EvalRunSummarySerializer, 404: OpenApiResponse(description=_NOT_YOURS.format("run"))},
    )
    def post(self, request: Request, public_id: UUID) -> Response:
        try:
            run = run_get(user=request.user, public_id=public_id)
        except EvalRun.DoesNotExist:
            raise NotFound(_NOT_YOURS.format("run")) from None
        assert isinstance(request.user, AbstractBaseUser)  # IsAuthenticated
        return Response(_run_summary(run_cancel(run=run, actor=request.user)), status=202)


@method_decorator(login_not_required, name="dispatch")
class OpenApiView(SpectacularJSONAPIView):
    """This API's OpenAPI document; like the rest of the site, only for signed-in users."""

    authentication_classes = API_AUTHENTICATION
    permission_classes = API_PERMISSIONS


class TokenView(ObtainAuthToken):
    """``POST`` ``username`` and ``password``: get ``{"token": ...}`` for ``Authorization: Token ...``;
    ``DELETE`` (authenticated): revoke the caller's token.

    The same token is returned on every POST until it expires (``API_TOKEN_TTL_DAYS``) or is
    revoked; then a new one. Failed POSTs are throttled with the login page's counters (429).
    """

    def get_authenticators(self) -> list[BaseAuthentication]:
        # The credentials of a POST are in the body: a stray session cookie must not make it a
        # CSRF-checked call. A DELETE is authenticated like the rest of the API.
        if self.request is not None and self.request.method == "POST":
            return []
        return [authentication() for authentication in API_AUTHENTICATION]

    def get_permissions(self) -> list[BasePermission]:
        if self.request is not None and self.request.method == "POST":
            return []
        return [permission() for permission in API_PERMISSIONS]

    @extend_schema(responses={200: OpenApiResponse(description='{"token": "..."}'), 429: OpenApiResponse()})
    def post(self, request: Request, *args: object, **kwargs: object) -> Response:
        username = str(request.data.get("username", "")) if isinstance(request.data, dict) else ""
        address = client_address(request.META)
        try:
            login_throttle_check(username=username, address=address)
        except LoginThrottled as exc:
            raise Throttled(wait=exc.retry_after, detail=str(exc)) from None
        serializer = self.get_serializer(data=request.data)
        if not serializer.is_valid():
            login_failure_record(username=username, address=address)
            raise ValidationError(serializer.errors)
        return Response({"token": token_obtain(user=serializer.validated_data["user"]).key})

    @extend_schema(responses={204: None})
    def delete(self, request: Request, *args: object, **kwargs: object) -> Response:
        assert isinstance(request.user, User)  # IsAuthenticated
        token_revoke(user=request.user)
        return Response(status=204)


token_obtain_or_revoke = login_not_required(TokenView.as_view())
