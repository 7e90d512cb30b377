"""A proxy session's conversation page: what it shows of the host's traffic and what it offers."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from conversations.models import ModelProfile
from conversations.proxy.keys import create_key
from conversations.proxy.models import ProxyKey
from conversations.proxy.recording import record_model_call
from conversations.proxy.sessions import NOT_KNOWN_MODEL
from tests.conversations.proxy.wire import chat_call

pytestmark = pytest.mark.django_db(transaction=True)


def _key() -> ProxyKey:
    return create_key(get_user_model().objects.create_user("alice"), name="laptop")[0]


def _page(client: Client, key: ProxyKey) -> str:
    client.force_login(key.user)
    conversation = key.sessions.get().conversation
    page = client.get(reverse("inspector-conversation", args=[conversation.public_id]))
    assert page.status_code == 200
    return page.content.decode()


def test_the_placeholder_profile_names_its_model_without_brackets_of_its_own(client: Client) -> None:
    """The page shows a profile's model in brackets already."""
    key = _key()
    record_model_call(key, session=None, fmt="openai_chat", exchange=chat_call())

    profile = ModelProfile.objects.get(conversations__proxy_session__key=key)
    assert profile.model == NOT_KNOWN_MODEL == "as the host sent it"
    assert "(<code>as the host sent it</code>)" in _page(client, key)


def test_a_finished_proxy_turn_offers_no_replay_its_host_ran_it(client: Client) -> None:
    key = _key()
    record_model_call(key, session="s", fmt="openai_chat", exchange=chat_call(text="Noon."))

    page = _page(client, key)
    assert key.sessions.get().conversation.turns.get().is_finished
    assert "Replay this turn" not in page and "replay-form" not in page
