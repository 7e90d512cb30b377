"""The per-endpoint client caches: keyed without the API key, bounded, closing what they drop
once its last call has finished."""

from __future__ import annotations

import uuid

import httpx2

from conversations.loop.llm import Message
from conversations.loop.providers import http
from conversations.loop.providers.base import Endpoint, ModelRequest
from conversations.loop.providers.clients import EndpointCache
from conversations.loop.providers.openai_chat import OpenAIChatProvider

API_KEY = "sk-cache-7c1e-never-keep-me"


def endpoint(api_key: str = API_KEY, model: str = "m") -> Endpoint:
    return Endpoint(model=model, base_url=f"http://model-{uuid.uuid4().hex}.test/v1", api_key=api_key)


class Client:
    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_the_cache_keys_hold_no_api_key_and_equal_keys_share_a_client() -> None:
    cache: EndpointCache[Client] = EndpointCache(close=Client.close)
    first = endpoint()
    same = Endpoint(model=first.model, base_url=first.base_url, api_key=API_KEY)
    other_key = Endpoint(model=first.model, base_url=first.base_url, api_key="sk-another-one")

    with cache.lease(first, Client) as a, cache.lease(same, Client) as b, cache.lease(other_key, Client) as c:
        assert a is b
        assert c is not a
        assert a.endpoint.api_key == API_KEY  # the client itself is built with the real key

    assert len(cache) == 2
    assert API_KEY not in repr(cache.keys())
    assert "sk-another-one" not in repr(cache.keys())


def test_the_cache_keeps_at_most_its_size_and_closes_the_least_recently_used() -> None:
    cache: EndpointCache[Client] = EndpointCache(size=2, close=Client.close)
    old, used, new = endpoint(), endpoint(), endpoint()
    with cache.lease(old, Client) as dropped:
        pass
    with cache.lease(used, Client) as kept:
        pass
    with cache.lease(old, Client):
        pass  # old is now the most recently used...
    with cache.lease(used, Client):
        pass  # ...and used again after it

    with cache.lease(new, Client):
        pass

    assert len(cache) == 2
    assert dropped.closed is True
    assert old not in cache
    assert kept.closed is False and used in cache and new in cache


def test_a_client_dropped_while_in_use_is_closed_when_its_last_call_ends() -> None:
    cache: EndpointCache[Client] = EndpointCache(size=1, close=Client.close)
    busy = endpoint()

    with cache.lease(busy, Client) as client:
        with cache.lease(endpoint(), Client):
            pass
        assert busy not in cache
        assert client.closed is False  # the call still uses it

    assert client.closed is True


def test_a_dropped_client_asked_for_again_is_built_anew() -> None:
    cache: EndpointCache[Client] = EndpointCache(size=1, close=Client.close)
    first = endpoint()
    with cache.lease(first, Client) as original:
        pass
    with cache.lease(endpoint(), Client):
        pass

    with cache.lease(first, Client) as again:
        assert again is not original and again.closed is False


def test_the_provider_caches_keep_no_api_key_after_a_call() -> None:
    target = endpoint()
    reply_body = {
        "id": "c1",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
    }
    http.endpoint_transport.set(
        target, httpx2.MockTransport(lambda request: httpx2.Response(200, json=reply_body))
    )

    reply = OpenAIChatProvider(target).complete(
        ModelRequest(messages=[Message(role="user", content="hello")])
    )
    http.post_json(
        target, f"{target.base_url}/chat/completions", {"model": "m"}, {"authorization": "Bearer x"}
    )

    assert reply.text == "hi"
    assert target in http._clients
    for cache in (http._clients, http.endpoint_transport._transports):
        assert API_KEY not in repr(cache.keys())
