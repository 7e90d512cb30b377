"""Writes about MCP servers: the registry, workbench operations, answers, saved calls.

Every change to a server — registered, edited, enabled or disabled, deleted; from the web form,
the admin, ``manage.py server`` or the demo's setup — goes through ``server_commit`` or
``server_delete``, which write it to the audit log with what it was before and after.
"""

from __future__ import annotations

import getpass
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from conversations.escaping import storable_json
from conversations.lifecycle import runner_name
from conversations.loop.wire import MASK, WireExchange
from conversations.models import AuditEvent, Exchange, Step
from conversations.record.audit import audit_change
from conversations.record.exchanges import exchange_rows
from conversations.secret_sources import active_redactor
from conversations.typealias import JSONDict, JSONValue
from servers.gateway.config import has_references
from servers.grants import user_run_secrets
from servers.mcp_apps import APP_LABEL_RE, MESSAGES_PER_OPERATION, AppMessage
from servers.models import SECRET_NAME_RE, McpServer, Operation, PendingInput, SavedCall
from servers.operations import operation_dispatch, operation_run
from servers.selectors import server_spawn_refusal
from servers.vault import is_sealed, seal

DEMO_SERVER_NAME = "demo"
# What a server's audit entry shows of it, before and after. Env and header *values* never
# appear (masked); the names do, and which values changed.
AUDITED_FIELDS = (
    "name",
    "description",
    "transport",
    "command",
    "args",
    "cwd",
    "url",
    "era",
    "call_timeout",
    "roots",
    "sampling_profile_id",
    "sampling_review",
    "elicitation",
    "enabled",
    "allow_non_staff_spawn",
    "owner_id",
    "log_level",
)


class SpawnRefused(PermissionDenied):
    """The user may not cause this stdio server's process to be started; the message says why."""


def demo_server_ensure() -> McpServer:
    """The bundled teaching server over stdio, run by this installation's own interpreter.

    Everyone may start it (it runs this installation's own code). A change is audited as made
    by the system ("setup"); an unchanged server is not written again.
    """
    wanted: dict[str, Any] = {
        "description": "Bundled teaching server: weather forecast, calculator, unit converter, notes.",
        "transport": "stdio",
        "command": sys.executable,
        "args": ["-m", "servers.demo_server"],
        "cwd": str(settings.BASE_DIR),
        "era": "legacy",
        "is_demo": True,
        "enabled": True,
        "allow_non_staff_spawn": True,
    }
    server = McpServer.objects.filter(name=DEMO_SERVER_NAME).first() or McpServer(name=DEMO_SERVER_NAME)
    if server.pk is not None and all(getattr(server, name) == value for name, value in wanted.items()):
        return server
    for name, value in wanted.items():
        setattr(server, name, value)
    try:
        return server_commit(server=server, actor=None, via="setup")
    except (IntegrityError, ValidationError):
        if server.pk is not None:
            raise
        # Another process registered it at the same moment: theirs is the same server.
        return McpServer.objects.get(name=DEMO_SERVER_NAME)


def server_snapshot(server: McpServer) -> JSONDict:
    """What the audit log keeps of a server: its fields, env and header names with values masked.

    The command and arguments pass the redactor (an argument may carry a secret value).
    """
    redact = active_redactor(secrets=server.secret_values())
    shown: JSONDict = {name: getattr(server, name) for name in AUDITED_FIELDS}
    shown["command"] = redact.text(server.command)
    shown["args"] = redact.json([str(arg) for arg in server.args])
    shown["roots"] = redact.json(server.roots)
    shown["env"] = {str(name): MASK for name in sorted(server.env)}
    shown["headers"] = {str(name): MASK for name in sorted(server.headers)}
    return shown


def _changed_values(before: McpServer | None, after: McpServer, field: str) -> list[str]:
    """Names whose stored value (sealed, a reference, or plain) differs: never the values."""
    old: Mapping[str, Any] = getattr(before, field) if before is not None else {}
    new: Mapping[str, Any] = getattr(after, field)
    return sorted(name for name in {*old, *new} if str(old.get(name)) != str(new.get(name)))


