"""Every error of the JSON API is JSON: ``{"detail": ..., "field"?: ...}``, never one of Django's
HTML pages, so a script can read why its call failed.

Two seams, both documented ones. DRF's ``EXCEPTION_HANDLER`` (``api_exception_handler``) answers
what goes wrong inside an API view: DRF's own errors as DRF words them (a validation error keyed
by field, a parse error of a malformed body, a wrong method), a body over
``DATA_UPLOAD_MAX_MEMORY_SIZE`` as 413 naming the field ``body``, any other request Django
refuses as 400, and an unexpected exception as a 500 that names no internals. Django's error
handlers (``handler400``, ``handler403``, ``handler404``, ``handler500`` in ``inspector.urls``)
answer what happens before or outside a view — no URL matched, a middleware failed — with the
same shape for any path under ``/api/``, and with the site's own pages elsewhere.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, ParamSpec

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from rest_framework.response import Response
from rest_framework.views import exception_handler

from conversations.record.exchanges import release_connection

logger = logging.getLogger(__name__)

API_PREFIX = "/api/"
STATUS_BAD_REQUEST = 400
STATUS_FORBIDDEN = 403
STATUS_NOT_FOUND = 404
STATUS_TOO_LARGE = 413
STATUS_SERVER_ERROR = 500
SERVER_ERROR_DETAIL = (
    "the server failed to answer this request (an internal error, logged on the server); "
    "nothing was changed by the part that failed"
)


def _too_large_detail() -> str:
    return (
        f"the request body is larger than this server accepts (DATA_UPLOAD_MAX_MEMORY_SIZE, "
        f"{settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes): a suite is at most a million characters; "
        "use `manage.py eval run FILE` for a bigger file"
    )


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's ``EXCEPTION_HANDLER``: DRF's own answer for its exceptions and Django's ``Http404``
    and ``PermissionDenied``; JSON for the rest (413 ``body`` for a body too large, 400 for another
    request Django refuses, 500 for anything unexpected, logged with its traceback)."""
    response = exception_handler(exc, context)
    if response is not None:
        return response
    if isinstance(exc, RequestDataTooBig):
        return Response({"detail": _too_large_detail(), "field": "body"}, status=STATUS_TOO_LARGE)
    if isinstance(exc, SuspiciousOperation):
        return Response({"detail": f"the request was refused: {exc}"}, status=STATUS_BAD_REQUEST)
    logger.exception("API view failed", exc_info=exc)
    return Response({"detail": SERVER_ERROR_DETAIL}, status=STATUS_SERVER_ERROR)


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith(API_PREFIX)


P = ParamSpec("P")


def _connection_handed_back(handler: Callable[P, HttpResponse]) -> Callable[P, HttpResponse]:
    """``handler`` between two hand-backs of the thread's database connection, as Django closes
    one around a request (outside a transaction; ``release_connection``: a pooled one goes back
    to the pool, which drops a broken one).

    Served by daphne, Django renders an error page on a thread of the event loop's executor
    (``convert_exception_to_response``: ``sync_to_async(response_for_exception,
    thread_sensitive=False)``), where no request starts or ends and nothing else closes a
    connection. The page reads the signed-in user and their preferences (the ``teaching``
    context processor): that connection stayed lent from the pool for the thread's life — a
    burst of 404s could lend them all — and after a database restart every later page of that
    thread was a 500."""

    @functools.wraps(handler)
    def page(*args: P.args, **kwargs: P.kwargs) -> HttpResponse:
        release_connection(always=True)
        try:
            return handler(*args, **kwargs)
        finally:
            release_connection(always=True)

    return page


@_connection_handed_back
def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """``handler400``: a request Django refused before any view read it."""
    if not _is_api(request):
        return defaults.bad_request(request, exception)
    if isinstance(exception, RequestDataTooBig):
        return JsonResponse({"detail": _too_large_detail(), "field": "body"}, status=STATUS_TOO_LARGE)
    return JsonResponse({"detail": "the request was refused as malformed"}, status=STATUS_BAD_REQUEST)


@_connection_handed_back
def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    """``handler403``."""
    if not _is_api(request):
        return defaults.permission_denied(request, exception)
    return JsonResponse({"detail": "you may not do this"}, status=STATUS_FORBIDDEN)


@_connection_handed_back
def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """``handler404``: under ``/api/``, the path is no endpoint (the list is in
    ``/api/openapi.json``)."""
    if not _is_api(request):
        return defaults.page_not_found(request, exception)
    return JsonResponse(
        {"detail": f"no API endpoint at {request.path} (see /api/openapi.json)", "field": "path"},
        status=STATUS_NOT_FOUND,
    )


@_connection_handed_back
def server_error(request: HttpRequest) -> HttpResponse:
    """``handler500``: Django has logged the exception already."""
    if not _is_api(request):
        return defaults.server_error(request)
    return JsonResponse({"detail": SERVER_ERROR_DETAIL}, status=STATUS_SERVER_ERROR)
