"""The MCP server workbench: the registry, one server's identity and catalogue, manual calls,
resources and prompts, the answers the server asks for, and its raw transcript.

Login is enforced for every view by ``LoginRequiredMiddleware``. Registering or changing a
server is for staff. Any signed-in user may browse the enabled servers (disabled ones are
visible to staff only) and use them, except that only staff may cause a stdio server's process
to be started, unless an administrator allowed it on that server: anyone else gets a 403 page
that says so (``services.SpawnRefused``). What was done with a server — operations, their
questions, saved calls, the transcript — is visible to the user who did it, their team mates
and staff (``servers.selectors``), and to the viewers of their team read-only: a viewer who
tries to cancel it, answer its questions, save it, or run or delete a saved call gets a 403
that says why (``view_access.read_only_refusal``); anyone else gets a 404, as for a missing one.
"""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

import uritemplate
from django.contrib import messages
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from conversations.escaping import hidden_characters
from conversations.record.audit import audit_read
from conversations.signed_in import signed_in_user as _user
from servers import grants, selectors, services
from servers.app_views import app_tool
from servers.forms import (
    ELICITATION_FORMATS,
    CompletionForm,
    OAuthClientForm,
    ResourceReadForm,
    SaveCallForm,
    ServerForm,
    ToolCallForm,
    schema_errors,
)
from servers.gateway.capabilities import unavailable
from servers.models import LOG_LEVELS, McpServer, OAuthGrant, Operation, PendingInput, SavedCall
from servers.sampling import review_edits, review_rows
from servers.view_access import operation_or_404 as _operation
from servers.view_access import read_only_refusal

TRANSCRIPT_PER_PAGE = 50
# How long Connect (and the OAuth callback) wait for the flow to reach its next stop.
CONNECT_REDIRECT_WAIT_SECONDS = 25.0
STATUS_BAD_REQUEST = 400
STATUS_FORBIDDEN = 403
STATUS_BAD_GATEWAY = 502
LIST_KINDS = {
    "tools": Operation.Kind.TOOLS_LIST,
    "resources": Operation.Kind.RESOURCES_LIST,
    "templates": Operation.Kind.TEMPLATES_LIST,
    "prompts": Operation.Kind.PROMPTS_LIST,
}


def _require_staff(request: HttpRequest) -> AbstractBaseUser:
    user = _user(request)
    if not getattr(user, "is_staff", False):
        raise PermissionDenied("Only staff may register or change servers.")
    return user


def _refused(request: HttpRequest, server: McpServer, reason: str) -> HttpResponse:
    """The page a user sees when they may not start this server's process."""
    context = {"server": server, "reason": reason}
    return render(request, "servers/server_refused.html", context, status=STATUS_FORBIDDEN)


def _start(request: HttpRequest, server: McpServer, **operation: Any) -> Operation | HttpResponse:
    """Start an operation as the signed-in user, or the refusal page when they may not."""
    try:
        return services.operation_start(server=server, user=_user(request), **operation)
    except services.SpawnRefused as refused:
        return _refused(request, server, str(refused))


def _read_only(request: HttpRequest, owner_id: int | None, what: str) -> HttpResponse | None:
    """A 403 that says why, when the user only follows the row (``read_only_refusal``); else None."""
    reason = read_only_refusal(request, owner_id=owner_id, what=what)
    if reason is None:
        return None
    return HttpResponse(reason, status=STATUS_FORBIDDEN, content_type="text/plain; charset=utf-8")


def _server(request: HttpRequest, name: str) -> McpServer:
    try:
        return selectors.server_get(user=_user(request), name=name)
    except McpServer.DoesNotExist:
        raise Http404("No such server.") from None


def _saved_call(request: HttpRequest, public_id: UUID) -> SavedCall:
    try:
        return selectors.saved_call_get(user=_user(request), public_id=public_id)
    except SavedCall.DoesNotExist:
        raise Http404("No such saved call.") from None


# --- the registry ---------------------------------------------------------------------------