def _who(actor: AbstractBaseUser | None) -> str:
    """Who a change without a signed-in user was made by: the operating-system account."""
    if actor is not None:
        return actor.get_username()
    try:
        return f"system ({getpass.getuser()})"
    except (KeyError, OSError):
        return "system"


def server_commit(*, server: McpServer, actor: AbstractBaseUser | None, via: str) -> McpServer:
    """Validate and save ``server`` (new, or changed in memory) and audit the change.

    The one write path of the registry: the web form, the admin, ``manage.py server`` and the
    demo's setup call it (``via`` says which). The entry is ``server.created``, or for an
    existing server ``server.enabled``/``server.disabled`` when only that switch moved, else
    ``server.changed``; it holds the before and after (``server_snapshot``) and the names of
    env and header entries whose values changed. Saving an unchanged server writes no entry.

    Raises:
        django.core.exceptions.ValidationError: the server is not valid (nothing is saved).
    """
    stored = McpServer.objects.filter(pk=server.pk).first() if server.pk is not None else None
    server.full_clean()
    with transaction.atomic():
        server.save()
        before = server_snapshot(stored) if stored is not None else None
        after = server_snapshot(server)
        changed: JSONDict = {
            "env": list[JSONValue](_changed_values(stored, server, "env")),
            "headers": list[JSONValue](_changed_values(stored, server, "headers")),
        }
        if before == after and not any(changed.values()):
            return server
        if before is None:
            action = AuditEvent.Action.SERVER_CREATED
        elif {k for k in after if before.get(k) != after[k]} == {"enabled"} and not any(changed.values()):
            action = AuditEvent.Action.SERVER_ENABLED if server.enabled else AuditEvent.Action.SERVER_DISABLED
        else:
            action = AuditEvent.Action.SERVER_CHANGED
        audit_change(
            actor=actor,
            actor_name=_who(actor),
            action=action,
            via=via,
            subject=server.name,
            detail={"server_id": server.pk, "before": before, "after": after, "values_changed": changed},
        )
    return server


def server_delete(*, server: McpServer, actor: AbstractBaseUser | None, via: str) -> None:
    """Delete ``server`` (its workbench operations go with it) and audit what it was."""
    with transaction.atomic():
        audit_change(
            actor=actor,
            actor_name=_who(actor),
            action=AuditEvent.Action.SERVER_DELETED,
            via=via,
            subject=server.name,
            detail={"server_id": server.pk, "before": server_snapshot(server), "after": None},
        )
        server.delete()


def stored_values(
    *, plain: Mapping[str, str], secret: Mapping[str, str], previous: Mapping[str, Any]
) -> dict[str, str]:
    """Env or header values as stored: secrets sealed (or kept as ``${VAR}`` references).

    A secret entry whose value is the mask keeps its previous value; a plain entry whose name
    looks like a credential (token, key, password, authorization...) is sealed too.
    """
    stored: dict[str, str] = {}
    for name, value in plain.items():
        stored[name] = seal(value) if SECRET_NAME_RE.search(name) and not has_references(value) else value
    for name, value in secret.items():
        if value == MASK and name in previous:
            stored[name] = str(previous[name])
        elif has_references(value) or is_sealed(value):
            stored[name] = value
        else:
            stored[name] = seal(value)
    return stored


def server_save(
    *,
    server: McpServer | None,
    owner: AbstractBaseUser | None,
    fields: Mapping[str, Any],
    env: Mapping[str, str],
    secret_env: Mapping[str, str],
    headers: Mapping[str, str],
    secret_headers: Mapping[str, str],
    via: str = "service",
) -> McpServer:
    """Create (``server=None``) or update a server from a form's or the CLI's values; secrets are
    sealed before they are stored. ``owner`` is who does it: a new server's owner, and the
    change's actor in the audit log (``server_commit``).

    Raises:
        django.core.exceptions.ValidationError: the values are not a valid server.
    """
    target = server or McpServer(owner=owner)  # type: ignore[misc]
    for name, value in fields.items():
        setattr(target, name, value)
    target.env = stored_values(plain=env, secret=secret_env, previous=server.env if server else {})
    target.headers = stored_values(
        plain=headers, secret=secret_headers, previous=server.headers if server else {}
    )
    return server_commit(server=target, actor=owner, via=via)


