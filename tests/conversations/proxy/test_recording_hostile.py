"""What an upstream or a host sends cannot lose a proxied model call's record: a reply nested
deeper than Python's parser recurses, and a session name longer than a conversation's title,
are each stored (the exchange whole, the step saying what could not be read)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from django.contrib.auth import get_user_model

from conversations.models import Conversation, Exchange, Step
from conversations.proxy.keys import create_key
from conversations.proxy.models import ProxyKey, ProxySession
from conversations.proxy.recording import record_model_call
from tests.conversations.proxy.wire import chat_call

pytestmark = pytest.mark.django_db(transaction=True)

DEPTH = 5000
DEEP = "[" * DEPTH + "]" * DEPTH
LABELS = {
    "openai_chat": "POST /v1/chat/completions",
    "openai_responses": "POST /v1/responses",
    "anthropic": "POST /v1/messages",
    "gemini": "POST /v1beta/models/gemini-pro:generateContent",
}


def _key() -> ProxyKey:
    return create_key(get_user_model().objects.create_user("alice"), name="laptop")[0]


@pytest.mark.parametrize("fmt", sorted(LABELS))
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_reply_nested_deeper_than_the_parser_recurses_is_stored_whole_and_marked(
    fmt: str, stream: bool
) -> None:
    key = _key()
    body = '{"choices":[{"message":{"content":' + DEEP + "}}]}"
    if stream:
        body = f"data: {body}\n\ndata: [DONE]\n\n"
    headers = {"content-type": "text/event-stream" if stream else "application/json"}
    exchange = replace(chat_call(), label=LABELS[fmt], response_body=body, response_headers=headers)

    record_model_call(key, session="deep", fmt=fmt, exchange=exchange)

    stored = Exchange.objects.get(turn__conversation__proxy_session__key=key)
    assert stored.response_body == body
    step = Step.objects.get(pk=stored.step_id)
    assert step.status == "error" and "could not be read" in step.error, step.error


def test_a_session_name_longer_than_a_title_is_kept_whole_and_the_title_cut() -> None:
    key = _key()
    hint = "S" * 195  # the title adds "proxy · laptop · " to it

    record_model_call(key, session=hint, fmt="openai_chat", exchange=chat_call())
    record_model_call(key, session=hint, fmt="openai_chat", exchange=chat_call())

    session = ProxySession.objects.get(key=key)
    assert session.hint == hint and session.conversation.turns.count() == 1
    title = session.conversation.title
    limit = Conversation._meta.get_field("title").max_length
    assert limit is not None and len(title) <= limit and title.startswith("proxy · laptop · SSS")
    assert title.endswith("…")
    assert Exchange.objects.filter(turn__conversation=session.conversation).count() == 2
