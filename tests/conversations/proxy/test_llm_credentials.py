"""Credentials in the forms a host may send them are masked wherever an upstream repeats them:
a Gemini ``?key=`` that is percent-encoded (its raw and its decoded form) and a credential header
sent twice (each value); the repeated header still reaches the upstream as the lines the host sent."""

from __future__ import annotations

import httpx2
import pytest
from django.contrib.auth.models import User

from conversations.models import Exchange
from conversations.proxy.keys import create_key
from tests.conversations.proxy.llm_fakes import FakeUpstream, Reply, database_text
from tests.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def _echoing(fake: FakeUpstream, *values: str) -> None:
    """The fake's next answer repeats ``values`` in its body and in a header of its own."""
    echoed = " ".join(values)
    fake.next_reply = Reply(
        [f'{{"echo": "{echoed}"}}'.encode()],
        headers=[("content-type", "application/json"), ("x-echo", echoed)],
    )


def _stored_once_recorded(hint: str) -> str:
    assert wait_until(lambda: Exchange.objects.filter(conversation__proxy_session__hint=hint).exists(), 30), (
        "the model call was not recorded"
    )
    return database_text()


def test_a_percent_encoded_gemini_query_key_is_masked_in_its_raw_and_decoded_forms(
    app: str, upstream: tuple[FakeUpstream, str], alice: User
) -> None:
    fake, base = upstream
    _key, raw = create_key(alice, name="laptop", gemini_upstream=base)
    encoded, decoded = "AIzaECHO%2B9+9", "AIzaECHO+9 9"
    _echoing(fake, encoded, decoded)

    answer = httpx2.post(
        f"{app}/proxy/{raw}/gemini/v1beta/models/fake:generateContent?key={encoded}",
        content=b'{"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}',
        headers={"x-inspector-session": "query-key"},
        timeout=30,
    )

    assert answer.status_code == 200 and encoded in answer.text
    [received] = fake.received
    assert received.query == f"key={encoded}".encode()
    stored = _stored_once_recorded("query-key")
    for secret in (encoded, decoded, raw):
        assert secret not in stored, secret


def test_every_value_of_a_repeated_credential_header_is_masked_and_both_lines_reach_the_upstream(
    app: str, upstream: tuple[FakeUpstream, str], alice: User
) -> None:
    fake, base = upstream
    _key, raw = create_key(alice, name="laptop", anthropic_upstream=base)
    first, second = "sk-ant-DUPA-1", "sk-ant-DUPB-2"
    _echoing(fake, first, second)

    answer = httpx2.post(
        f"{app}/proxy/{raw}/anthropic/v1/messages",
        content=b'{"model": "fake", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}',
        headers=[
            (b"content-type", b"application/json"),
            (b"x-api-key", first.encode()),
            (b"x-api-key", second.encode()),
            (b"x-inspector-session", b"twice"),
        ],
        timeout=30,
    )

    assert answer.status_code == 200 and first in answer.text
    [received] = fake.received
    assert [value for name, value in received.headers if name.lower() == b"x-api-key"] == [
        first.encode(),
        second.encode(),
    ]
    stored = _stored_once_recorded("twice")
    for secret in (first, second, raw):
        assert secret not in stored, secret
