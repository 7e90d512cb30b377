"""Reads about MCP servers: who may see which, what the last listings said, the transcript.

Servers are a shared registry (every signed-in user sees the enabled ones); what was *done*
with a server belongs to whoever did it. Operations, saved calls, the questions a server asked
and the transcript follow the conversations' access rule (``conversations.selectors.visible_to``):
the user, their team mates, staff. Every read below that shows such a thing takes the viewer:
``user=None`` is the system itself (a management command run by an operator), which sees all.
"""

from __future__ import annotations

import difflib
import json
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.db.models import Q, QuerySet
from django.utils import timezone

from conversations.counting import tools_as_sent
from conversations.models import AuditEvent, Conversation, Exchange, Step
from conversations.selectors import conversation_list, visible_to
from servers.lint import Finding, Neighbourhood, ToolReport, lint_catalog
from servers.mcp_apps import APP_LABEL_RE, RecordedCall, recorded_calls, turn_tool, ui_resource_uri
from servers.models import McpServer, OAuthGrant, Operation, PendingInput, SavedCall
from servers.operations import SUBSCRIPTION_SECONDS

HANDSHAKE_LABELS = ("server/discover", "initialize", "notifications/initialized")
ERROR_STATUSES = ("error", "no response", "timeout")
# A tool's own failure travels as a successful JSON-RPC response whose result says isError.
TOOL_ERROR_RE = r'"isError"\s*:\s*true'


# Who is looking: a signed-in user, or None for the system (a management command).
Viewer = AbstractBaseUser | None


def _is_staff(user: AbstractBaseUser) -> bool:
    return bool(getattr(user, "is_staff", False))


def _sees_all(user: Viewer) -> bool:
    return user is None or _is_staff(user)


def server_spawn_refusal(*, server: McpServer, user: Viewer) -> str:
    """Why ``user`` may not cause ``server``'s process to be started; empty when they may.

    A stdio server runs a command on the worker. Staff (and the system) may start one; anyone
    else only when an administrator allowed it on that server (``allow_non_staff_spawn``). A
    pooled session may already be open, but a dead one is respawned by whoever uses it next, so
    the rule is on any use, not on the first.
    """
    if not server.spawns_process or _sees_all(user) or server.allow_non_staff_spawn:
        return ""
    return (
        f"{server.name} starts a process on the worker ({server.get_transport_display()}): only staff may "
        "start it. An administrator can allow it for everyone (Allow non-staff to spawn, on the server)."
    )


SERVER_ACTIONS = ("server.created", "server.changed", "server.enabled", "server.disabled")


def server_last_change(*, server: McpServer) -> AuditEvent | None:
    """The newest audit entry about ``server``: who registered or last changed it, when, how."""
    return (
        AuditEvent.objects.filter(action__in=SERVER_ACTIONS, detail__server_id=server.pk)
        .order_by("-at", "-pk")
        .first()
    )


def server_list(*, user: AbstractBaseUser) -> QuerySet[McpServer]:
    """Every server for staff; the enabled ones for everyone else."""
    servers = McpServer.objects.order_by("name")
    return servers if _is_staff(user) else servers.filter(enabled=True)


def servers_for_form() -> QuerySet[McpServer]:
    """The servers a question can be offered: the enabled ones, the demo server first."""
    return McpServer.objects.filter(enabled=True).order_by("-is_demo", "name")


def server_secret_values() -> list[str]:
    """The plain values of every server's sealed and ``${VAR}`` env and header entries that can
    be resolved here (a source of ``conversations.secret_sources``: the redactor masks them)."""
    return [value for server in McpServer.objects.only("env", "headers") for value in server.secret_values()]


def server_get(*, user: AbstractBaseUser, name: str) -> McpServer:
    """Raises ``McpServer.DoesNotExist`` for a server the user may not see."""
    return server_list(user=user).select_related("sampling_profile").get(name=name)


@dataclass(frozen=True)
class Listing:
    """The last successful listing of one kind (tools, resources...), and when it was made."""

    items: list[dict[str, Any]]
    listed_at: datetime | None
    operation: Operation | None

    @property
    def listed(self) -> bool:
        return self.operation is not None


