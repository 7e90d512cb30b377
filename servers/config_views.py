"""The servers page's import and export of a host's configuration (``servers.mcp_config``): the
same as ``manage.py server import`` / ``server export``, staff-only for import (it may register
stdio servers, which start processes), any signed-in user for the export of what they may see."""

from __future__ import annotations

import json

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_GET, require_POST

from conversations.signed_in import signed_in_user
from servers import mcp_config, selectors


@require_POST
def config_import(request: HttpRequest) -> HttpResponse:
    """Register every server of the pasted or uploaded configuration, or none (the reason shown)."""
    user = signed_in_user(request)
    if not getattr(user, "is_staff", False):
        raise PermissionDenied("Only staff may register servers.")
    upload = request.FILES.get("file")
    raw: bytes | str = (
        upload.read(mcp_config.MAX_BYTES + 1) if upload is not None else request.POST.get("config", "")
    )
    try:
        saved = mcp_config.import_entries(
            mcp_config.parse(raw), actor=user, replace=request.POST.get("replace") == "on", via="web"
        )
    except mcp_config.ConfigFileError as exc:
        messages.error(request, f"Nothing imported: {exc}")
        return redirect("servers-list")
    names = ", ".join(f"{server.name} ({'added' if new else 'updated'})" for server, new in saved)
    messages.success(request, f"Imported {len(saved)} server(s): {names}. Env and header values are sealed.")
    return redirect("servers-list")


@require_GET
def config_export(request: HttpRequest) -> HttpResponse:
    """The servers this user may see, as a host's configuration file (``?format=vscode`` for VS
    Code's shape), every sealed value a placeholder."""
    shape = request.GET.get("format", "mcpServers")
    if shape not in mcp_config.FORMATS:
        shape = "mcpServers"
    document = mcp_config.export(selectors.server_list(user=signed_in_user(request)), shape=shape)
    filename = "mcp.json" if shape == "vscode" else "mcpServers.json"
    response = HttpResponse(
        json.dumps(document, indent=2, ensure_ascii=False), content_type="application/json; charset=utf-8"
    )
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
