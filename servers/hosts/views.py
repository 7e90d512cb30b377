"""The server's tools as each host would send them: ``/servers/<name>/hosts[?host=KEY...]``.

Login is enforced by ``LoginRequiredMiddleware``. The page shows the newest ``tools/list`` the
user may see (their own, their team's; staff: all): anyone who may see none gets a 404, as for a
server they may not see.
"""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from conversations.signed_in import signed_in_user
from servers import selectors
from servers.hosts import reports
from servers.models import McpServer


@require_GET
def server_hosts(request: HttpRequest, name: str) -> HttpResponse:
    user = signed_in_user(request)
    try:
        server = selectors.server_get(user=user, name=name)
    except McpServer.DoesNotExist:
        raise Http404("No such server.") from None
    listed = reports.listed_tools(server=server, user=user)
    if not listed.listing.listed:
        raise Http404("No tools/list of yours for this server: list its tools first.")
    chosen = request.GET.getlist("host")
    try:
        presets = reports.hosts_named(chosen)
    except reports.UnknownHost:
        raise Http404("No such host preset.") from None
    context = {
        "server": server,
        "listing": listed.listing,
        "views": reports.host_views(server.name, listed.tools, presets),
        "chosen": [preset.key for preset in presets] if chosen else [],
    }
    return render(request, "servers/server_hosts.html", context)
