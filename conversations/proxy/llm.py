"""The LLM recording proxy: a host's model calls pass through to the key's upstream and are recorded.

A host points its SDK's base URL at ``/proxy/<key>/openai/v1``, ``/proxy/<key>/anthropic`` or
``/proxy/<key>/gemini``; each route forwards to the same path under the key's upstream for that
format (``ProxyKey.openai_upstream`` is an OpenAI base URL such as ``https://api.openai.com/v1``,
``anthropic_upstream`` and ``gemini_upstream`` are the hosts' roots, as those SDKs take them).
The host's own credentials go to the upstream as sent and are never stored: their values are
handed to the recorder as secrets to mask wherever they appear. The exchange is recorded in a
thread once the answer has passed (``forward.pass_on``); the host never waits on the record.
The web process serves these routes through ``inspector.proxy_front``, a plain ASGI
application ahead of Django's middleware; the views here serve them wherever Django itself
handles the request (the test client, WSGI). docs/proxy-llm.md describes the routes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.db import close_old_connections, connections
from django.http import HttpRequest, HttpResponseBase, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from conversations.loop.wire import WireExchange
from conversations.proxy import forward, keys, recording
from conversations.proxy.models import ProxyKey
from conversations.proxy.pending import PendingRecords
from conversations.proxy.requests import SESSION_HEADER, credentials, header_lines, session_name

logger = logging.getLogger(__name__)

# Records are written here, off the event loop, a few at a time: a burst of finished streams
# queues its records rather than opening a database connection each. What waits is bounded
# (``pending``: PROXY_RECORD_QUEUE_COUNT, PROXY_RECORD_QUEUE_LIMIT).
RECORDERS = PendingRecords(workers=4, name="proxy-record")
# Called in the recorder thread after each record, stored or not (the web process gives back
# what a big record grew it by: ``inspector.memory.release_if_grown``, hooked in by the UI).
AFTER_RECORD: list[Callable[[], object]] = []


def idle() -> bool:
    """Every finished call of this process is recorded (or stubbed, or counted as dropped)."""
    # In this order: an exchange leaves forward's hand-over only once queued here.
    return forward.settled() and RECORDERS.idle


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


@dataclass(frozen=True)
class Refusal:
    """Why a call is not forwarded: the status and the JSON body the host gets."""

    status: int
    body: dict[str, dict[str, str]]


def refusal(status: int, kind: str, message: str) -> Refusal:
    return Refusal(status, forward.error_body(kind, message))


NOT_POST = "the proxy forwards POST only here, not {method}"
BAD_KEY = refusal(401, "invalid_proxy_key", "unknown or revoked inspector proxy key")


async def key_for(raw_key: str) -> ProxyKey | None:
    """The key ``raw_key`` is (None: unknown or revoked): from this process's recent keys while
    fresh (``keys.KEY_CACHE_SECONDS``), else looked up in a thread (``_looked_up``)."""
    key = keys.RECENT.get(raw_key)
    if key is None:
        key = await sync_to_async(_looked_up, thread_sensitive=False)(raw_key)
    return key


def _looked_up(raw_key: str) -> ProxyKey | None:
    """``keys.RECENT.authenticate`` on a thread of the event loop's executor, as Django handles a
    request: a connection the thread kept is dropped first (``close_old_connections``) and every
    one it holds is closed after.

    No request starts or ends on such a thread, so nothing else does it, and the thread also
    renders Django's error pages (``inspector.api_errors``). A connection left open there stayed
    lent from the pool for the thread's life and, after a database restart, failed every later
    look-up with "the connection is closed". Closed, a pooled connection goes back to the pool
    (a broken one is dropped by it) and the look-up borrows one the pool has tested."""
    close_old_connections()
    try:
        return keys.RECENT.authenticate(raw_key)
    finally:
        connections.close_all()


def upstream_url(key: ProxyKey, form: Format, path: str, query: str) -> str | Refusal:
    """Where the call goes: ``path`` under the key's upstream for ``form``, with the host's query."""
    base: str = getattr(key, form.upstream_field)
    if not base:
        return refusal(
            502,
            "no_upstream",
            f"this proxy key has no {form.title} upstream: set its {form.upstream_field.replace('_', ' ')}",
        )
    return f"{base.rstrip('/')}/{path}" + (f"?{query}" if query else "")


def recorder(
    key: ProxyKey, raw_key: str, form: Format, headers: Sequence[tuple[str, str]], query: str
) -> forward.ExchangeDone:
    """What records a finished exchange of ``key``: a recorder thread, handed the host's
    credentials and the proxy key as secrets to mask. ``headers``: the host's header lines."""
    secrets = (raw_key, *credentials(headers, query))
    hint = next((value for name, value in headers if name.lower() == SESSION_HEADER.lower()), "")
    session = session_name(hint)

    def on_done(exchange: WireExchange) -> None:
        RECORDERS.submit(key.pk, exchange, lambda queued: _record(key, session, form.fmt, queued, secrets))

    return on_done


def _refused(refused: Refusal) -> JsonResponse:
    return JsonResponse(refused.body, status=refused.status)


async def _forward(request: HttpRequest, raw_key: str, form: Format, path: str) -> HttpResponseBase:
    if request.method != "POST":
        return _refused(refusal(405, "method_not_allowed", NOT_POST.format(method=request.method)))
    key = await key_for(raw_key)
    if key is None:
        return _refused(BAD_KEY)
    query = request.META.get("QUERY_STRING", "")
    url = upstream_url(key, form, path, query)
    if isinstance(url, Refusal):
        return _refused(url)
    return await forward.relay(
        request,
        url,
        limit=settings.RESPONSE_BODY_LIMIT,
        read_timeout=settings.MODEL_TIMEOUT_SECONDS,
        on_done=recorder(key, raw_key, form, header_lines(request), query),
    )


def _record(
    key: ProxyKey, session: str | None, fmt: str, exchange: WireExchange, secrets: tuple[str, ...]
) -> None:
    try:
        recording.record_model_call(key, session=session, fmt=fmt, exchange=exchange, secrets=secrets)
    except Exception:  # the host has its answer; the failure is the operator's to see
        logger.exception("a proxied model call could not be recorded (%s)", exchange.label)
    finally:
        connections.close_all()
        for hook in AFTER_RECORD:
            try:
                hook()
            except Exception:
                logger.exception("a hook after a proxied model call's record failed")


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