@require_GET
def server_list(request: HttpRequest) -> HttpResponse:
    servers = selectors.server_list(user=_user(request))
    return render(request, "servers/server_list.html", {"servers": servers})


def _form_page(
    request: HttpRequest, form: ServerForm, server: McpServer | None, status: int = 200
) -> HttpResponse:
    return render(request, "servers/server_form.html", {"form": form, "server": server}, status=status)


def _save_from_form(request: HttpRequest, server: McpServer | None) -> HttpResponse:
    """The registry form for a new (``server=None``) or existing server; saves a valid POST."""
    user = _require_staff(request)
    if request.method == "GET":
        return _form_page(request, ServerForm(instance=server), server)
    form = ServerForm(request.POST, instance=server)
    if not form.is_valid():
        return _form_page(request, form, server, STATUS_BAD_REQUEST)
    saved = services.server_save(
        server=server,
        owner=user,
        fields=form.model_fields(),
        env=form.cleaned_data["env"],
        secret_env=form.cleaned_data["secret_env"],
        headers=form.cleaned_data["headers"],
        secret_headers=form.cleaned_data["secret_headers"],
        via="web form",
    )
    return redirect("servers-detail", name=saved.name)


@require_http_methods(["GET", "POST"])
def server_create(request: HttpRequest) -> HttpResponse:
    return _save_from_form(request, None)


@require_http_methods(["GET", "POST"])
def server_edit(request: HttpRequest, name: str) -> HttpResponse:
    _require_staff(request)
    return _save_from_form(request, _server(request, name))


@require_POST
def server_toggle(request: HttpRequest, name: str) -> HttpResponse:
    user = _require_staff(request)
    server = _server(request, name)
    services.server_set_enabled(server=server, enabled=not server.enabled, actor=user, via="web")
    return redirect("servers-detail", name=server.name)


# --- one server -----------------------------------------------------------------------------


@require_GET
def server_detail(request: HttpRequest, name: str) -> HttpResponse:
    server = _server(request, name)
    user = _user(request)
    listing, tools, overall = selectors.server_tool_reports(server=server, user=user)
    templates = selectors.server_listing(server=server, kind=Operation.Kind.TEMPLATES_LIST, user=user)
    identity = selectors.server_identity(server=server, user=user)
    # Known once a session has opened: what the server did not advertise is not offered.
    advertised = identity.session.get("capabilities") if identity.session else None
    context = {
        "server": server,
        "identity": identity,
        "log_levels": LOG_LEVELS,
        "unavailable": {
            capability: unavailable(server.name, capability, advertised)
            for capability in ("tools", "resources", "prompts", "completions", "logging")
        }
        | {"subscribe": unavailable(server.name, "resources.subscribe", advertised)},
        "subscriptions": selectors.server_subscriptions(server=server, user=user),
        "tools": tools,
        "tool_listing": listing,
        "tool_findings": overall,
        "tool_tokens": sum(report.tokens or 0 for report in tools),
        "resources": selectors.server_listing(server=server, kind=Operation.Kind.RESOURCES_LIST, user=user),
        "templates": [
            (template, sorted(uritemplate.URITemplate(str(template.get("uriTemplate", ""))).variable_names))
            for template in templates.items
        ],
        "templates_listing": templates,
        "prompts": selectors.server_listing(server=server, kind=Operation.Kind.PROMPTS_LIST, user=user),
        "saved_calls": selectors.server_saved_calls(server=server, user=user),
        "operations": selectors.server_operations(server=server, user=user)[:15],
        "spawn_refusal": selectors.server_spawn_refusal(server=server, user=user),
        "last_change": selectors.server_last_change(server=server)
        if getattr(user, "is_staff", False)
        else None,
    }
    return render(request, "servers/server_detail.html", context)


@require_POST
def server_connect(request: HttpRequest, name: str) -> HttpResponse:
    server = _server(request, name)
    if server.spawns_process:
        started = _start(request, server, kind=Operation.Kind.CONNECT)
        if isinstance(started, HttpResponse):
            return started
        return redirect(reverse("servers-detail", kwargs={"name": server.name}) + "#identity")
    return _connect_authorizing(request, server, grants.grant_ensure(server=server, user=_user(request)))


