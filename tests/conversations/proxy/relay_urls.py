"""A route that passes everything under ``relay/`` through ``forward.relay`` to ``TARGET.url``,
handing each finished exchange to ``TARGET.done``: the forwarding tested on its own, with no key
and no recorder (those are the LLM routes' business, tested through them)."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponseBase
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from conversations.loop.wire import WireExchange
from conversations.proxy import forward


@dataclass
class Target:
    url: str = ""
    limit: int = 1_000_000
    done: list[WireExchange] = field(default_factory=list)


TARGET = Target()


@login_not_required
@csrf_exempt
async def relay(request: HttpRequest, rest: str) -> HttpResponseBase:
    query = request.META.get("QUERY_STRING", "")
    url = f"{TARGET.url}/{rest}" + (f"?{query}" if query else "")
    return await forward.relay(request, url, limit=TARGET.limit, read_timeout=60, on_done=TARGET.done.append)


urlpatterns = [path("relay/<path:rest>", relay)]
