"""The LLM proxy's routes with the official SDKs as the host's client (``conversations.proxy.llm``):
to an upstream fake of our own that holds its stream back (a chunk reaches the host before the
stream has ended) and to the app's own demo model; every call is recorded, byte-exact, and no
credential of the host's is stored."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.db import DatabaseError
from google import genai
from google.genai import types as genai_types

from conversations.models import Exchange
from conversations.proxy import recording
from conversations.proxy.keys import create_key, revoke
from conversations.proxy.models import ProxyKey, ProxySession
from tests.conversations.proxy.llm_fakes import FakeUpstream, database_text
from tests.support import free_port, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

HOST_KEY = "sk-host-own-credential-5d1e9b7a"
FORMATS = ("openai_chat", "openai_responses", "anthropic", "gemini")


def _key(user: User, base: str, *, openai_path: str = "/v1") -> tuple[ProxyKey, str]:
    return create_key(
        user,
        name="laptop",
        openai_upstream=f"{base}{openai_path}",
        anthropic_upstream=base,
        gemini_upstream=base,
    )


def _recorded(key: ProxyKey, hint: str, count: int = 1) -> list[Exchange]:
    def found() -> list[Exchange]:
        return list(
            Exchange.objects.filter(
                conversation__proxy_session__key=key, conversation__proxy_session__hint=hint
            )
            .filter(channel="llm")
            .order_by("pk")
        )

    assert wait_until(lambda: len(found()) >= count, 30), "the model call was not recorded"
    return found()


# One host per format: ``call(proxy_base, api_key, hint, stream)`` returns the reply's text as
# the SDK read it, in pieces; with ``on_first`` it is called after the first text piece arrived.
Host = Callable[[str, str, str, bool, Callable[[], None]], list[str]]


def _openai_chat(base: str, api_key: str, hint: str, stream: bool, on_first: Callable[[], None]) -> list[str]:
    client = openai.OpenAI(
        base_url=f"{base}/openai/v1",
        api_key=api_key,
        max_retries=0,
        default_headers={"X-Inspector-Session": hint},
    )
    messages: list[Any] = [{"role": "user", "content": "Say hello"}]
    if not stream:
        return [
            client.chat.completions.create(model="fake", messages=messages).choices[0].message.content or ""
        ]
    pieces: list[str] = []
    for chunk in client.chat.completions.create(model="fake", messages=messages, stream=True):
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)
            if len(pieces) == 1:
                on_first()
    return pieces


def _openai_responses(
    base: str, api_key: str, hint: str, stream: bool, on_first: Callable[[], None]
) -> list[str]:
    client = openai.OpenAI(
        base_url=f"{base}/openai/v1",
        api_key=api_key,
        max_retries=0,
        default_headers={"X-Inspector-Session": hint},
    )
    if not stream:
        return [client.responses.create(model="fake", input="Say hello").output_text]
    pieces: list[str] = []
    for event in client.responses.create(model="fake", input="Say hello", stream=True):
        if event.type == "response.output_text.delta":
            pieces.append(event.delta)
            if len(pieces) == 1:
                on_first()
    return pieces


def _anthropic(base: str, api_key: str, hint: str, stream: bool, on_first: Callable[[], None]) -> list[str]:
    client = anthropic.Anthropic(
        base_url=f"{base}/anthropic",
        api_key=api_key,
        max_retries=0,
        default_headers={"X-Inspector-Session": hint},
    )
    messages: list[Any] = [{"role": "user", "content": "Say hello"}]
    if not stream:
        reply = client.messages.create(model="fake", max_tokens=100, messages=messages)
        return ["".join(block.text for block in reply.content if block.type == "text")]
    pieces: list[str] = []
    for event in client.messages.create(model="fake", max_tokens=100, messages=messages, stream=True):
        if event.type == "content_block_delta" and event.delta.type == "text_delta":
            pieces.append(event.delta.text)
            if len(pieces) == 1:
                on_first()
    return pieces


def _gemini(base: str, api_key: str, hint: str, stream: bool, on_first: Callable[[], None]) -> list[str]:
    client = genai.Client(
        api_key=api_key,
        http_options=genai_types.HttpOptions(
            base_url=f"{base}/gemini", headers={"X-Inspector-Session": hint}
        ),
    )
    if not stream:
        return [client.models.generate_content(model="fake", contents="Say hello").text or ""]
    pieces: list[str] = []
    for chunk in client.models.generate_content_stream(model="fake", contents="Say hello"):
        if chunk.text:
            pieces.append(chunk.text)
            if len(pieces) == 1:
                on_first()
    return pieces


HOSTS: dict[str, Host] = {
    "openai_chat": _openai_chat,
    "openai_responses": _openai_responses,
    "anthropic": _anthropic,
    "gemini": _gemini,
}


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_sdk_stream_arrives_piece_by_piece_through_the_proxy_and_is_recorded_byte_exact(
    fmt: str, app: str, upstream: tuple[FakeUpstream, str], alice: User
) -> None:
    fake, base = upstream
    key, raw = _key(alice, base)
    held: list[bool] = []

    def first_piece_arrived() -> None:
        # The upstream still holds the rest of its stream: this piece was not waiting for it.
        held.append(not fake.gate.is_set())
        fake.release()

    pieces = HOSTS[fmt](f"{app}/proxy/{raw}", HOST_KEY, f"stream-{fmt}", True, first_piece_arrived)

    assert held == [True]
    assert "".join(pieces) == "Hello from the fake"
    [exchange] = _recorded(key, f"stream-{fmt}")
    [received] = fake.received
    assert exchange.request_body.encode() == received.body
    assert exchange.response_body.encode() == fake.sent[0].body
    assert exchange.status == "200"
    assert exchange.step is not None
    assert (exchange.step.kind, exchange.step.text) == ("decide", "Hello from the fake"), exchange.step.error


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_sdk_call_without_streaming_goes_through_and_is_recorded(
    fmt: str, app: str, upstream: tuple[FakeUpstream, str], alice: User
) -> None:
    fake, base = upstream
    key, raw = _key(alice, base)

    pieces = HOSTS[fmt](f"{app}/proxy/{raw}", HOST_KEY, f"whole-{fmt}", False, lambda: None)

    assert pieces == ["Hello from the fake"]
    [exchange] = _recorded(key, f"whole-{fmt}")
    assert exchange.response_body.encode() == fake.sent[0].body
    assert exchange.request_body.encode() == fake.received[0].body


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_the_sdks_reach_the_demo_model_through_the_proxy_and_no_credential_is_stored(
    fmt: str, stream: bool, app: str, alice: User
) -> None:
    key, raw = _key(alice, f"{app}/demo-model")

    pieces = HOSTS[fmt](
        f"{app}/proxy/{raw}", settings.DEMO_MODEL_API_KEY, f"demo-{fmt}", stream, lambda: None
    )

    assert "".join(pieces).strip()
    [exchange] = _recorded(key, f"demo-{fmt}")
    assert exchange.status == "200"
    stored = database_text()
    assert settings.DEMO_MODEL_API_KEY not in stored
    assert raw not in stored


def test_the_hosts_credentials_reach_the_upstream_and_are_stored_nowhere(
    app: str, upstream: tuple[FakeUpstream, str], alice: User
) -> None:
    fake, base = upstream
    key, raw = _key(alice, base)
    query_key = "AIza-host-query-key-40c2"
    header_key = "AIza-host-header-key-91fe"

    response = httpx2.post(
        f"{app}/proxy/{raw}/gemini/v1beta/models/fake:generateContent?key={query_key}",
        content=b'{"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}',
        headers={
            "x-goog-api-key": header_key,
            "authorization": f"Bearer {HOST_KEY}",
            "x-inspector-session": "creds",
        },
        timeout=30,
    )

    assert response.status_code == 200
    [received] = fake.received
    assert received.query == f"key={query_key}".encode()
    assert received.header("x-goog-api-key") == header_key
    assert received.header("authorization") == f"Bearer {HOST_KEY}"
    _recorded(key, "creds")
    stored = database_text()
    for secret in (query_key, header_key, HOST_KEY, raw):
        assert secret not in stored, secret


@pytest.mark.parametrize("revoked", [False, True], ids=["unknown", "revoked"])
def test_an_unknown_or_revoked_key_gets_401_with_a_json_body(
    revoked: bool, app: str, upstream: tuple[FakeUpstream, str], alice: User
) -> None:
    fake, base = upstream
    key, raw = _key(alice, base)
    if revoked:
        revoke(key)
    else:
        raw = raw[:-4] + "xxxx"

    response = httpx2.post(f"{app}/proxy/{raw}/openai/v1/chat/completions", content=b"{}", timeout=30)

    assert response.status_code == 401
    assert response.json()["error"]["type"] == "invalid_proxy_key"
    assert fake.received == []


def test_a_key_without_an_upstream_for_the_format_gets_502_naming_the_field(app: str, alice: User) -> None:
    _, raw = create_key(alice, openai_upstream="http://127.0.0.1:9/v1")

    response = httpx2.post(f"{app}/proxy/{raw}/anthropic/v1/messages", content=b"{}", timeout=30)

    assert response.status_code == 502
    assert "anthropic upstream" in response.json()["error"]["message"]


def test_an_upstream_that_is_down_gets_a_502_and_a_recorded_failed_call(app: str, alice: User) -> None:
    key, raw = _key(alice, f"http://127.0.0.1:{free_port()}")
    client = openai.OpenAI(
        base_url=f"{app}/proxy/{raw}/openai/v1",
        api_key=HOST_KEY,
        max_retries=0,
        default_headers={"X-Inspector-Session": "down"},
    )

    with pytest.raises(openai.APIStatusError) as raised:
        client.chat.completions.create(model="fake", messages=[{"role": "user", "content": "hi"}])

    assert raised.value.status_code == 502
    assert "could not reach the upstream" in raised.value.message
    [exchange] = _recorded(key, "down")
    assert exchange.status == "error"
    assert "ConnectError" in exchange.error
    assert exchange.step is not None and exchange.step.kind == "error"


def test_a_malformed_request_is_forwarded_as_it_is_and_the_upstreams_error_recorded(
    app: str, upstream: tuple[FakeUpstream, str], alice: User
) -> None:
    fake, base = upstream
    key, raw = _key(alice, base)

    response = httpx2.post(
        f"{app}/proxy/{raw}/openai/v1/chat/completions",
        content=b'{"model": "fake", "messages": [',
        headers={"x-inspector-session": "malformed"},
        timeout=30,
    )

    assert response.status_code == 400
    assert fake.received[0].body == b'{"model": "fake", "messages": ['
    [exchange] = _recorded(key, "malformed")
    assert exchange.status == "400"
    assert exchange.request_body == '{"model": "fake", "messages": ['
    assert "could not parse the JSON body" in exchange.response_body


def test_a_host_that_goes_away_mid_stream_leaves_a_record_of_what_passed(
    app: str, upstream: tuple[FakeUpstream, str], alice: User
) -> None:
    fake, base = upstream
    key, raw = _key(alice, base)
    with (
        httpx2.Client(timeout=30) as host,
        host.stream(
            "POST",
            f"{app}/proxy/{raw}/anthropic/v1/messages",
            content=b'{"model": "fake", "max_tokens": 9, "stream": true, "messages": [{"role": "user", "content": "hi"}]}',
            headers={"x-inspector-session": "gone"},
        ) as response,
    ):
        first = next(response.iter_raw())
    # The host has hung up; the upstream still holds the rest of its stream.

    [exchange] = _recorded(key, "gone")
    assert exchange.response_body.encode().startswith(first)
    assert b"".join(fake.sent[0].chunks[:3]).startswith(exchange.response_body.encode())
    assert "the host went away mid-body" in exchange.error


def test_a_record_that_fails_leaves_the_hosts_answer_whole(
    app: str, upstream: tuple[FakeUpstream, str], alice: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake, base = upstream
    _, raw = _key(alice, base)
    failures: list[str] = []

    def database_gone(*args: Any, **kwargs: Any) -> int:
        failures.append(kwargs["fmt"])
        raise DatabaseError("the database went away")

    monkeypatch.setattr(recording, "record_model_call", database_gone)
    fake.release()

    pieces = _openai_chat(f"{app}/proxy/{raw}", HOST_KEY, "failing", True, lambda: None)

    assert "".join(pieces) == "Hello from the fake"
    assert wait_until(lambda: failures == ["openai_chat"], 30)
    assert not ProxySession.objects.filter(hint="failing").exists()
