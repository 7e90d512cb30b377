"""Routes of the demo model, included at ``demo-model/`` (``MOUNT``), and the same routes as a
WSGI application of their own (``application``) for the app's in-process calls to its demo.

``v1/`` is both an OpenAI base URL (``/demo-model/v1``) and Anthropic's ``/v1``; ``v1beta/`` is
Gemini's (base URL ``/demo-model``), and ``v1/`` too: the Google Gen AI SDK's default from 3.0 on.

Over HTTP (a browser, an SDK, the LLM proxy's upstream) a request to ``/demo-model/`` is served by
the site's handler like any other: through the whole middleware chain, host check and HTTPS
redirect included. A turn's call to the demo model is made in process
(``conversations.runner``), from no network and with no host or scheme of its own: the chain was
built for the network's requests, and under the production settings it refused these (a
``DisallowedHost`` 400; with the loopback host allowed, a 301 to https). The demo's views need
nothing of it (keyed by ``DEMO_MODEL_API_KEY``, exempt from CSRF and the login requirement,
no session), so ``application`` resolves the path against these routes alone and calls the view:
no middleware, and no setting loosened for anyone else.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from wsgiref.types import StartResponse, WSGIEnvironment

from django.core.handlers.wsgi import WSGIRequest
from django.http import JsonResponse
from django.http.response import HttpResponseBase
from django.urls import Resolver404, path, re_path, resolve

from conversations.demo import views
from conversations.demo.model import openai_error_body

logger = logging.getLogger(__name__)

# Where the site's URLconf includes these routes, and so the path prefix of every demo base URL.
MOUNT = "demo-model/"

urlpatterns = [
    path("v1/chat/completions", views.chat_completions, name="demo-model-chat-completions"),
    path("v1/responses", views.responses, name="demo-model-responses"),
    path("v1/messages", views.messages, name="demo-model-messages"),
    path("v1/models", views.models, name="demo-model-models"),
    re_path(
        r"^v1beta/models/(?P<model>[^/:]+):generateContent$",
        views.generate_content,
        name="demo-model-gemini-generate",
    ),
    re_path(
        r"^v1beta/models/(?P<model>[^/:]+):streamGenerateContent$",
        views.stream_generate_content,
        name="demo-model-gemini-stream",
    ),
    # Gemini's stable version, which google-genai calls by default; the same routes.
    re_path(
        r"^v1/models/(?P<model>[^/:]+):generateContent$",
        views.generate_content,
        name="demo-model-gemini-generate-v1",
    ),
    re_path(
        r"^v1/models/(?P<model>[^/:]+):streamGenerateContent$",
        views.stream_generate_content,
        name="demo-model-gemini-stream-v1",
    ),
]


def application(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
    """The demo model's routes, under ``/demo-model/``, as a WSGI application: no middleware, no
    other route (anything else is a 404). A view's unexpected exception is logged and answered
    as a model API answers one, a 500 with an error body.

    The response is the WSGI iterable: its ``close()``, called by the server when the body has
    been read, ends the request as Django's own handler does (``request_finished``)."""
    request = WSGIRequest(environ)
    response = _response(request)
    headers = [
        *response.items(),
        *(("Set-Cookie", cookie.output(header="")) for cookie in response.cookies.values()),
    ]
    start_response(f"{response.status_code} {response.reason_phrase}", headers)
    return response


def _response(request: WSGIRequest) -> HttpResponseBase:
    prefix = "/" + MOUNT
    if not request.path_info.startswith(prefix):
        return _not_found(request)
    try:
        match = resolve(request.path_info.removeprefix(prefix[:-1]), urlconf=__name__)
    except Resolver404:
        return _not_found(request)
    try:
        response: HttpResponseBase = match.func(request, *match.args, **match.kwargs)
    except Exception:
        logger.exception("the demo model failed to answer %s %s", request.method, request.path)
        body = openai_error_body("The demo model failed (logged on the server).", error_type="server_error")
        return JsonResponse(body, status=500)
    return response


def _not_found(request: WSGIRequest) -> JsonResponse:
    return JsonResponse(openai_error_body(f"The demo model has no route {request.path_info}."), status=404)
