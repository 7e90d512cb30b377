"""The views of MCP Apps (docs/mcp-apps.md): a tool's UI opened from its call, rendered in a
sandboxed frame, its own tool calls and its traffic recorded on the operation."""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.urls import reverse
from django.views.decorators.clickjacking import xframe_options_sameorigin
from django.views.decorators.http import require_GET, require_POST

from conversations.signed_in import signed_in_user as _user
from servers import mcp_apps, selectors, services
from servers.models import Operation
from servers.view_access import operation_or_404 as _operation
from servers.view_access import read_only_refusal

STATUS_BAD_REQUEST = 400
STATUS_FORBIDDEN = 403
STATUS_BAD_GATEWAY = 502


def _server_tool(
    request: HttpRequest, operation: Operation, name: str, *, list_now: bool = False
) -> dict[str, Any] | None:
    """A tool of the operation's server by name: as the turn was given it, for the app of a
    turn's call; else as the server last listed it. A tool for apps only was never offered to the
    model, so a turn does not hold it: with ``list_now`` the server is listed again (a recorded
    ``tools/list``) when no listing has it."""
    if operation.kind == Operation.Kind.APP and operation.step is not None:
        found = mcp_apps.turn_tool(operation.step.turn.tools, server_id=operation.server_id, name=name)
        if found is not None:
            return found
    user = _user(request)
    found = selectors.tool_definition(server=operation.server, name=name, user=user)
    if found is None and list_now:
        services.operation_start(server=operation.server, user=user, kind=Operation.Kind.TOOLS_LIST)
        found = selectors.tool_definition(server=operation.server, name=name, user=user)
    return found


def app_tool(request: HttpRequest, operation: Operation) -> tuple[dict[str, Any], str] | None:
    """The called tool's definition and its ``ui://`` resource, when the operation is a call of
    a tool with a UI (as the server last listed it), or the app of a turn's call of one (as the
    turn was given it)."""
    if operation.kind not in (Operation.Kind.APP, Operation.Kind.TOOLS_CALL):
        return None
    definition = _server_tool(request, operation, operation.target)
    uri = mcp_apps.ui_resource_uri(definition)
    return (definition, uri) if definition is not None and uri else None


def _read_only(request: HttpRequest, operation: Operation) -> JsonResponse | None:
    """A 403 when the user follows the operation read-only (a viewer of its owner's team sees its
    app's record but does not drive the app: no reads, calls or traffic on it); else None."""
    reason = read_only_refusal(request, owner_id=operation.user_id, what="use its MCP App")
    return None if reason is None else JsonResponse({"error": reason}, status=STATUS_FORBIDDEN)


def _app_call(request: HttpRequest, public_id: UUID) -> tuple[Operation, dict[str, Any], str]:
    """The operation whose app is talking, if the user may see it and it has an app; else 404."""
    operation = _operation(request, public_id)
    found = app_tool(request, operation)
    if found is None:
        raise Http404("This operation is not a call of a tool with a UI.")
    return operation, *found


def _json_body(request: HttpRequest) -> Any:
    try:
        return json.loads(request.body)
    except (ValueError, RecursionError):
        return None


@require_POST
def app_open(request: HttpRequest, public_id: UUID) -> JsonResponse:
    """Read the called tool's ``ui://`` resource (an ordinary, recorded ``resources/read``) and
    say where the sandboxed frame loads it from and under which policy; for an app viewed
    before, also the tool calls it made then with the answers it got (the page replays them)."""
    operation, _tool, uri = _app_call(request, public_id)
    if refused := _read_only(request, operation):
        return refused
    try:
        read = services.operation_start(
            server=operation.server, user=_user(request), kind=Operation.Kind.RESOURCE_READ, target=uri
        )
    except services.SpawnRefused as refused:
        return JsonResponse({"error": str(refused)}, status=STATUS_FORBIDDEN)
    links = {"read": reverse("servers-operation", kwargs={"public_id": read.public_id})}
    try:
        resource = mcp_apps.app_resource(read.result, uri=uri)
    except mcp_apps.AppResourceError as exc:
        return JsonResponse({"error": read.error or str(exc), **links}, status=STATUS_BAD_GATEWAY)
    # Viewed before: the page shows what the app's tool calls were answered then, and calls the
    # server again only when the user asks (the page's "Re-run" button).
    recorded = selectors.app_recorded_calls(operation=operation)
    return JsonResponse(
        {
            "view": reverse("servers-app-view", kwargs={"public_id": read.public_id}),
            "csp": resource.csp,
            "refused": resource.refused,
            "permissions": resource.permissions,
            "replay": recorded is not None,
            "recorded": [call.as_json() for call in recorded or []],
            **links,
        }
    )