def operation_list(*, user: Viewer) -> QuerySet[Operation]:
    """The operations ``user`` may see: their own and their team mates' (staff: all)."""
    operations = Operation.objects.all()
    return operations if user is None else visible_to(operations, user=user, owner="user")


def server_listing(*, server: McpServer, kind: str, user: Viewer) -> Listing:
    """The newest successful listing of ``kind`` among the operations ``user`` may see."""
    operation = (
        operation_list(user=user)
        .filter(server=server, kind=kind, status=Operation.Status.OK)
        .order_by("-started_at")
        .first()
    )
    if operation is None:
        return Listing([], None, None)
    items = operation.result if isinstance(operation.result, list) else []
    return Listing(items, operation.started_at, operation)


def step_app_uri(*, step: Step, tools: Any = None) -> str:
    """The ``ui://`` app of the tool a turn's tool step called, as the turn was given the tool
    (``""``: none). ``tools``: the turn's tools when the caller has them (else they are read)."""
    if step.kind != Step.Kind.TOOL or step.server_id is None:
        return ""
    given = step.turn.tools if tools is None else tools
    return ui_resource_uri(turn_tool(given, server_id=step.server_id, name=step.tool_name))


def tool_definition(*, server: McpServer, name: str, user: Viewer) -> dict[str, Any] | None:
    listing = server_listing(server=server, kind=Operation.Kind.TOOLS_LIST, user=user)
    return next((tool for tool in listing.items if tool.get("name") == name), None)


@dataclass(frozen=True)
class Identity:
    """Who the server said it was on its newest session, and that session's opening exchanges."""

    session: dict[str, Any]
    operation: Operation | None
    handshake: list[Exchange]
    # The newest connect, when it ended without a session (a command not found, a server that
    # exited at start): its error, and what the server wrote on stderr.
    failed: Operation | None = None
    failed_stderr: list[Exchange] = field(default_factory=list)


def server_identity(*, server: McpServer, user: Viewer) -> Identity:
    """The newest session among the operations ``user`` may see (its stderr may echo others' calls)."""
    operations = operation_list(user=user).filter(server=server)
    latest = operations.exclude(session={}).order_by("-started_at").first()
    opened = operations.filter(session__spawned=True).order_by("-started_at").first()
    handshake: list[Exchange] = []
    if opened is not None:
        handshake = [
            exchange
            for exchange in operation_exchanges(operation=opened)
            if exchange.label in HANDSHAKE_LABELS or exchange.label.startswith(("GET ", "stderr"))
        ]
    failed = operations.filter(kind=Operation.Kind.CONNECT).order_by("-started_at").first()
    if failed is None or failed.status in (Operation.Status.OK, Operation.Status.RUNNING):
        return Identity(latest.session if latest is not None else {}, opened, handshake)
    stderr = [e for e in operation_exchanges(operation=failed) if e.label.startswith("stderr")]
    return Identity(latest.session if latest is not None else {}, opened, handshake, failed, stderr)


def _neighbourhoods(server: McpServer, user: Viewer) -> list[Neighbourhood]:
    """The other servers of the conversations ``user`` may see that use ``server`` (their titles
    are shown in the findings: another user's conversation must not leak through them)."""
    hoods: list[Neighbourhood] = []
    visible = Conversation.objects.all() if user is None else conversation_list(user=user)
    conversations = visible.filter(servers=server).prefetch_related("servers").order_by("-created_at")
    seen: set[frozenset[int]] = set()
    for conversation in conversations[:50]:
        others = [s for s in conversation.servers.all() if s.pk != server.pk]
        key = frozenset(s.pk for s in others)
        if not others or key in seen:
            continue
        seen.add(key)
        tools = {
            other.name: [
                str(t.get("name"))
                for t in server_listing(server=other, kind=Operation.Kind.TOOLS_LIST, user=user).items
            ]
            for other in others
        }
        hoods.append(Neighbourhood(conversation.title, tools))
    return hoods


