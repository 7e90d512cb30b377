"""Big payloads: a 10 MB tool result goes through every paradigm with the demo model and is
stored whole; the demo model reads request bodies far past Django's form-post limit and
refuses a body past its own with a 413 that says why."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from pytest_django.fixtures import Settings

from conversations.loop.paradigms import PARADIGMS
from conversations.models import Exchange, Turn
from conversations.runner import turn_run
from conversations.services import conversation_start, demo_profile_ensure
from servers import gateway
from servers.models import McpServer
from tests.fixtures.broken_server import BLOB_UNIT

REPO_ROOT = Path(__file__).resolve().parents[2]
KEY = "demo-test-key"
COMPLETIONS = "/demo-model/v1/chat/completions"
MEGABYTES = 10
SIZE = MEGABYTES * 1_000_000


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


def _post(client: Client, body: str) -> tuple[int, dict[str, object]]:
    response = client.post(
        COMPLETIONS, data=body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {KEY}"
    )
    return response.status_code, json.loads(response.content)


def _discarded_by_the_pool() -> int:
    return int(connection.pool.get_stats().get("returns_bad", 0))  # type: ignore[attr-defined]


def _request_with_text(size: int) -> str:
    return json.dumps({"model": "demo", "messages": [{"role": "user", "content": "x" * size}]})


def test_the_demo_model_reads_a_request_far_past_djangos_form_limit(
    settings: Settings, client: Client
) -> None:
    settings.DEMO_MODEL_API_KEY = KEY
    body = _request_with_text(3 * settings.DATA_UPLOAD_MAX_MEMORY_SIZE)

    status, reply = _post(client, body)

    assert status == 200, reply
    assert reply["object"] == "chat.completion"


def test_a_request_past_the_demo_models_own_limit_gets_a_413_that_says_why(
    settings: Settings, client: Client
) -> None:
    settings.DEMO_MODEL_API_KEY = KEY
    settings.DEMO_MODEL_MAX_REQUEST_BYTES = 1000

    status, reply = _post(client, _request_with_text(2000))

    assert status == 413
    message = str(reply["error"]["message"])  # type: ignore[index]
    assert "DEMO_MODEL_MAX_REQUEST_BYTES" in message and "1,000" in message


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("paradigm", sorted(PARADIGMS))
def test_a_ten_megabyte_tool_result_goes_through_the_paradigm_and_is_stored_whole(
    paradigm: str, caplog: pytest.LogCaptureFixture
) -> None:
    alice = User.objects.create_user("alice")
    server = McpServer.objects.create(
        name="broken",
        transport="stdio",
        command=sys.executable,
        args=["-m", "tests.fixtures.broken_server"],
        cwd=str(REPO_ROOT),
        call_timeout=60,
        allow_non_staff_spawn=True,
    )
    _, turn = conversation_start(
        owner=alice,
        model_profile=demo_profile_ensure(),
        question=f"Give me a blob of {MEGABYTES} megabytes",
        servers=[server],
        paradigm=paradigm,
        dispatch=False,
    )

    pooled = connection.vendor == "postgresql"
    discarded_before = _discarded_by_the_pool() if pooled else 0

    turn_run(turn_id=turn.pk)

    turn.refresh_from_db()
    assert turn.status == Turn.Status.DONE, turn.error
    if pooled:
        # Neither the writer's connection nor the runner's goes back to the pool: each would
        # keep buffers the size of the result for as long as it lives (``conversations.record.connections``).
        assert _discarded_by_the_pool() >= discarded_before + 2
        assert "discarding closed connection" not in caplog.text
    call = Exchange.objects.get(turn=turn, label="tools/call")
    result = json.loads(call.response_body)["result"]
    [text] = [block["text"] for block in result["content"] if block["type"] == "text"]
    assert len(text) == SIZE
    assert text.startswith(BLOB_UNIT) and "[cut" not in call.response_body[-200:]
    # The model read the whole result: the request after the call carries it, stored whole.
    requests = Exchange.objects.filter(turn=turn, channel="llm").order_by("seq")
    carrying = [exchange for exchange in requests if len(exchange.request_body) > SIZE]
    assert carrying, "no model request carries the whole tool result"
    assert all("[cut" not in exchange.request_body[-200:] for exchange in carrying)