def server_set_enabled(
    *, server: McpServer, enabled: bool, actor: AbstractBaseUser | None, via: str
) -> McpServer:
    server.enabled = enabled
    return server_commit(server=server, actor=actor, via=via)


def operation_start(
    *,
    server: McpServer,
    user: AbstractBaseUser | None,
    kind: str,
    target: str = "",
    arguments: Any = None,
    source: str = Operation.Source.WEB,
    saved_call: SavedCall | None = None,
    tool: dict[str, Any] | None = None,
    background: bool = False,
    redirect: Callable[[str], Awaitable[str]] | None = None,
    elicitation: str = "",
    invalid_arguments: list[str] | None = None,
) -> Operation:
    """Create an operation and run it: here and now, or (``background``) in the workbench pool.

    A background operation is followed by polling it; anything else is finished on return.
    ``elicitation`` (run here and now only): how to answer the server's elicitation requests
    when nobody follows the operation, one of ``operations.ELICITATION_PRESETS``.
    ``invalid_arguments``: a tool call the user chose to send although its arguments break the
    tool's inputSchema ("send anyway"): the validation errors they overrode, kept with it.

    Raises:
        SpawnRefused: the server starts a process and ``user`` may not start it
            (``selectors.server_spawn_refusal``); nothing is created then.
    """
    refusal = server_spawn_refusal(server=server, user=user)
    if refusal:
        raise SpawnRefused(refusal)
    operation = Operation.objects.create(
        server=server,
        user=user,  # type: ignore[misc]
        source=source,
        kind=kind,
        target=target,
        # Stored redacted from the start (a secret typed into a tool form is sent, never kept),
        # and storable (a NUL in them is sent as typed and kept escaped, as the record keeps it).
        arguments=active_redactor(secrets=user_run_secrets(server=server, user=user)).json(
            storable_json(arguments)[0]
        ),
        saved_call=saved_call,
        invalid_arguments=list(invalid_arguments or []),
        runner=runner_name(),
    )
    if background:
        operation_dispatch(operation_id=operation.pk, tool=tool, arguments=arguments)
        return operation
    return operation_run(
        operation_id=operation.pk, tool=tool, arguments=arguments, redirect=redirect, elicitation=elicitation
    )


def log_level_set(
    *, server: McpServer, user: AbstractBaseUser | None, level: str, source: str = Operation.Source.WEB
) -> Operation:
    """Send ``logging/setLevel`` now and, when the server accepts it, keep the level with the
    server: each new session is told it right after its handshake (``gateway.pool``). The kept
    level is a change of the server, in the audit log like any other (``server_commit``).

    Raises:
        SpawnRefused: as ``operation_start``.
    """
    operation = operation_start(
        server=server, user=user, kind=Operation.Kind.LOG_LEVEL, target=level, source=source
    )
    if operation.status == Operation.Status.OK:
        # Kept for every later session, everyone's: a change of the server, audited as one.
        stored = McpServer.objects.get(pk=server.pk)
        stored.log_level = level
        server_commit(server=stored, actor=user, via=f"{source} logging/setLevel")
        server.log_level = level
    return operation


def app_operation_for_step(*, step: Step, user: AbstractBaseUser) -> Operation:
    """The workbench operation through which ``user`` opens the MCP App of a turn's tool call:
    it carries the step's arguments and result (already recorded and redacted) to the app, and
    collects the app's traffic and the calls it makes. Nothing is sent to the server here; one
    per step and user, made on first use."""
    existing = Operation.objects.filter(kind=Operation.Kind.APP, step=step, user=user).first()  # type: ignore[misc]
    if existing is not None:
        return existing
    return Operation.objects.create(
        server_id=step.server_id,
        user=user,  # type: ignore[misc]
        kind=Operation.Kind.APP,
        target=step.tool_name,
        arguments=step.arguments,
        result=step.result,
        is_error=step.is_error,
        status=Operation.Status.OK,
        step=step,
        finished_at=timezone.now(),
    )