@require_POST
def server_ping(request: HttpRequest, name: str) -> HttpResponse:
    """``ping`` now, as the signed-in user; the operation's page shows the round trip."""
    server = _server(request, name)
    started = _start(request, server, kind=Operation.Kind.PING)
    if isinstance(started, HttpResponse):
        return started
    return redirect(reverse("servers-operation", kwargs={"public_id": started.public_id}))


@require_POST
def server_oauth_client(request: HttpRequest, name: str) -> HttpResponse:
    """Connect with a client registered with the authorization server beforehand: the signed-in
    user's grant keeps its id, and its secret sealed (never shown again)."""
    server = _server(request, name)
    if server.spawns_process:
        raise Http404("OAuth is for HTTP servers.")
    form = OAuthClientForm(request.POST)
    if not form.is_valid():
        for field, errors in form.errors.items():
            messages.error(request, f"{form.fields[field].label}: {' '.join(str(error) for error in errors)}")
        return redirect(reverse("servers-detail", kwargs={"name": server.name}) + "#identity")
    grant = grants.grant_client_register(
        server=server,
        user=_user(request),
        client_id=form.cleaned_data["client_id"],
        client_secret=form.cleaned_data["client_secret"],
    )
    return _connect_authorizing(request, server, grant)


def _connect_authorizing(request: HttpRequest, server: McpServer, grant: OAuthGrant) -> HttpResponse:
    """Connect an HTTP server with ``grant``: the connect runs while the browser signs in."""
    started = _start(request, server, kind=Operation.Kind.CONNECT, background=True)
    if isinstance(started, HttpResponse):
        return started
    sign_in = selectors.oauth_sign_in_url(grant=grant, operation=started, wait=CONNECT_REDIRECT_WAIT_SECONDS)
    if sign_in:
        # Not a redirect: the page's form-action policy forbids a form post leading off-site.
        context = {"server": server, "sign_in": sign_in, "operation": started}
        return render(request, "servers/server_sign_in.html", context)
    return redirect(reverse("servers-operation", kwargs={"public_id": started.public_id}))


@require_GET
def oauth_callback(request: HttpRequest) -> HttpResponse:
    """Where the authorization server sends the browser back: the sign-in it belongs to (the
    user's own, by ``state``) takes the code; then the OAuth debugger shows how it went."""
    user = _user(request)
    grant = grants.grant_callback_store(
        user=user, state=request.GET.get("state", ""), url=request.build_absolute_uri()
    )
    if grant is None:
        raise Http404("No sign-in of yours is waiting for this answer.")
    selectors.oauth_wait_settled(grant=grant, wait=CONNECT_REDIRECT_WAIT_SECONDS)
    return redirect(reverse("servers-oauth", kwargs={"name": grant.server.name}))


@require_GET
def server_oauth(request: HttpRequest, name: str) -> HttpResponse:
    """The OAuth debugger: the signed-in user's grant (never its tokens) and every step of the
    flows their operations ran, as recorded."""
    server = _server(request, name)
    user = _user(request)
    grant = grants.grant_get(server=server, user=user)
    if grant is None:
        raise Http404("You have not authorized this server.")
    context = {"server": server, "grant": grant, "flows": selectors.oauth_flows(server=server, user=user)}
    return render(request, "servers/server_oauth.html", context)


@require_POST
def server_oauth_share(request: HttpRequest, name: str) -> HttpResponse:
    """The signed-in user lets their team mates' turns use their grant for this server (when
    they have none of their own), or stops that; audited (``grants.grant_share``)."""
    server = _server(request, name)
    grant = grants.grant_get(server=server, user=_user(request))
    if grant is None:
        raise Http404("You have not authorized this server.")
    grants.grant_share(grant=grant, shared=request.POST.get("shared") == "1", actor=_user(request))
    return redirect(reverse("servers-oauth", kwargs={"name": server.name}) + "#grant")


