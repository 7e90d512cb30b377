"""The LLM recording proxy: a host's model calls pass through to the key's upstream and are recorded.

A host points its SDK's base URL at ``/proxy/<key>/openai/v1``, ``/proxy/<key>/anthropic`` or
``/proxy/<key>/gemini``; each route forwards to the same path under the key's upstream for that
format (``ProxyKey.openai_upstream`` is an OpenAI base URL such as ``https://api.openai.com/v1``,
``anthropic_upstream`` and ``gemini_upstream`` are the hosts' roots, as those SDKs take them).
The host's own credentials go to the upstream as sent and are never stored: their values are
handed to the recorder as secrets to mask wherever they appear. The exchange is recorded in a
thread once the answer has passed (``forward.relay``); the host never waits on the record.
docs/proxy-llm.md describes the routes.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import parse_qsl

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.db import connections
from django.http import HttpRequest, HttpResponseBase, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from conversations.loop.wire import WireExchange
from conversations.proxy import forward, keys, recording
from conversations.proxy.models import ProxyKey

logger = logging.getLogger(__name__)

SESSION_HEADER = "X-Inspector-Session"
# Request headers whose values are the host's credentials (beside ``?key=`` in Gemini's URL).
CREDENTIAL_HEADERS = ("authorization", "x-api-key", "x-goog-api-key", "api-key")

# Records are written here, off the event loop, a few at a time: a burst of finished streams
# queues its records rather than opening a database connection each.
RECORDERS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="proxy-record")


@dataclass(frozen=True)
class Format:
    """One wire format the proxy forwards: the recorder's name for it and the key's upstream field."""

    fmt: str
    upstream_field: str
    title: str


OPENAI_CHAT = Format("openai_chat", "openai_upstream", "OpenAI")
OPENAI_RESPONSES = Format("openai_responses", "openai_upstream", "OpenAI")
ANTHROPIC = Format("anthropic", "anthropic_upstream", "Anthropic")
GEMINI = Format("gemini", "gemini_upstream", "Gemini")


def credentials(request: HttpRequest) -> tuple[str, ...]:
    """Every credential the host sent: header values whole and as their bare token, and ``?key=``."""
    found: list[str] = []
    for name in CREDENTIAL_HEADERS:
        value = request.headers.get(name, "")
        if value:
            found.append(value)
            scheme, _, token = value.partition(" ")
            if token and scheme.lower() in {"bearer", "basic", "token"}:
                found.append(token.strip())
    found.extend(
        value for name, value in parse_qsl(request.META.get("QUERY_STRING", "")) if name == "key" and value
    )
    return tuple(dict.fromkeys(found))


def _refusal(status: int, kind: str, message: str) -> JsonResponse:
    return JsonResponse(forward.error_body(kind, message), status=status)


async def _forward(request: HttpRequest, raw_key: str, form: Format, path: str) -> HttpResponseBase:
    if request.method != "POST":
        return _refusal(405, "method_not_allowed", f"the proxy forwards POST only here, not {request.method}")
    key = await sync_to_async(_authenticated, thread_sensitive=False)(raw_key)
    if key is None:
        return _refusal(401, "invalid_proxy_key", "unknown or revoked inspector proxy key")
    base: str = getattr(key, form.upstream_field)
    if not base:
        return _refusal(
            502,
            "no_upstream",
            f"this proxy key has no {form.title} upstream: set its {form.upstream_field.replace('_', ' ')}",
        )
    query = request.META.get("QUERY_STRING", "")
    url = f"{base.rstrip('/')}/{path}" + (f"?{query}" if query else "")
    secrets = (raw_key, *credentials(request))
    session = request.headers.get(SESSION_HEADER) or None

    def on_done(exchange: WireExchange) -> None:
        RECORDERS.submit(_record, key, session, form.fmt, exchange, secrets)

    return await forward.relay(
        request,
        url,
        limit=settings.RESPONSE_BODY_LIMIT,
        read_timeout=settings.MODEL_TIMEOUT_SECONDS,
        on_done=on_done,
    )


def _authenticated(raw_key: str) -> ProxyKey | None:
    # The connection goes back at once: a stream may last minutes, and holding one for each
    # would exhaust the pool at a few dozen concurrent streams.
    try:
        return keys.authenticate(raw_key)
    finally:
        connections.close_all()


def _record(
    key: ProxyKey, session: str | None, fmt: str, exchange: WireExchange, secrets: tuple[str, ...]
) -> None:
    try:
        recording.record_model_call(key, session=session, fmt=fmt, exchange=exchange, secrets=secrets)
    except Exception:  # the host has its answer; the failure is the operator's to see
        logger.exception("a proxied model call could not be recorded (%s)", exchange.label)
    finally:
        connections.close_all()


@login_not_required
@csrf_exempt
async def openai_chat_completions(request: HttpRequest, key: str) -> HttpResponseBase:
    return await _forward(request, key, OPENAI_CHAT, "chat/completions")


@login_not_required
@csrf_exempt
async def openai_responses(request: HttpRequest, key: str) -> HttpResponseBase:
    return await _forward(request, key, OPENAI_RESPONSES, "responses")


@login_not_required
@csrf_exempt
async def anthropic_messages(request: HttpRequest, key: str) -> HttpResponseBase:
    return await _forward(request, key, ANTHROPIC, "v1/messages")


@login_not_required
@csrf_exempt
async def gemini_generate(
    request: HttpRequest, key: str, version: str, model: str, method: str
) -> HttpResponseBase:
    return await _forward(request, key, GEMINI, f"{version}/models/{model}:{method}")