def server_tool_reports(
    *, server: McpServer, user: Viewer
) -> tuple[Listing, list[ToolReport], list[Finding]]:
    """The last tools/list of a server ``user`` may see, each definition linted and counted."""
    listing = server_listing(server=server, kind=Operation.Kind.TOOLS_LIST, user=user)
    # Counted as sent: the recorded responses keep the order of each definition's members.
    bodies = listing.operation.exchanges.values_list("response_body", flat=True) if listing.operation else []
    reports, overall = lint_catalog(
        tools_as_sent(listing.items, bodies),
        server_name=server.name,
        neighbourhoods=_neighbourhoods(server, user),
    )
    return listing, reports, overall


def operation_get(*, user: AbstractBaseUser, public_id: Any) -> Operation:
    """One operation ``user`` may see, on a server they may see.

    Raises:
        Operation.DoesNotExist: no such operation, or not visible to this user (the same answer).
    """
    return (
        operation_list(user=user)
        .select_related("server", "user")
        .get(public_id=public_id, server__in=server_list(user=user))
    )


def operation_exchanges(*, operation: Operation) -> list[Exchange]:
    """An operation's messages in the order they crossed the wire: by the time the capture saw
    each one sent or received (``started_at``), not by the order they were recorded in (``seq``).

    Over HTTP a notification is recorded only once its HTTP response arrives, so a request sent
    after it (``tools/call`` after ``notifications/initialized``) can be recorded first. Each
    message gets ``recorded_as``: its place in the recording order where that differs from its
    place here (0 where they agree), and ``recorded_at``, when it was complete and so recorded
    (its start plus its duration), for the page to show.
    """
    exchanges = list(operation.exchanges.order_by("started_at", "seq", "id"))
    for place, exchange in enumerate(exchanges, 1):
        setattr(exchange, "recorded_as", exchange.seq if exchange.seq and exchange.seq != place else 0)  # noqa: B010
        # A message is recorded once it is complete: its response's end, the record's time.
        done = exchange.started_at + timedelta(milliseconds=exchange.duration_ms or 0)
        setattr(exchange, "recorded_at", done)  # noqa: B010
    return exchanges


def app_recorded_calls(*, operation: Operation) -> list[RecordedCall] | None:
    """The tool calls an operation's app made through the host when it was last viewed, with the
    answers it was given (``mcp_apps.recorded_calls``); None when the app was never viewed (no
    app message is recorded), so the view is a first one and runs live."""
    rows = list(
        operation.exchanges.filter(label__regex=APP_LABEL_RE)
        .order_by("seq", "id")
        .values_list("label", "jsonrpc_id", "request_body", "response_body")
    )
    return recorded_calls(rows) if rows else None


def operation_questions(*, operation: Operation) -> list[PendingInput]:
    return list(operation.questions.all())


def question_list(*, user: AbstractBaseUser) -> QuerySet[PendingInput]:
    """The questions servers asked that ``user`` may see (and answer): those of visible operations."""
    return visible_to(PendingInput.objects.all(), user=user, owner="operation__user")


def question_get(*, user: AbstractBaseUser, operation: Operation, question_id: int) -> PendingInput:
    """Raises ``PendingInput.DoesNotExist`` for a question not of ``operation`` or not visible."""
    return question_list(user=user).get(operation=operation, pk=question_id)


def server_operations(
    *, server: McpServer, user: Viewer, kind: str | None = None, target: str | None = None
) -> QuerySet[Operation]:
    operations = operation_list(user=user).filter(server=server).select_related("user")
    if kind:
        operations = operations.filter(kind=kind)
    if target:
        operations = operations.filter(target=target)
    return operations.order_by("-started_at")


def server_subscriptions(*, server: McpServer, user: Viewer) -> dict[str, Operation]:
    """The subscriptions open now on ``server`` that ``user`` may see (and end), by resource URI.

    One older than the longest a subscription may last is not open, whatever its row says (the
    process that ran it ended without finishing it).
    """
    oldest = timezone.now() - timedelta(seconds=SUBSCRIPTION_SECONDS + 60)
    running = server_operations(server=server, user=user, kind=Operation.Kind.RESOURCE_SUBSCRIBE).filter(
        status=Operation.Status.RUNNING, started_at__gte=oldest
    )
    return {operation.target: operation for operation in reversed(list(running))}