@require_POST
def server_log_level(request: HttpRequest, name: str) -> HttpResponse:
    """``logging/setLevel`` on the server now; kept for its later sessions when accepted."""
    server = _server(request, name)
    refusal = selectors.server_spawn_refusal(server=server, user=_user(request))
    if refusal:
        return _refused(request, server, refusal)
    level = request.POST.get("level", "")
    if level not in LOG_LEVELS:
        return HttpResponse("Choose one of the eight log levels.", status=STATUS_BAD_REQUEST)
    try:
        operation = services.log_level_set(server=server, user=_user(request), level=level)
    except services.SpawnRefused as refused:
        return _refused(request, server, str(refused))
    return redirect(reverse("servers-operation", kwargs={"public_id": operation.public_id}))


@require_POST
def server_refresh(request: HttpRequest, name: str, what: str) -> HttpResponse:
    server = _server(request, name)
    kind = LIST_KINDS.get(what)
    if kind is None:
        raise Http404("Nothing to list by that name.")
    started = _start(request, server, kind=kind)
    if isinstance(started, HttpResponse):
        return started
    return redirect(reverse("servers-detail", kwargs={"name": server.name}) + f"#{what}")


def _tool_page(
    request: HttpRequest, server: McpServer, tool: dict[str, Any], form: ToolCallForm, status: int = 200
) -> HttpResponse:
    context = {
        "server": server,
        "tool": tool,
        "form": form,
        "recent": selectors.server_operations(
            server=server, user=_user(request), kind=Operation.Kind.TOOLS_CALL, target=tool["name"]
        )[:10],
        "spawn_refusal": selectors.server_spawn_refusal(server=server, user=_user(request)),
    }
    return render(request, "servers/server_tool.html", context, status=status)


@require_http_methods(["GET", "POST"])
def tool_detail(request: HttpRequest, name: str, tool: str) -> HttpResponse:
    server = _server(request, name)
    definition = selectors.tool_definition(server=server, name=tool, user=_user(request))
    if definition is None:
        raise Http404("This tool is not in the server's last tools/list: list the tools again.")
    schema = definition.get("inputSchema") if isinstance(definition.get("inputSchema"), dict) else None
    if request.method == "GET":
        initial = request.GET.get("arguments") or "{}"
        return _tool_page(
            request, server, definition, ToolCallForm(initial={"arguments": initial}, schema=schema)
        )
    # "Send anyway": the second button the page offers once the arguments failed the schema.
    form = ToolCallForm(request.POST, schema=schema, send_anyway=request.POST.get("send_anyway") == "1")
    if not form.is_valid():
        return _tool_page(request, server, definition, form, STATUS_BAD_REQUEST)
    started = _start(
        request,
        server,
        kind=Operation.Kind.TOOLS_CALL,
        target=tool,
        arguments=form.cleaned_data["arguments"],
        tool=definition,
        background=True,
        invalid_arguments=form.overridden,
    )
    if isinstance(started, HttpResponse):
        return started
    return redirect("servers-operation", public_id=started.public_id)


@require_POST
def resource_read(request: HttpRequest, name: str) -> HttpResponse:
    server = _server(request, name)
    template = request.POST.get("template", "")
    if template:
        uri = uritemplate.URITemplate(template).expand(
            {
                key.removeprefix("var_"): str(value)
                for key, value in request.POST.items()
                if key.startswith("var_")
            }
        )
    else:
        form = ResourceReadForm(request.POST)
        if not form.is_valid():
            return HttpResponse(
                "A resource URI of at most 500 characters is needed.", status=STATUS_BAD_REQUEST
            )
        uri = form.cleaned_data["uri"]
    started = _start(
        request,
        server,
        kind=Operation.Kind.RESOURCE_READ,
        target=uri,
        arguments={"template": template} if template else None,
    )
    if isinstance(started, HttpResponse):
        return started
    return redirect("servers-operation", public_id=started.public_id)