@require_GET
@xframe_options_sameorigin
def app_view(request: HttpRequest, public_id: UUID) -> HttpResponse:
    """An app's HTML, from the ``resources/read`` that fetched it, under its own strict policy
    (``mcp_apps.csp_header``): the page frames it sandboxed, without same-origin."""
    read = _operation(request, public_id)
    if read.kind != Operation.Kind.RESOURCE_READ or not read.target.startswith("ui://"):
        raise Http404("Not an app resource.")
    try:
        resource = mcp_apps.app_resource(read.result, uri=read.target)
    except mcp_apps.AppResourceError:
        raise Http404("This read gave no app.") from None
    response = HttpResponse(resource.html, content_type="text/html; charset=utf-8")
    response["Content-Security-Policy"] = mcp_apps.csp_header(resource.csp)
    response["Referrer-Policy"] = "no-referrer"
    response["Cache-Control"] = "no-store"
    return response


@require_POST
def app_tool_call(request: HttpRequest, public_id: UUID) -> JsonResponse:
    """A ``tools/call`` an app asks the host for: only a tool of the same server (as last
    listed), run and recorded as an ordinary workbench call of the signed-in user."""
    operation, _tool, _uri = _app_call(request, public_id)
    if refused := _read_only(request, operation):
        return refused
    body = _json_body(request)
    name = body.get("name") if isinstance(body, dict) else None
    arguments = body.get("arguments", {}) if isinstance(body, dict) else None
    if not isinstance(name, str) or not isinstance(arguments, dict):
        return JsonResponse({"error": "send {name, arguments}"}, status=STATUS_BAD_REQUEST)
    try:
        definition = _server_tool(request, operation, name, list_now=True)
    except services.SpawnRefused as refused:
        return JsonResponse({"error": str(refused)}, status=STATUS_FORBIDDEN)
    if definition is None:
        return JsonResponse(
            {"error": f"{operation.server.name} listed no tool named {name[:100]!r}"},
            status=STATUS_BAD_REQUEST,
        )
    try:
        call = services.operation_start(
            server=operation.server,
            user=_user(request),
            kind=Operation.Kind.TOOLS_CALL,
            target=name,
            arguments=arguments,
            tool=definition,
        )
    except services.SpawnRefused as refused:
        return JsonResponse({"error": str(refused)}, status=STATUS_FORBIDDEN)
    return JsonResponse(
        {
            "result": call.result,
            "error": call.error,
            "operation": reverse("servers-operation", kwargs={"public_id": call.public_id}),
        }
    )


@require_POST
def app_traffic(request: HttpRequest, public_id: UUID) -> JsonResponse:
    """The postMessage messages the host page exchanged with the app, to keep in the transcript.

    Untrusted: at most ``BATCH_MESSAGES`` per post, each cut to ``MESSAGE_CHARS``; items that
    are not ``{"side": "app"|"host", "message": text}`` are refused and counted."""
    operation, _tool, _uri = _app_call(request, public_id)
    if refused := _read_only(request, operation):
        return refused
    body = _json_body(request)
    items = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(items, list):
        return JsonResponse({"error": "send {messages: [...]}"}, status=STATUS_BAD_REQUEST)
    messages = [message for message in map(mcp_apps.app_message, items[: mcp_apps.BATCH_MESSAGES]) if message]
    kept = services.app_traffic_record(operation=operation, messages=messages)
    return JsonResponse({"kept": kept, "dropped": len(items) - kept})
