"""The rows the measures run on: bench users, the fake-model profile, the demo server, turns.

Each measure owns its conversations through its own user and deletes them when it starts, so
repeated runs do not grow the bench database (P5's million exchanges and P6's big conversation
are kept on purpose, under their own users).
"""

from __future__ import annotations

import os

from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser

from bench.fake_model import API_KEY, API_KEY_ENV, MODEL_NAME
from conversations.models import Conversation, ModelProfile, Turn
from conversations.services import conversation_start, demo_profile_ensure
from servers.models import McpServer
from servers.services import demo_server_ensure

FAKE_PROFILE_NAME = "bench-fake"
PASSWORD = "bench-password-not-secret"


def user(name: str) -> AbstractBaseUser:
    """A bench user (password ``PASSWORD``), created on first use."""
    model = get_user_model()
    account, created = model.objects.get_or_create(username=name)
    if created or not account.check_password(PASSWORD):
        account.set_password(PASSWORD)
        account.save()
    return account


def fake_profile(base_url: str) -> ModelProfile:
    """The profile that points the product at the fake model (its key from the environment)."""
    os.environ[API_KEY_ENV] = API_KEY
    profile, _ = ModelProfile.objects.update_or_create(
        name=FAKE_PROFILE_NAME,
        defaults={
            "provider": "openai_chat",
            "base_url": base_url,
            "model": MODEL_NAME,
            "api_key_env": API_KEY_ENV,
            "native_tools": "yes",
            "structured_output": "yes",
            "parallel_calls": "yes",
            "is_demo": False,
        },
    )
    return profile


def demo_profile() -> ModelProfile:
    return demo_profile_ensure()


def demo_server() -> McpServer:
    return demo_server_ensure()


def purge(owner: AbstractBaseUser) -> int:
    """Delete every conversation of ``owner`` (what an earlier run of the measure left)."""
    deleted, _ = Conversation.objects.filter(owner_id=owner.pk).delete()
    return deleted


def queued_turn(
    *, owner: AbstractBaseUser, profile: ModelProfile, server: McpServer, question: str
) -> tuple[Conversation, Turn]:
    """A new conversation whose first turn is queued but not dispatched (the caller runs it)."""
    return conversation_start(
        owner=owner, model_profile=profile, question=question, servers=[server], dispatch=False
    )
