"""The demo model over HTTP, in each provider's wire format.

* OpenAI Chat Completions and Responses under ``/demo-model/v1`` (``chat/completions``,
  ``responses``), keyed by ``Authorization: Bearer``;
* Anthropic Messages at ``/demo-model/v1/messages`` (base URL ``/demo-model``), keyed by
  ``x-api-key`` and requiring ``anthropic-version``;
* Gemini at ``/demo-model/v1beta/models/<model>:generateContent`` and
  ``:streamGenerateContent?alt=sse`` (base URL ``/demo-model``), keyed by ``x-goog-api-key``
  (or ``?key=``).

Keyed by ``settings.DEMO_MODEL_API_KEY`` instead of a login, so the app's own clients reach it
exactly as they would reach a real provider. Each request is converted to the demo's Chat
Completions form, answered by :func:`conversations.demo.model.complete` and converted back by
the route's :class:`~conversations.demo.base.Dialect`; errors use each format's own envelope, and
``stream: true`` (or Gemini's stream route) answers with the format's event stream.
"""

import hmac
import json
import re
import time
from collections.abc import Iterator

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from conversations.demo.anthropic import ANTHROPIC, anthropic_error
from conversations.demo.base import Dialect, FormatError
from conversations.demo.gemini import GEMINI, gemini_error
from conversations.demo.model import complete, openai_error_body, simulated_delay, stream_delay
from conversations.demo.openai_chat import CHAT
from conversations.demo.openai_responses import RESPONSES
from conversations.loop.providers.http import call_abandoned
from conversations.typealias import JSONDict, JSONValue

# Splits after each event's blank line, keeping it with the event.
_EVENT_END = re.compile(r"(?<=\n\n)")
# Answered (to nobody) when the caller abandoned the call while the demo model "thought".
ABANDONED = "The caller abandoned this call before the demo model answered."

MODEL_LIST: JSONDict = {
    "object": "list",
    "data": [{"id": "demo", "object": "model", "created": 0, "owned_by": "tool-call-inspector (demo)"}],
}


@login_not_required
@csrf_exempt
@require_POST
def chat_completions(request: HttpRequest) -> HttpResponseBase:
    """``POST chat/completions``: one Chat Completions request answered by the demo model."""
    if not _has_valid_bearer_key(request):
        return _unauthorized(request)
    return _answer(request, CHAT)


@login_not_required
@csrf_exempt
@require_POST
def responses(request: HttpRequest) -> HttpResponseBase:
    """``POST responses``: one OpenAI Responses request answered by the demo model."""
    if not _has_valid_bearer_key(request):
        return _unauthorized(request)
    return _answer(request, RESPONSES)


@login_not_required
@csrf_exempt
@require_POST
def messages(request: HttpRequest) -> HttpResponseBase:
    """``POST messages``: one Anthropic Messages request answered by the demo model."""
    key = request.headers.get("x-api-key")
    if not key:
        return _anthropic_refusal(401, "x-api-key header is required")
    if not _is_demo_key(key):
        return _anthropic_refusal(401, "invalid x-api-key")
    if not request.headers.get("anthropic-version"):
        return _anthropic_refusal(400, "anthropic-version: header is required")
    return _answer(request, ANTHROPIC)


@login_not_required
@csrf_exempt
@require_POST
def generate_content(request: HttpRequest, model: str) -> HttpResponseBase:
    """``POST v1beta/models/<model>:generateContent``: one Gemini request answered by the demo model."""
    refusal = _gemini_key_refusal(request)
    if refusal is not None:
        return refusal
    return _answer(request, GEMINI, model=model, stream=False)


@login_not_required
@csrf_exempt
@require_POST
def stream_generate_content(request: HttpRequest, model: str) -> HttpResponseBase:
    """``POST v1beta/models/<model>:streamGenerateContent?alt=sse``: the same, as an event stream."""
    refusal = _gemini_key_refusal(request)
    if refusal is not None:
        return refusal
    if request.GET.get("alt") != "sse":
        message = "The demo model streams only as server-sent events: add ?alt=sse to the URL."
        return JsonResponse(gemini_error(400, message), status=400)
    return _answer(request, GEMINI, model=model, stream=True)


@login_not_required
@csrf_exempt
@require_GET
def models(request: HttpRequest) -> JsonResponse:
    """``GET models``: the one model this endpoint serves."""
    if not _has_valid_bearer_key(request):
        return _unauthorized(request)
    return JsonResponse(MODEL_LIST)


def _answer(
    request: HttpRequest, dialect: Dialect, *, model: str | None = None, stream: bool | None = None
) -> HttpResponseBase:
    """Convert, let the demo model answer, convert back; ``stream`` None: as the body asks."""
    try:
        body = _request_body(request)
    except _TooLarge as error:
        return JsonResponse(dialect.error(413, str(error)), status=413)
    try:
        payload = _json_object(body)
        del body  # the parsed payload is all that is needed from here on
        chat = dialect.to_chat(payload, model)
    except (ValueError, FormatError) as error:
        return JsonResponse(dialect.error(400, str(error)), status=400)
    if not _simulate_latency(chat):
        return JsonResponse(dialect.error(499, ABANDONED), status=499)
    reply = complete(chat)
    if reply.status != 200:
        return JsonResponse(dialect.error_from_chat(reply.status, reply.body), status=reply.status)
    if (payload.get("stream") is True) if stream is None else stream:
        events = dialect.events(reply.body, payload)
        delay = _stream_delay(chat)
        response: HttpResponse | StreamingHttpResponse
        if delay > 0:
            response = StreamingHttpResponse(_dripped(events, delay), content_type="text/event-stream")
        else:
            # Written whole: the demo has nothing to generate token by token; clients read it as a stream.
            response = HttpResponse(events, content_type="text/event-stream")
        response["Cache-Control"] = "no-cache"
        return response
    return JsonResponse(dialect.from_chat(reply.body, payload))