def app_traffic_record(*, operation: Operation, messages: list[AppMessage]) -> int:
    """Keep the postMessage messages between a tool call's app and the host page in the
    server's transcript, as messages of that operation (``direction`` local: they never crossed
    the MCP wire). Redacted and cut like any record; at most ``MESSAGES_PER_OPERATION`` per
    operation, the rest dropped. Returns how many were kept."""
    server = operation.server
    with transaction.atomic():
        # The operation's row lock orders concurrent posts, so the cap and the seqs hold.
        Operation.objects.select_for_update().filter(pk=operation.pk).first()
        kept = operation.exchanges.filter(label__regex=APP_LABEL_RE).count()
        room = max(0, MESSAGES_PER_OPERATION - kept)
        now = timezone.now()
        records = [
            WireExchange(
                channel=Exchange.Channel.MCP,
                label=message.label,
                started_at=now,
                direction=Exchange.Direction.LOCAL,
                jsonrpc_id=message.jsonrpc_id,
                request_body=message.text if message.side == "app" else "",
                response_body=message.text if message.side == "host" else "",
                status="error" if message.is_error else "",
                server_id=server.pk,
                server_name=server.name,
            )
            for message in messages[:room]
        ]
        if not records:
            return 0
        first = (operation.exchanges.order_by("-seq").values_list("seq", flat=True).first() or 0) + 1
        rows = exchange_rows(
            records,
            turn_id=None,
            step_id=None,
            redact=active_redactor(secrets=user_run_secrets(server=server, user=operation.user)),
            first_seq=first,
        )
        Exchange.objects.bulk_create(rows)
        operation.exchanges.add(*rows)
    return len(rows)


def operation_cancel(*, operation: Operation) -> None:
    """Ask the thread running the operation to cancel it (it sends the server a cancel)."""
    Operation.objects.filter(pk=operation.pk, status=Operation.Status.RUNNING).update(cancel_requested=True)


def question_answer(
    *,
    question: PendingInput,
    action: str,
    content: dict[str, Any] | None,
    user: AbstractBaseUser | None = None,
) -> bool:
    """Record the user's answer to an elicitation; False when it is no longer waiting."""
    with transaction.atomic():
        row = PendingInput.objects.select_for_update().get(pk=question.pk)
        if row.status != PendingInput.Status.WAITING:
            return False
        row.mark_answered(action=action, content=content if action == "accept" else None)
        row.answered_by = user  # type: ignore[assignment]
        row.save(update_fields=["status", "answer", "answered_at", "answered_by"])
    return True


def sampling_review_decide(
    *, question: PendingInput, user: AbstractBaseUser, approve: bool, edits: dict[str, Any]
) -> bool:
    """Record ``user``'s review of a held sampling request: approved (with ``edits``, what they
    changed: ``sampling.review_edits``) or refused. The thread running the operation carries it
    out. False when it is no longer waiting (decided, expired, or its operation ended)."""
    with transaction.atomic():
        row = PendingInput.objects.select_for_update().get(pk=question.pk)
        if row.status != PendingInput.Status.WAITING or row.kind != "sampling":
            return False
        row.status = PendingInput.Status.ACCEPTED if approve else PendingInput.Status.DECLINED
        row.answer = {"action": row.status, "edited": edits if approve else {}}
        row.answered_at = timezone.now()
        row.answered_by = user  # type: ignore[assignment]
        row.save(update_fields=["status", "answer", "answered_at", "answered_by"])
    return True


def saved_call_create(*, operation: Operation, owner: AbstractBaseUser | None, name: str) -> SavedCall:
    """Keep a finished manual tool call to run again later, compared against this run."""
    return SavedCall.objects.create(
        server=operation.server,
        owner=owner,  # type: ignore[misc]
        name=name or f"{operation.target} {timezone.now():%Y-%m-%d %H:%M}",
        tool=operation.target,
        arguments=operation.arguments or {},
        baseline=operation,
    )


def saved_call_delete(*, saved_call: SavedCall) -> None:
    saved_call.delete()