@require_POST
def resource_subscribe(request: HttpRequest, name: str) -> HttpResponse:
    """``resources/subscribe`` to one URI: an operation that records each update as it comes
    until the user unsubscribes (cancels it) or the workbench's limit passes."""
    server = _server(request, name)
    form = ResourceReadForm(request.POST)
    if not form.is_valid():
        return HttpResponse("A resource URI of at most 500 characters is needed.", status=STATUS_BAD_REQUEST)
    started = _start(
        request,
        server,
        kind=Operation.Kind.RESOURCE_SUBSCRIBE,
        target=form.cleaned_data["uri"],
        background=True,
    )
    if isinstance(started, HttpResponse):
        return started
    return redirect("servers-operation", public_id=started.public_id)


@require_POST
def prompt_get(request: HttpRequest, name: str) -> HttpResponse:
    server = _server(request, name)
    prompt = request.POST.get("prompt", "")
    if not prompt:
        return HttpResponse("Which prompt?", status=STATUS_BAD_REQUEST)
    arguments = {
        key.removeprefix("arg_"): value
        for key, value in request.POST.items()
        if key.startswith("arg_") and value != ""
    }
    started = _start(request, server, kind=Operation.Kind.PROMPT_GET, target=prompt, arguments=arguments)
    if isinstance(started, HttpResponse):
        return started
    return redirect("servers-operation", public_id=started.public_id)


@require_POST
def completion(request: HttpRequest, name: str) -> JsonResponse:
    """Suggestions for one prompt argument or template variable (``completion/complete``)."""
    server = _server(request, name)
    refusal = selectors.server_spawn_refusal(server=server, user=_user(request))
    if refusal:
        return JsonResponse({"values": [], "error": refusal}, status=STATUS_FORBIDDEN)
    form = CompletionForm(request.POST)
    if not form.is_valid():
        return JsonResponse({"error": form.errors.get_json_data()}, status=STATUS_BAD_REQUEST)
    data = form.cleaned_data
    key = "name" if data["ref_type"] == "ref/prompt" else "uri"
    operation = services.operation_start(
        server=server,
        user=_user(request),
        kind=Operation.Kind.COMPLETE,
        target=data["ref"],
        arguments={
            "ref": {"type": data["ref_type"], key: data["ref"]},
            "argument": {"name": data["argument"], "value": data["value"]},
            "context": data["context"],
        },
    )
    result = operation.result if isinstance(operation.result, dict) else {}
    values = (result.get("completion") or {}).get("values") or []
    return JsonResponse(
        {
            "values": [str(v) for v in values],
            "error": operation.error,
            "operation": reverse("servers-operation", kwargs={"public_id": operation.public_id}),
        }
    )


# --- operations -----------------------------------------------------------------------------


def _json_hidden(*values: object) -> bool:
    """Whether a string in ``values`` (JSON, walked with a stack) holds a hidden character."""
    stack = list(values)
    while stack:
        value = stack.pop()
        if isinstance(value, str) and hidden_characters(value):
            return True
        nested = [*value, *value.values()] if isinstance(value, dict) else value
        stack.extend(nested if isinstance(nested, list) else ())
    return False


def _operation_context(operation: Operation) -> dict[str, Any]:
    questions = selectors.operation_questions(operation=operation)
    for question in questions:
        if question.kind == "sampling":
            # The held request's messages as the review form shows them.
            question.review_rows = review_rows(question.params)  # type: ignore[attr-defined]
            system = question.params.get("systemPrompt")
            question.system_hidden = isinstance(system, str) and hidden_characters(system)  # type: ignore[attr-defined]
    return {
        "operation": operation,
        "server": operation.server,
        "exchanges": selectors.operation_exchanges(operation=operation),
        "log_messages": selectors.operation_log_messages(operation=operation),
        "updates": selectors.operation_updates(operation=operation),
        "questions": questions,
        "diff": selectors.operation_diff(operation=operation),
        # The row's note on hidden characters (each is marked where shown: inspector.templating).
        "hidden": _json_hidden(
            operation.target,
            operation.arguments,
            operation.error,
            operation.result,
            operation.invalid_arguments,
        )
        or _json_hidden(*(question.params for question in questions), *(q.answer for q in questions)),
    }


