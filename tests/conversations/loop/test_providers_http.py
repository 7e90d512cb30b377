"""The shared HTTP seam: reading recorded event streams, error messages, synthesized ids."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from datetime import UTC, datetime
from typing import Any

import httpx2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conversations.loop.providers import http
from conversations.loop.providers.base import ProviderError
from conversations.loop.providers.gemini import GeminiProvider
from conversations.loop.providers.http import (
    SseEvent,
    SynthesizedCallIds,
    call_abandoned,
    error_detail,
    json_object,
    parse_sse,
    read_streamed,
)
from conversations.loop.wire import WireExchange


def test_events_are_split_on_blank_lines_with_their_names() -> None:
    text = 'event: message_start\ndata: {"a":1}\n\nevent: ping\ndata: {}\n\ndata: [DONE]\n\n'

    assert parse_sse(text) == [
        SseEvent("message_start", '{"a":1}'),
        SseEvent("ping", "{}"),
        SseEvent("message", "[DONE]"),
    ]


def test_crlf_comments_multi_line_data_and_a_missing_final_blank_line_are_read() -> None:
    text = ': keep-alive\r\ndata: {"a":\r\ndata: 1}\r\n\r\ndata:no-space'

    assert parse_sse(text) == [SseEvent("message", '{"a":\n1}'), SseEvent("message", "no-space")]


def test_unicode_line_separators_inside_json_do_not_split_an_event() -> None:
    text = 'data: {"text":"one\u2028two\u0085three"}\n\n'

    assert parse_sse(text) == [SseEvent("message", '{"text":"one\u2028two\u0085three"}')]


def test_every_providers_error_envelope_gives_its_message() -> None:
    assert error_detail('{"error":{"message":"bad tool","type":"invalid_request_error"}}', "-") == "bad tool"
    assert (
        error_detail('{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}', "-")
        == "Overloaded"
    )
    assert error_detail(
        '{"error":{"code":400,"message":"API key not valid.","status":"INVALID_ARGUMENT"}}', "-"
    ) == ("API key not valid.")
    assert error_detail('{"error":"model not found"}', "-") == "model not found"
    assert error_detail("Bad Gateway", "HTTP 502") == "HTTP 502"


def _synthesized(seed: str, index: int) -> str:
    return SynthesizedCallIds(seed)(index)


def test_synthesized_ids_are_stable_per_seed_and_position() -> None:
    assert _synthesized("body", 0) == _synthesized("body", 0)
    assert _synthesized("body", 0) != _synthesized("body", 1)
    assert _synthesized("body", 0) != _synthesized("other", 0)
    assert _synthesized("body", 0).startswith("synth_")
    # The derivation stays what stored records were given (docs/wire-formats.md §10.7).
    digest = hashlib.sha256("bodé#12".encode()).hexdigest()[:16]
    assert _synthesized("bodé", 12) == f"synth_{digest}_12"
    ids = SynthesizedCallIds("bodé")
    assert [ids(index) for index in (12, 0, 12)] == [_synthesized("bodé", i) for i in (12, 0, 12)]


def test_a_reply_of_ten_thousand_calls_without_ids_reads_its_body_once_for_their_ids(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each id is derived from the whole reply: hashing it again for each call made a reply of
    # ten thousand id-less calls cost the square of its length (a minute of a worker's CPU).
    parts = [{"functionCall": {"name": "echo", "args": {"n": index}}} for index in range(10_000)]
    body = json.dumps({"candidates": [{"content": {"role": "model", "parts": parts}}]})
    seventh = _synthesized(body, 7)
    hashed = 0
    sha256 = hashlib.sha256

    class Counted:
        """SHA-256, counting the bytes it is given."""

        def __init__(self, data: bytes = b"", inner: Any = None) -> None:
            self.inner = inner if inner is not None else sha256()
            self.update(data)

        def update(self, data: bytes) -> None:
            nonlocal hashed
            hashed += len(data)
            self.inner.update(data)

        def copy(self) -> Counted:
            return Counted(inner=self.inner.copy())

        def hexdigest(self) -> str:
            return str(self.inner.hexdigest())

    monkeypatch.setattr(http.hashlib, "sha256", Counted)
    exchange = WireExchange(channel="llm", label="generateContent", started_at=datetime.now(UTC))

    reply = GeminiProvider.recorded_reply(body, exchange, stream=False)

    assert len({call.id for call in reply.tool_calls}) == 10_000
    assert reply.tool_calls[7].id == seventh
    assert hashed < 2 * len(body.encode()), hashed


# JSON values of every kind, and texts around them: whitespace, extra data, cut, not JSON.
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=12,
)
_TEXTS = st.one_of(
    _JSON.map(json.dumps),
    st.tuples(_JSON.map(json.dumps), st.sampled_from(["", " ", "\n", " x", "}", "{}", "\ufeff"])).map(
        "".join
    ),
    st.tuples(st.sampled_from(["", " ", "\t", "\ufeff"]), _JSON.map(json.dumps)).map("".join),
    _JSON.map(json.dumps).map(lambda text: text[: len(text) // 2]),
    st.text(max_size=20),
)


@given(_TEXTS)
def test_an_events_json_object_is_read_as_json_loads_reads_it(text: str) -> None:
    """Every event of a streamed reply is read by ``json_object`` (its own shortcut for a text
    that is one object and nothing else): for any text it gives what ``json.loads`` gives, or
    fails as it does."""
    try:
        expected: object = json.loads(text)
    except ValueError as exc:
        with pytest.raises(ValueError) as raised:
            json_object(text)
        assert str(raised.value) == str(exc)
        return
    if not isinstance(expected, dict):
        with pytest.raises(ValueError, match="expected a JSON object"):
            json_object(text)
        return
    assert json.dumps(json_object(text)) == json.dumps(expected)


def test_a_json_object_nested_past_the_recursion_limit_fails_as_json_loads_does() -> None:
    text = '{"a":' * 100_000 + "1" + "}" * 100_000

    with pytest.raises(RecursionError):
        json.loads(text)
    with pytest.raises(RecursionError):
        json_object(text)


def test_a_reply_abandoned_while_it_streams_in_is_kept_with_what_had_arrived() -> None:
    # A cancelled turn keeps the abandoned call's record. On a busy machine the turn's cancel is
    # seen here, after a chunk arrived, before the shut connection makes a read fail.
    chunks = [b'data: {"choices":[{"index":0,"delta":{"content":"This re"}}]}\n\n', b"data: more\n\n"]

    def endless(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=iter(chunks))

    abandoned = threading.Event()
    abandoned.set()
    token = call_abandoned.set(abandoned)
    try:
        with httpx2.Client(transport=httpx2.MockTransport(endless)) as client:
            request = client.build_request(
                "POST", "http://model.test/v1/chat/completions", json={"model": "m"}
            )
            response = client.send(request, stream=True)
            with pytest.raises(ProviderError, match="abandoned by its caller") as raised:
                read_streamed(response, None, datetime.now(UTC), time.monotonic(), 30.0)
    finally:
        call_abandoned.reset(token)

    exchange = raised.value.exchange
    assert exchange is not None
    assert json.loads(exchange.request_body) == {"model": "m"}
    assert exchange.response_body == chunks[0].decode()
    assert exchange.status == "error" and "abandoned by its caller" in exchange.error
