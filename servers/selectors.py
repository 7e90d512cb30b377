"""Reads about MCP servers: who may see which, what the last listings said, the transcript."""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.db.models import Q, QuerySet

from conversations.models import Conversation, Exchange
from servers.lint import Finding, Neighbourhood, ToolReport, lint_catalog
from servers.models import McpServer, Operation, PendingInput, SavedCall

HANDSHAKE_LABELS = ("server/discover", "initialize", "notifications/initialized")
ERROR_STATUSES = ("error", "no response", "timeout")
# A tool's own failure travels as a successful JSON-RPC response whose result says isError.
TOOL_ERROR_RE = r'"isError"\s*:\s*true'



def _is_staff(user: AbstractBaseUser) -> bool:
    return bool(getattr(user, "is_staff", False))


def server_list(*, user: AbstractBaseUser) -> QuerySet[McpServer]:
    """Every server for staff; the enabled ones for everyone else."""
    servers = McpServer.objects.order_by("name")
    return servers if _is_staff(user) else servers.filter(enabled=True)


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


def server_listing(*, server: McpServer, kind: str) -> Listing:
    operation = (
        Operation.objects.filter(server=server, kind=kind, status=Operation.Status.OK).order_by("-started_at").first()
    )
    if operation is None:
        return Listing([], None, None)
    items = operation.result if isinstance(operation.result, list) else []
    return Listing(items, operation.started_at, operation)


def tool_definition(*, server: McpServer, name: str) -> dict[str, Any] | None:
    listing = server_listing(server=server, kind=Operation.Kind.TOOLS_LIST)
    return next((tool for tool in listing.items if tool.get("name") == name), None)


@dataclass(frozen=True)
class Identity:
    """Who the server said it was on its newest session, and that session's opening exchanges."""

    session: dict[str, Any]
    operation: Operation | None
    handshake: list[Exchange]


def server_identity(*, server: McpServer) -> Identity:
    latest = Operation.objects.filter(server=server).exclude(session={}).order_by("-started_at").first()
    opened = (
        Operation.objects.filter(server=server, session__spawned=True).order_by("-started_at").first()
    )
    handshake: list[Exchange] = []
    if opened is not None:
        handshake = [
            exchange
            for exchange in operation_exchanges(operation=opened)
            if exchange.label in HANDSHAKE_LABELS or exchange.label.startswith(("GET ", "stderr"))
        ]
    return Identity(latest.session if latest is not None else {}, opened, handshake)


def _neighbourhoods(server: McpServer) -> list[Neighbourhood]:
    hoods: list[Neighbourhood] = []
    conversations = Conversation.objects.filter(servers=server).prefetch_related("servers").order_by("-created_at")
    seen: set[frozenset[int]] = set()
    for conversation in conversations[:50]:
        others = [s for s in conversation.servers.all() if s.pk != server.pk]
        key = frozenset(s.pk for s in others)
        if not others or key in seen:
            continue
        seen.add(key)
        tools = {
            other.name: [str(t.get("name")) for t in server_listing(server=other, kind=Operation.Kind.TOOLS_LIST).items]
            for other in others
        }
        hoods.append(Neighbourhood(conversation.title, tools))
    return hoods


def server_tool_reports(*, server: McpServer) -> tuple[Listing, list[ToolReport], list[Finding]]:
    """The last tools/list of a server, each definition linted and counted."""
    listing = server_listing(server=server, kind=Operation.Kind.TOOLS_LIST)
    reports, overall = lint_catalog(listing.items, server_name=server.name, neighbourhoods=_neighbourhoods(server))
    return listing, reports, overall


def operation_get(*, user: AbstractBaseUser, public_id: Any) -> Operation:
    """Raises ``Operation.DoesNotExist`` for an operation on a server the user may not see."""
    return Operation.objects.select_related("server").get(
        public_id=public_id, server__in=server_list(user=user)
    )


def operation_exchanges(*, operation: Operation) -> list[Exchange]:
    return list(operation.exchanges.order_by("seq", "started_at", "id"))


def operation_questions(*, operation: Operation) -> list[PendingInput]:
    return list(operation.questions.all())


def server_operations(*, server: McpServer, kind: str | None = None, target: str | None = None) -> QuerySet[Operation]:
    operations = Operation.objects.filter(server=server)
    if kind:
        operations = operations.filter(kind=kind)
    if target:
        operations = operations.filter(target=target)
    return operations.order_by("-started_at")


def server_saved_calls(*, server: McpServer) -> QuerySet[SavedCall]:
    return SavedCall.objects.filter(server=server).select_related("baseline").order_by("name")


def saved_call_get(*, user: AbstractBaseUser, public_id: Any) -> SavedCall:
    return SavedCall.objects.select_related("server", "baseline").get(
        public_id=public_id, server__in=server_list(user=user)
    )


def server_transcript(
    *, server: McpServer, user: AbstractBaseUser, method: str = "", errors: bool = False, turns: bool = False
) -> QuerySet[Exchange]:
    """Every recorded message of a server, oldest first: workbench, CLI and unclaimed traffic.

    ``errors`` keeps protocol and transport errors, unanswered requests, and tool results that
    say ``isError``.

    Agent turns' traffic belongs to conversations, whose access rules are theirs: only staff may
    fold it in (``turns``).
    """
    exchanges = Exchange.objects.filter(server=server)
    if not (turns and _is_staff(user)):
        exchanges = exchanges.filter(turn__isnull=True)
    if method:
        exchanges = exchanges.filter(label__icontains=method)
    if errors:
        exchanges = exchanges.filter(
            Q(status__in=ERROR_STATUSES) | ~Q(error="") | Q(response_body__regex=TOOL_ERROR_RE)
        )
    return exchanges.order_by("started_at", "id")


def transcript_methods(*, server: McpServer) -> list[str]:
    labels = Exchange.objects.filter(server=server).values_list("label", flat=True).distinct()
    return sorted(set(labels))


def _body(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def transcript_export(*, exchanges: QuerySet[Exchange]) -> list[dict[str, Any]]:
    """The transcript as JSON documents: bodies parsed where they are JSON (as stored, redacted)."""
    return [
        {
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