def _stream_delay(payload: JSONDict) -> float:
    """Seconds between streamed events: ``DEMO_MODEL_STREAM_DELAY_SECONDS`` or a ``[demo:drip=N]`` marker."""
    return max(0.0, float(settings.DEMO_MODEL_STREAM_DELAY_SECONDS), stream_delay(payload))


def _dripped(events: str, delay: float) -> Iterator[bytes]:
    """The event stream one event at a time, ``delay`` seconds apart, as a slow model sends it."""
    for index, event in enumerate(_EVENT_END.split(events)):
        if not event:
            continue
        if index and not _pause(delay):
            return  # the caller stopped reading
        yield event.encode()


def _is_demo_key(key: str) -> bool:
    return hmac.compare_digest(key.strip().encode(), settings.DEMO_MODEL_API_KEY.encode())


def _has_valid_bearer_key(request: HttpRequest) -> bool:
    scheme, _, key = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        return False
    return _is_demo_key(key)


def _unauthorized(request: HttpRequest) -> JsonResponse:
    # The key is never echoed back, not even masked: this body lands in recorded exchanges.
    if "Authorization" in request.headers:
        message = "Incorrect API key provided for the demo model. Use the key in DEMO_MODEL_API_KEY."
    else:
        message = (
            "You didn't provide an API key. You need to provide your API key in an Authorization "
            "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
        )
    response = JsonResponse(openai_error_body(message, code="invalid_api_key"), status=401)
    response["WWW-Authenticate"] = 'Bearer realm="demo-model"'
    return response


def _anthropic_refusal(status: int, message: str) -> JsonResponse:
    return JsonResponse(anthropic_error(status, message), status=status)


def _gemini_key_refusal(request: HttpRequest) -> JsonResponse | None:
    """Gemini's answer to a missing or wrong key (its own wording and statuses), else None."""
    key = request.headers.get("x-goog-api-key") or request.GET.get("key", "")
    if not key:
        message = (
            "Method doesn't allow unregistered callers (callers without established identity). "
            "Please use API Key or other form of API consumer identity to call this API."
        )
        return JsonResponse(gemini_error(403, message), status=403)
    if not _is_demo_key(key):
        return JsonResponse(gemini_error(400, "API key not valid. Please pass a valid API key."), status=400)
    return None


class _TooLarge(Exception):
    """The request body is larger than the demo model reads; the message is for the client."""


def _request_body(request: HttpRequest) -> bytes:
    """The whole request body, up to ``DEMO_MODEL_MAX_REQUEST_BYTES``.

    Read from the stream rather than ``request.body``, which refuses anything over Django's
    ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (2.5 MB, meant for form posts) with a bare 400: a model
    request carries whole tool results, and real providers take far more.

    Raises:
        _TooLarge: the body (declared or read) is over the limit.
    """
    limit = settings.DEMO_MODEL_MAX_REQUEST_BYTES
    declared = int(request.META.get("CONTENT_LENGTH") or 0)
    if declared > limit:
        raise _TooLarge(_too_large_message(declared, limit))
    body = request.read(limit + 1)
    if len(body) > limit:
        raise _TooLarge(_too_large_message(len(body), limit))
    return body


def _too_large_message(size: int, limit: int) -> str:
    return (
        f"The request body is {size:,} bytes; the demo model reads at most {limit:,} "
        "(DEMO_MODEL_MAX_REQUEST_BYTES)."
    )


def _json_object(body: bytes) -> JSONDict:
    """The request body as a JSON object.

    Raises:
        ValueError: the body is not JSON, or not a JSON object; the message is for the client.
    """
    try:
        payload: JSONValue = json.loads(body)
    except ValueError as error:
        raise ValueError(
            "We could not parse the JSON body of your request. The demo model expects a JSON "
            f"payload, but what was sent was not valid JSON ({error})."
        ) from error
    if not isinstance(payload, dict):
        raise ValueError("The request body must be a JSON object.")
    return payload


def _simulate_latency(payload: JSONDict) -> bool:
    """Sleep as long as ``DEMO_MODEL_LATENCY_SECONDS`` plus any ``[demo:slow=N]`` marker ask;
    False if the caller abandoned the call meanwhile (``_pause``)."""
    delay = max(0.0, float(settings.DEMO_MODEL_LATENCY_SECONDS)) + simulated_delay(payload)
    return _pause(delay) if delay > 0 else True


def _pause(seconds: float) -> bool:
    """Wait ``seconds``, as a slow model would; False as soon as the caller abandons the call.

    Served in process (a turn's call through the app itself) the view runs on the caller's
    thread, in its context, so it sees ``call_abandoned``: a cancelled turn's call ends at once,
    as a real endpoint's would when its connection is shut down. Served over HTTP it just waits.
    """
    abandoned = call_abandoned.get()
    if abandoned is None:
        time.sleep(seconds)
        return True
    return not abandoned.wait(seconds)