def operation_updates(*, operation: Operation) -> list[Exchange]:
    """The ``notifications/resources/updated`` a subscription received, in order."""
    return list(operation.exchanges.filter(label="notifications/resources/updated").order_by("seq", "id"))


def saved_call_list(*, user: AbstractBaseUser) -> QuerySet[SavedCall]:
    """The saved calls ``user`` may see, run and delete: their own and their team mates'."""
    return visible_to(SavedCall.objects.all(), user=user, owner="owner")


def server_saved_calls(*, server: McpServer, user: AbstractBaseUser) -> QuerySet[SavedCall]:
    return saved_call_list(user=user).filter(server=server).select_related("baseline").order_by("name")


def saved_call_get(*, user: AbstractBaseUser, public_id: Any) -> SavedCall:
    """Raises ``SavedCall.DoesNotExist`` for a call not visible to ``user`` (or on a hidden server)."""
    return (
        saved_call_list(user=user)
        .select_related("server", "baseline")
        .get(public_id=public_id, server__in=server_list(user=user))
    )


def _transcript_rows(*, server: McpServer, user: AbstractBaseUser, turns: bool) -> QuerySet[Exchange]:
    """What of a server's traffic ``user`` may read.

    Staff: everything the workbench, the CLI and unclaimed traffic recorded, and with ``turns``
    the agent turns' traffic too. Anyone else: the messages of the operations they may see, and
    with ``turns`` those of the turns of conversations they may see; never the unclaimed
    traffic (notifications and stderr no operation claimed: it may echo anyone's call).
    """
    exchanges = Exchange.objects.filter(server=server)
    if _is_staff(user):
        return exchanges if turns else exchanges.filter(turn__isnull=True)
    own = Operation.exchanges.through.objects.filter(
        operation__in=operation_list(user=user).filter(server=server).values("pk")
    ).values("exchange_id")
    visible = Q(pk__in=own)
    if turns:
        visible |= Q(turn__isnull=False, turn__conversation__in=conversation_list(user=user).values("pk"))
    return exchanges.filter(visible)


def server_transcript(
    *, server: McpServer, user: AbstractBaseUser, method: str = "", errors: bool = False, turns: bool = False
) -> QuerySet[Exchange]:
    """The recorded messages of a server ``user`` may read, oldest first (``_transcript_rows``).

    ``errors`` keeps protocol and transport errors, unanswered requests, and tool results that
    say ``isError``; ``turns`` folds in agent turns' traffic (of the conversations ``user`` may see).
    """
    exchanges = _transcript_rows(server=server, user=user, turns=turns)
    if method:
        exchanges = exchanges.filter(label__icontains=method)
    if errors:
        exchanges = exchanges.filter(
            Q(status__in=ERROR_STATUSES) | ~Q(error="") | Q(response_body__regex=TOOL_ERROR_RE)
        )
    return exchanges.order_by("started_at", "id")


def exchange_conversations(*, exchanges: Any) -> QuerySet[Conversation]:
    """The conversations whose turns recorded any of ``exchanges`` (ids, or a values("pk") query)."""
    turn_exchanges = Exchange.objects.filter(pk__in=exchanges, conversation__isnull=False)
    return Conversation.objects.filter(pk__in=turn_exchanges.values("conversation_id")).order_by("pk")


def transcript_methods(*, server: McpServer, user: AbstractBaseUser) -> list[str]:
    """The labels of the messages ``user`` may read (the method filter's choices)."""
    rows = _transcript_rows(server=server, user=user, turns=True)
    return sorted(set(rows.order_by().values_list("label", flat=True).distinct()))


def _body(text: str) -> Any:
    """A stored body as JSON where it parses to something that can be written out again as
    UTF-8; else its text (a ``\\ud800`` escape parses to a lone surrogate that cannot)."""
    try:
        value = json.loads(text)
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except (ValueError, RecursionError):
        return text
    return value


