"""The HTTP MCP proxy's routes. Authenticated by the proxy key in the URL (no login, no CSRF:
hosts are programs); everything else is ``servers.proxy.http``."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.views.decorators.csrf import csrf_exempt

from servers.proxy import http


@csrf_exempt
@login_not_required
async def mcp(request: HttpRequest, key: str, server: str) -> HttpResponseBase:
    """Streamable HTTP: POST, GET (the server's event stream) and DELETE, forwarded as they are."""
    route = await sync_to_async(http.route_resolve)(
        request, raw_key=key, server_name=server, transport="http"
    )
    if isinstance(route, HttpResponse):
        return route
    return await http.forward_streamable(request, route)


@csrf_exempt
@login_not_required
async def sse(request: HttpRequest, key: str, server: str) -> HttpResponseBase:
    """The legacy HTTP+SSE transport's event stream (its ``endpoint`` event rewritten to come back here)."""
    route = await sync_to_async(http.route_resolve)(request, raw_key=key, server_name=server, transport="sse")
    if isinstance(route, HttpResponse):
        return route
    return await http.forward_sse_stream(request, route)


@csrf_exempt
@login_not_required
async def sse_messages(request: HttpRequest, key: str, server: str) -> HttpResponseBase:
    """The legacy transport's POSTs, to the endpoint the stream named (``?to=``)."""
    route = await sync_to_async(http.route_resolve)(request, raw_key=key, server_name=server, transport="sse")
    if isinstance(route, HttpResponse):
        return route
    return await http.forward_sse_post(request, route, request.GET.get("to", ""))