@require_GET
def operation_detail(request: HttpRequest, public_id: UUID) -> HttpResponse:
    operation = _operation(request, public_id)
    context = _operation_context(operation) | {"save_form": SaveCallForm()}
    # A viewer of the owner's team sees the call but does not drive its app (``app_views``).
    following = read_only_refusal(request, owner_id=operation.user_id, what="use its app") is not None
    found = None if following else app_tool(request, operation)
    if found is not None and operation.is_finished and operation.result is not None:
        definition, uri = found
        context["app"] = {"uri": uri, "tool": definition, "arguments": operation.arguments}
        context["app"]["result"] = operation.result
    return render(request, "servers/server_operation.html", context)


@require_GET
def operation_state(request: HttpRequest, public_id: UUID) -> JsonResponse:
    """What a polling page needs: whether the operation is still running, and its body rendered."""
    operation = _operation(request, public_id)
    html = render_to_string("servers/_operation.html", _operation_context(operation), request=request)
    return JsonResponse({"status": operation.status, "finished": operation.is_finished, "html": html})


@require_POST
def operation_cancel(request: HttpRequest, public_id: UUID) -> HttpResponse:
    operation = _operation(request, public_id)
    if refused := _read_only(request, operation.user_id, "cancel this operation"):
        return refused
    services.operation_cancel(operation=operation)
    return redirect("servers-operation", public_id=operation.public_id)


@require_POST
def question_answer(request: HttpRequest, public_id: UUID, question_id: int) -> HttpResponse:
    operation = _operation(request, public_id)
    try:
        question = selectors.question_get(user=_user(request), operation=operation, question_id=question_id)
    except PendingInput.DoesNotExist:
        raise Http404("No such question.") from None
    if refused := _read_only(request, operation.user_id, "answer the questions its server asks"):
        return refused
    if question.kind == "sampling":
        return _sampling_review(request, operation, question)
    action = request.POST.get("action", "decline")
    if action not in {"accept", "decline", "cancel"}:
        return HttpResponse("Unknown action.", status=STATUS_BAD_REQUEST)
    content: dict[str, Any] | None = None
    if action == "accept" and question.params.get("mode", "form") != "url":
        try:
            content = json.loads(request.POST.get("content") or "{}")
        except ValueError:
            return HttpResponse("The answer is not JSON.", status=STATUS_BAD_REQUEST)
        if not isinstance(content, dict):
            return HttpResponse("The answer must be a JSON object.", status=STATUS_BAD_REQUEST)
        schema = question.params.get("requestedSchema")
        errors = (
            schema_errors(schema, content, formats=ELICITATION_FORMATS) if isinstance(schema, dict) else []
        )
        if errors:
            return HttpResponse(
                "Not sent: the answer does not match the schema the server asked for:\n" + "\n".join(errors),
                status=STATUS_BAD_REQUEST,
                content_type="text/plain; charset=utf-8",
            )
    services.question_answer(question=question, action=action, content=content, user=_user(request))
    return redirect("servers-operation", public_id=operation.public_id)


def _sampling_review(request: HttpRequest, operation: Operation, question: PendingInput) -> HttpResponse:
    """The user's decision on a held sampling request: approve (as edited) or refuse."""
    action = request.POST.get("action", "")
    if action not in {"approve", "refuse"}:
        return HttpResponse("Approve or refuse?", status=STATUS_BAD_REQUEST)
    edits: dict[str, Any] = {}
    if action == "approve":
        edits, error = review_edits(question.params, request.POST)
        if error:
            return HttpResponse(
                f"Not sent: {error}.", status=STATUS_BAD_REQUEST, content_type="text/plain; charset=utf-8"
            )
    services.sampling_review_decide(
        question=question, user=_user(request), approve=action == "approve", edits=edits
    )
    return redirect("servers-operation", public_id=operation.public_id)


# --- saved calls ----------------------------------------------------------------------------


