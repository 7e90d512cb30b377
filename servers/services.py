"""Writes about MCP servers: the registry, workbench operations, answers, saved calls."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from inspector.wire import MASK
from servers.gateway.config import has_references
from servers.models import SECRET_NAME_RE, McpServer, Operation, PendingInput, SavedCall
from servers.operations import operation_dispatch, operation_run
from servers.vault import is_sealed, seal

DEMO_SERVER_NAME = "demo"


def demo_server_ensure() -> McpServer:
    """The bundled teaching server over stdio, run by this installation's own interpreter."""
    server, _ = McpServer.objects.update_or_create(
        name=DEMO_SERVER_NAME,
        defaults={
            "description": "Bundled teaching server: weather forecast, calculator, unit converter, notes.",
            "transport": "stdio",
            "command": sys.executable,
            "args": ["-m", "servers.demo_server"],
            "cwd": str(settings.BASE_DIR),
            "era": "legacy",
            "is_demo": True,
            "enabled": True,
        },
    )
    return server


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
) -> McpServer:
    """Create (``server=None``) or update a server; secrets are sealed before they are stored."""
    target = server or McpServer(owner=owner)  # type: ignore[misc]
    for name, value in fields.items():
        setattr(target, name, value)
    target.env = stored_values(plain=env, secret=secret_env, previous=server.env if server else {})
    target.headers = stored_values(
        plain=headers, secret=secret_headers, previous=server.headers if server else {}
    )
    target.full_clean()
    target.save()
    return target


def server_set_enabled(*, server: McpServer, enabled: bool) -> McpServer:
    server.enabled = enabled
    server.save(update_fields=["enabled", "updated_at"])
    return server


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
) -> Operation:
    """Create an operation and run it: here and now, or (``background``) in the workbench pool.

    A background operation is followed by polling it; anything else is finished on return.
    """
    operation = Operation.objects.create(
        server=server,
        user=user,  # type: ignore[misc]
        source=source,
        kind=kind,
        target=target,
        arguments=arguments,
        saved_call=saved_call,
    )
    if background:
        operation_dispatch(operation_id=operation.pk, tool=tool)
        return operation
    return operation_run(operation_id=operation.pk, tool=tool)


def operation_cancel(*, operation: Operation) -> None:
    """Ask the thread running the operation to cancel it (it sends the server a cancel)."""
    Operation.objects.filter(pk=operation.pk, status=Operation.Status.RUNNING).update(cancel_requested=True)


def question_answer(*, question: PendingInput, action: str, content: dict[str, Any] | None) -> bool:
    """Record the user's answer to an elicitation; False when it is no longer waiting."""
    with transaction.atomic():
        row = PendingInput.objects.select_for_update().get(pk=question.pk)
        if row.status != PendingInput.Status.WAITING:
            return False
        row.mark_answered(action=action, content=content if action == "accept" else None)
        row.save(update_fields=["status", "answer", "answered_at"])
    return True


def saved_call_create(
    *, operation: Operation, owner: AbstractBaseUser | None, name: str
) -> SavedCall:
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
