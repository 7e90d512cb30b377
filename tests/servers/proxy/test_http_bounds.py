"""The HTTP MCP proxy's bounds: a request body larger than Django's upload limit and every record
limit, with an answer larger than the record keeps, passes whole both ways and is recorded cut
and marked; a second user's key cannot reach the first user's session: an answer it sends with
the first user's ids and session headers pairs with nothing of theirs, and their session's page is
a 404 to the second user."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.test import Client

from conversations.proxy.keys import create_key
from conversations.proxy.models import ProxyKey, ProxySession
from inspector.asgi import application
from servers.models import McpServer
from tests.servers.proxy.http_harness import RawUpstream, served
from tests.servers.proxy.support import recorded
from tests.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def app_url() -> Iterator[str]:
    with served(application) as url:
        yield url


def _key(username: str) -> tuple[ProxyKey, str]:
    user = get_user_model().objects.create_user(username, password="pw")
    return create_key(user, name="laptop")


def test_a_body_over_every_limit_passes_whole_both_ways_and_is_recorded_cut_and_marked(
    app_url: str, settings: Any
) -> None:
    settings.EXCHANGE_BODY_LIMIT = 10_000
    settings.RESPONSE_BODY_LIMIT = 10_000
    key, raw = _key("alice")
    size = django_settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 500_000
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"s":"' + b"q" * size + b'"}}'
    fake = RawUpstream()
    fake.content_type = b"application/json"
    fake.parts = [b'{"jsonrpc":"2.0","id":1,"result":{"t":"', b"r" * size, b'"}}']
    with served(fake) as upstream:
        McpServer.objects.create(name="raw", transport="http", url=f"{upstream}/mcp", enabled=True)
        answer = httpx.post(
            f"{app_url}/proxy/{raw}/mcp/raw",
            content=body,
            headers={"Content-Type": "application/json"},
            timeout=60,
        )

    assert answer.status_code == 200
    assert answer.content == b"".join(fake.parts) and fake.received == [body]
    assert wait_until(lambda: bool(recorded(key)), 30)
    (row,) = recorded(key)
    assert len(row.request_body) < 11_000 and len(row.response_body) < 11_000
    assert f"[cut: {len(body):,} bytes in all" in row.request_body
    assert f"{len(b''.join(fake.parts)):,}" in row.response_body and "cut" in row.response_body
    assert "cut" in row.error or "cut" in row.label


def test_a_second_users_key_cannot_reach_the_first_users_session(app_url: str) -> None:
    alice_key, alice_raw = _key("alice")
    bob_key, bob_raw = _key("bob")
    fake = RawUpstream()
    fake.content_type = b"text/event-stream"
    # Alice's server asks her host a question (a server's request, answered by a later POST).
    fake.parts = [b'data: {"jsonrpc":"2.0","id":"srv-1","method":"sampling/createMessage","params":{}}\n\n']
    with served(fake) as upstream:
        McpServer.objects.create(name="shared", transport="http", url=f"{upstream}/mcp", enabled=True)
        same = {
            "Mcp-Session-Id": "upstream-session",
            "X-Inspector-Session": "one",
            "Accept": "text/event-stream",
        }
        asked = httpx.post(
            f"{app_url}/proxy/{alice_raw}/mcp/shared",
            content=b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"}}',
            headers=same,
            timeout=30,
        )
        assert asked.status_code == 200
        assert wait_until(
            lambda: any(row.label == "sampling/createMessage" for row in recorded(alice_key)), 30
        )
        fake.parts = []
        # Bob answers Alice's question with her session's headers: it is his, unpaired.
        bobs = httpx.post(
            f"{app_url}/proxy/{bob_raw}/mcp/shared",
            content=b'{"jsonrpc":"2.0","id":"srv-1","result":{"stolen":true}}',
            headers=same,
            timeout=30,
        )
        assert bobs.status_code == 200
        assert wait_until(lambda: any("srv-1" in row.jsonrpc_id for row in recorded(bob_key)), 30)

    alices, bobs_rows = recorded(alice_key), recorded(bob_key)
    assert not any("stolen" in row.response_body for row in alices)
    (answer,) = [row for row in bobs_rows if "stolen" in row.response_body]
    assert answer.label == "response to unknown id"
    sessions = {
        ProxySession.objects.get(key=alice_key).conversation,
        ProxySession.objects.get(key=bob_key).conversation,
    }
    assert len(sessions) == 2
    alice_conversation = ProxySession.objects.get(key=alice_key).conversation
    as_bob = Client()
    as_bob.force_login(bob_key.user)
    assert as_bob.get(f"/c/{alice_conversation.public_id}/").status_code == 404
    as_alice = Client()
    as_alice.force_login(alice_key.user)
    assert as_alice.get(f"/c/{alice_conversation.public_id}/").status_code == 200


def test_a_legacy_stream_that_never_names_its_endpoint_is_ended_past_a_records_limit(
    app_url: str, settings: Any
) -> None:
    """The start of a legacy SSE stream is held until its endpoint event (to point it back
    through the proxy). A server that sends more than a record keeps and no endpoint event is
    not waited for with the proxy's memory: what it sent reaches the host as it came, the stream
    ends, and the record says why."""
    settings.EXCHANGE_BODY_LIMIT = 10_000
    key, raw = _key("alice")
    fake = RawUpstream()
    fake.parts = [b": padding, no endpoint yet\n\n" * 100 for _ in range(5)]
    fake.hold = True  # and then nothing: the endpoint never comes
    with served(fake) as upstream:
        McpServer.objects.create(name="mute", transport="sse", url=f"{upstream}/sse", enabled=True)
        try:
            answer = httpx.get(f"{app_url}/proxy/{raw}/sse/mute", timeout=20)
        finally:
            fake.release.set()

    sent = b"".join(fake.parts)
    assert answer.status_code == 200
    assert 10_000 < len(answer.content) <= len(sent) and sent.startswith(answer.content)
    assert wait_until(lambda: bool(recorded(key)), 30)
    (row,) = recorded(key)
    assert "before its endpoint event" in row.error and "stopped waiting" in row.error