@require_POST
def saved_call_create(request: HttpRequest, public_id: UUID) -> HttpResponse:
    operation = _operation(request, public_id)
    if refused := _read_only(request, operation.user_id, "save its calls"):
        return refused
    if operation.kind != Operation.Kind.TOOLS_CALL:
        return HttpResponse("Only tool calls can be saved.", status=STATUS_BAD_REQUEST)
    form = SaveCallForm(request.POST)
    form.is_valid()
    services.saved_call_create(
        operation=operation, owner=_user(request), name=form.cleaned_data.get("name", "")
    )
    return redirect(reverse("servers-detail", kwargs={"name": operation.server.name}) + "#saved")


@require_POST
def saved_call_run(request: HttpRequest, public_id: UUID) -> HttpResponse:
    saved = _saved_call(request, public_id)
    if refused := _read_only(request, saved.owner_id, "run its saved calls"):
        return refused
    definition = selectors.tool_definition(server=saved.server, name=saved.tool, user=_user(request))
    schema = (definition or {}).get("inputSchema")
    started = _start(
        request,
        saved.server,
        kind=Operation.Kind.TOOLS_CALL,
        target=saved.tool,
        arguments=saved.arguments,
        saved_call=saved,
        tool=definition,
        background=True,
        # Run again as saved: arguments that break the tool's schema (saved from a "send anyway",
        # or the schema changed since) are sent, and marked as such.
        invalid_arguments=schema_errors(schema, saved.arguments) if isinstance(schema, dict) else [],
    )
    if isinstance(started, HttpResponse):
        return started
    return redirect("servers-operation", public_id=started.public_id)


@require_POST
def saved_call_delete(request: HttpRequest, public_id: UUID) -> HttpResponse:
    saved = _saved_call(request, public_id)
    if refused := _read_only(request, saved.owner_id, "delete its saved calls"):
        return refused
    services.saved_call_delete(saved_call=saved)
    return redirect(reverse("servers-detail", kwargs={"name": saved.server.name}) + "#saved")


# --- the transcript -------------------------------------------------------------------------


def _audit_turn_reads(request: HttpRequest, server: McpServer, exchanges: Any, via: str) -> None:
    """Messages of agent turns shown in a server's transcript are reads of their conversations."""
    for conversation in selectors.exchange_conversations(exchanges=exchanges):
        audit_read(actor=_user(request), conversation=conversation, via=via, subject=f"server {server.name}")


def _transcript_filters(request: HttpRequest) -> dict[str, Any]:
    return {
        "method": request.GET.get("method", "").strip(),
        "errors": request.GET.get("errors") == "1",
        "turns": request.GET.get("turns") == "1",
    }


@require_GET
def transcript(request: HttpRequest, name: str) -> HttpResponse:
    server = _server(request, name)
    filters = _transcript_filters(request)
    exchanges = selectors.server_transcript(server=server, user=_user(request), **filters)
    page = Paginator(exchanges, TRANSCRIPT_PER_PAGE).get_page(request.GET.get("page"))
    _audit_turn_reads(request, server, [exchange.pk for exchange in page.object_list], "server transcript")
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "server": server,
        "page": page,
        "filters": filters,
        "methods": selectors.transcript_methods(server=server, user=_user(request)),
        "query": query.urlencode(),
    }
    return render(request, "servers/server_transcript.html", context)


@require_GET
def transcript_export(request: HttpRequest, name: str) -> JsonResponse:
    server = _server(request, name)
    filters = _transcript_filters(request)
    exchanges = selectors.server_transcript(server=server, user=_user(request), **filters)
    _audit_turn_reads(request, server, exchanges.values("pk"), "server transcript download")
    response = JsonResponse(
        {
            "server": server.name,
            "filters": filters,
            "messages": selectors.transcript_export(exchanges=exchanges),
        },
        json_dumps_params={"ensure_ascii": False, "indent": 1},
    )
    response["Content-Disposition"] = f'attachment; filename="{server.name}-transcript.json"'
    return response
