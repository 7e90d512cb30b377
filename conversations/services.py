"""Writes about conversations: start them, add turns, set up the demo profile."""

from __future__ import annotations

from collections.abc import Iterable

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from django.db.models import Max

from conversations.execution import turn_dispatch
from conversations.models import Comparison, Conversation, ModelProfile, Turn
from servers.models import McpServer

DEMO_PROFILE_NAME = "demo"


def turn_start(*, conversation: Conversation, question: str, dispatch: bool = True) -> Turn:
    """Queue a new turn; it is handed to the runner only once this transaction commits."""
    with transaction.atomic():
        Conversation.objects.select_for_update().filter(pk=conversation.pk).first()
        last = conversation.turns.aggregate(m=Max("seq"))["m"] or 0
        turn = Turn.objects.create(
            conversation=conversation,
            seq=last + 1,
            question=question,
            paradigm=conversation.paradigm,
            tool_choice=conversation.tool_choice,
            tool_choice_name=conversation.tool_choice_name,
            model_name=conversation.model_profile.model,
        )
        if dispatch:
            transaction.on_commit(lambda: turn_dispatch(turn.pk))
    return turn


def conversation_start(
    *,
    owner: AbstractBaseUser,
    model_profile: ModelProfile,
    question: str,
    servers: Iterable[McpServer],
    paradigm: str = "native",
    tool_choice: str = "auto",
    tool_choice_name: str = "",
    comparison: Comparison | None = None,
    dispatch: bool = True,
) -> tuple[Conversation, Turn]:
    """Create a conversation and queue its first turn."""
    with transaction.atomic():
        conversation = Conversation.objects.create(
            comparison=comparison,
            owner_id=owner.pk,
            title=question.strip().splitlines()[0][:200] if question.strip() else "untitled",
            model_profile=model_profile,
            paradigm=paradigm,
            tool_choice=tool_choice,
            tool_choice_name=tool_choice_name if tool_choice == "named" else "",
        )
        conversation.servers.set(list(servers))
        turn = turn_start(conversation=conversation, question=question, dispatch=dispatch)
    return conversation, turn


def comparison_start(
    *,
    owner: AbstractBaseUser,
    question: str,
    runs: Iterable[tuple[ModelProfile, str]],
    servers: Iterable[McpServer],
    tool_choice: str = "auto",
    tool_choice_name: str = "",
    dispatch: bool = True,
) -> tuple[Comparison, list[Turn]]:
    """One question under several (model profile, paradigm) runs: ordinary conversations, grouped.

    Raises:
        ValueError: fewer than two runs, or the same run twice.
    """
    runs = list(runs)
    if len(runs) < 2:
        raise ValueError("a comparison needs at least two runs")
    if len({(profile.pk, paradigm) for profile, paradigm in runs}) != len(runs):
        raise ValueError("each run must differ in model or paradigm")
    servers = list(servers)
    with transaction.atomic():
        comparison = Comparison.objects.create(owner_id=owner.pk, question=question)
        turns = [
            conversation_start(
                owner=owner,
                model_profile=profile,
                question=question,
                servers=servers,
                paradigm=paradigm,
                tool_choice=tool_choice,
                tool_choice_name=tool_choice_name,
                comparison=comparison,
                dispatch=dispatch,
            )[1]
            for profile, paradigm in runs
        ]
    return comparison, turns


def demo_profile_ensure() -> ModelProfile:
    """The demo model profile, created on first use (served in-process by this app)."""
    profile, _ = ModelProfile.objects.update_or_create(
        name=DEMO_PROFILE_NAME,
        defaults={
            "provider": "openai_chat",
            "model": "demo",
            "api_key_env": "DEMO_MODEL_API_KEY",
            "is_demo": True,
            "native_tools": "yes",
            "structured_output": "yes",
            "parallel_calls": "yes",
        },
    )
    return profile