def transcript_export(*, exchanges: QuerySet[Exchange]) -> list[dict[str, Any]]:
    """The transcript as JSON documents: bodies parsed where they are JSON (as stored, redacted),
    each with ``seq``, its place in the recording order (the caller orders them)."""
    return [
        {
            "seq": exchange.seq,
            "started_at": exchange.started_at.isoformat(),
            "direction": exchange.direction,
            "channel": exchange.channel,
            "label": exchange.label,
            "jsonrpc_id": exchange.jsonrpc_id,
            "status": exchange.status,
            "error": exchange.error,
            "duration_ms": exchange.duration_ms,
            "request_headers": exchange.request_headers,
            "request": _body(exchange.request_body) if exchange.request_body else None,
            "response_headers": exchange.response_headers,
            "response": _body(exchange.response_body) if exchange.response_body else None,
            "turn": exchange.turn_id,
        }
        for exchange in exchanges.iterator()
    ]


def operation_diff(*, operation: Operation) -> list[tuple[str, str]] | None:
    """For a re-run of a saved call: the result's lines against the saved baseline's.

    Each line is ``(op, text)`` with op ``" "``, ``"-"`` (only in the baseline) or ``"+"`` (only
    now); None when there is no baseline to compare with.
    """
    saved = operation.saved_call
    baseline = saved.baseline if saved is not None else None
    if baseline is None or baseline.pk == operation.pk or not operation.is_finished:
        return None

    def lines(op: Operation) -> list[str]:
        shown = {"status": op.status, "error": op.error, "result": op.result}
        return json.dumps(shown, indent=2, ensure_ascii=False, sort_keys=True).splitlines()

    diff = difflib.ndiff(lines(baseline), lines(operation))
    return [(line[0], line[2:]) for line in diff if line[:1] in {" ", "-", "+"}]


def operation_log_messages(*, operation: Operation) -> list[dict[str, str]]:
    """The server's log messages (``notifications/message``) an operation received, in order:
    each its ``level``, ``logger`` and ``text`` (the ``data``, as JSON unless a string)."""
    messages = []
    for exchange in operation_exchanges(operation=operation):
        if exchange.label != "notifications/message":
            continue
        try:
            params = json.loads(exchange.response_body).get("params") or {}
        except (ValueError, AttributeError):
            continue
        data = params.get("data")
        messages.append(
            {
                "level": str(params.get("level", "")),
                "logger": str(params.get("logger") or ""),
                "text": data if isinstance(data, str) else json.dumps(data, ensure_ascii=False),
            }
        )
    return messages


# --- OAuth ------------------------------------------------------------------------------------

OAUTH_POLL_SECONDS = 0.2


def oauth_sign_in_url(*, grant: OAuthGrant, operation: Operation, wait: float) -> str:
    """The authorization URL the running connect waits on a person to open, once the flow has
    reached it (within ``wait`` seconds); empty when the connect ended without needing one."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        grant.refresh_from_db(fields=["settings"])
        operation.refresh_from_db(fields=["status"])
        pending = str(grant.settings.get("pending_url", ""))
        if pending.startswith(("https://", "http://")) and not operation.is_finished:
            return pending
        if operation.is_finished:
            return ""
        time.sleep(OAUTH_POLL_SECONDS)
    return ""


def oauth_wait_settled(*, grant: OAuthGrant, wait: float) -> None:
    """Wait (at most ``wait`` seconds) until no connect of the grant's owner is running."""
    running = Operation.objects.filter(
        server=grant.server_id,
        user=grant.user_id,
        kind=Operation.Kind.CONNECT,
        status=Operation.Status.RUNNING,
    )
    deadline = time.monotonic() + wait
    while running.exists() and time.monotonic() < deadline:
        time.sleep(OAUTH_POLL_SECONDS)


@dataclass
class OAuthFlow:
    operation: Operation
    exchanges: list[Exchange]


def oauth_flows(*, server: McpServer, user: AbstractBaseUser, limit: int = 10) -> list[OAuthFlow]:
    """``user``'s operations on ``server`` that ran an OAuth flow, newest first, each with every
    exchange it recorded (the flow's steps and the MCP requests they authorized)."""
    operations = (
        Operation.objects.filter(server=server, user=user, exchanges__label__startswith="oauth: ")  # type: ignore[misc]
        .distinct()
        .order_by("-started_at")[:limit]
    )
    return [OAuthFlow(operation, operation_exchanges(operation=operation)) for operation in operations]
