"""The demo model over HTTP, at an OpenAI-compatible base URL (``/demo-model/v1``).

Keyed by ``settings.DEMO_MODEL_API_KEY`` instead of a login, so the app's own OpenAI client
reaches it exactly as it would reach a real provider. Errors use OpenAI's envelope, so the
client raises its usual exceptions (``AuthenticationError``, ``BadRequestError``, ...).
"""

import hmac
import json
import time

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from conversations import demo_model
from inspector.typealias import JSONDict, JSONValue

MODEL_LIST: JSONDict = {
    "object": "list",
    "data": [{"id": "demo", "object": "model", "created": 0, "owned_by": "tool-call-inspector (demo)"}],
}


@login_not_required
@csrf_exempt
@require_POST
def chat_completions(request: HttpRequest) -> JsonResponse:
    """``POST chat/completions``: one Chat Completions request answered by the demo model."""
    if not _has_valid_key(request):
        return _unauthorized(request)
    try:
        payload = _json_object(request.body)
    except ValueError as error:
        return JsonResponse(demo_model.openai_error_body(str(error)), status=400)
    _simulate_latency(payload)
    reply = demo_model.complete(payload)
    return JsonResponse(reply.body, status=reply.status)


@login_not_required
@csrf_exempt
@require_GET
def models(request: HttpRequest) -> JsonResponse:
    """``GET models``: the one model this endpoint serves."""
    if not _has_valid_key(request):
        return _unauthorized(request)
    return JsonResponse(MODEL_LIST)


def _has_valid_key(request: HttpRequest) -> bool:
    scheme, _, key = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        return False
    return hmac.compare_digest(key.strip().encode(), settings.DEMO_MODEL_API_KEY.encode())


def _unauthorized(request: HttpRequest) -> JsonResponse:
    # The key is never echoed back, not even masked: this body lands in recorded exchanges.
    if "Authorization" in request.headers:
        message = "Incorrect API key provided for the demo model. Use the key in DEMO_MODEL_API_KEY."
    else:
        message = (
            "You didn't provide an API key. You need to provide your API key in an Authorization "
            "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
        )
    response = JsonResponse(demo_model.openai_error_body(message, code="invalid_api_key"), status=401)
    response["WWW-Authenticate"] = 'Bearer realm="demo-model"'
    return response


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


def _simulate_latency(payload: JSONDict) -> None:
    """Sleep as long as ``DEMO_MODEL_LATENCY_SECONDS`` plus any ``[demo:slow=N]`` marker ask."""
    delay = max(0.0, float(settings.DEMO_MODEL_LATENCY_SECONDS)) + demo_model.simulated_delay(payload)
    if delay > 0:
        time.sleep(delay)
