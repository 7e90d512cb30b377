"""Neither the caller's proxy key nor their credentials reach storage: the one redactor with the
values the route passes, and every credential-named header masked."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from conversations.proxy.keys import create_key
from conversations.proxy.recording import record_mcp, record_model_call
from tests.conversations.proxy.wire import chat_call, mcp_pair

pytestmark = pytest.mark.django_db(transaction=True)

UPSTREAM_KEY = "sk-upstream-" + "Q" * 30
GEMINI_KEY = "gemini-query-key-12345"


def _dump() -> str:
    out = StringIO()
    call_command("dumpdata", stdout=out)
    return out.getvalue()


def test_the_proxy_key_and_the_callers_credentials_appear_nowhere_in_the_database() -> None:
    alice = get_user_model().objects.create_user("alice")
    key, raw = create_key(alice, name="laptop")
    exchange = chat_call(
        question=f"my key is {raw}, and {GEMINI_KEY}",
        headers={"authorization": f"Bearer {UPSTREAM_KEY}", "x-custom-credential": GEMINI_KEY},
    )
    exchange.label = f"POST /v1beta/models/m:generateContent?key={GEMINI_KEY}"
    record_model_call(
        key, session="s", fmt="openai_chat", exchange=exchange, secrets=(raw, UPSTREAM_KEY, GEMINI_KEY)
    )
    echo = mcp_pair(
        "tools/call",
        {"name": "echo", "arguments": {"text": raw}},
        {"content": [{"type": "text", "text": raw}]},
    )
    echo.request_headers = {"authorization": f"Bearer {UPSTREAM_KEY}", "cookie": "session=" + raw}
    record_mcp(key, session="s", server_name="echo", records=[echo], secrets=(raw, UPSTREAM_KEY))

    dump = _dump()
    assert json.loads(dump), "the dump holds the records"
    assert "[REDACTED:secret]" in dump
    for secret in (raw, UPSTREAM_KEY, GEMINI_KEY, raw[len(key.prefix) :]):
        assert secret not in dump


def test_a_proxy_key_is_redacted_even_where_no_route_named_it() -> None:
    alice = get_user_model().objects.create_user("alice")
    key, raw = create_key(alice)
    record_model_call(
        key, session="s", fmt="openai_chat", exchange=chat_call(question=f"see /proxy/{raw}/mcp/time")
    )

    dump = _dump()
    assert raw not in dump and "[REDACTED:proxy_key]" in dump
