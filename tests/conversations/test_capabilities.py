"""Learned capabilities: a real model's refusal is remembered on its profile with when and why and
can be reset; a demo scenario's refusal changes nothing for anyone else. Real runs: the demo model
in-process over HTTP, the demo MCP server over stdio."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from conversations.capabilities import (
    CAPABILITY_RESET_ACTION,
    capability_downgrades_remember,
    profile_capability_reset,
)
from conversations.models import AuditEvent, LearnedCapability, ModelProfile, Step, Turn
from conversations.redaction import redactor
from conversations.runner import turn_run
from conversations.services import conversation_start, demo_profile_ensure
from servers import gateway
from servers.services import demo_server_ensure
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)

WEATHER = "What will the weather be like in Beijing tomorrow?"
SECRET = "sk-live-0123456789abcdef0123"


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


def _auto_turn(username: str, question: str) -> Turn:
    _, turn = conversation_start(
        owner=UserFactory(username=username),
        model_profile=demo_profile_ensure(),
        question=question,
        servers=[demo_server_ensure()],
        paradigm="auto",
        dispatch=False,
    )
    turn_run(turn_id=turn.pk)
    turn.refresh_from_db()
    return turn


def _titles(turn: Turn, kind: str) -> list[str]:
    return list(Step.objects.filter(turn=turn, kind=kind).order_by("seq").values_list("title", flat=True))


def test_a_demo_scenario_refusal_does_not_downgrade_the_shared_demo_profile_for_another_user() -> None:
    alices = _auto_turn("alice", f"[demo:no-native-tools] [demo:no-structured] {WEATHER}")
    assert alices.status == "done", alices.error
    # The whole fallback chain, each rung refused by the scenario.
    assert _titles(alices, "fallback") == [
        "fallback: native → structured",
        "fallback: structured → prompt_xml",
    ]

    bobs = _auto_turn("bob", WEATHER)

    shared = demo_profile_ensure()
    assert (shared.native_tools, shared.structured_output) == ("yes", "yes")
    assert not LearnedCapability.objects.exists()
    assert bobs.status == "done", bobs.error
    assert _titles(bobs, "fallback") == []
    first = Step.objects.filter(turn=bobs, kind="decide").order_by("seq").first()
    assert first is not None
    assert "auto: starting with native" in first.diagnostics[0]


def test_a_real_models_refusal_is_remembered_with_when_and_why_and_redacted() -> None:
    profile = ModelProfile.objects.create(
        name="ollama-gemma", model="gemma", base_url="http://engine:11434/v1"
    )
    turn = _auto_turn("alice", WEATHER)

    changed = capability_downgrades_remember(
        profile=profile,
        downgrades=[
            ("native_tools", f"the provider refused native (gemma does not support tools; key {SECRET})")
        ],
        turn=turn,
        redact=redactor(secrets=[SECRET]),
    )

    profile.refresh_from_db()
    assert changed == ["native_tools"]
    assert profile.native_tools == "no"
    learned = LearnedCapability.objects.get(profile=profile)
    assert learned.capability == "native_tools"
    assert "does not support tools" in learned.reason
    assert SECRET not in learned.reason
    assert learned.turn == turn
    assert learned.learned_at is not None


def test_resetting_a_learned_capability_makes_it_unknown_again() -> None:
    profile = ModelProfile.objects.create(name="ollama-gemma", model="gemma", native_tools="no")
    LearnedCapability.objects.create(profile=profile, capability="native_tools", reason="refused")

    bob = UserFactory(username="bob")

    assert profile_capability_reset(profile=profile, capability="native_tools", actor=bob) is True

    profile.refresh_from_db()
    assert profile.native_tools == "unknown"
    assert not LearnedCapability.objects.exists()
    assert profile_capability_reset(profile=profile, capability="native_tools", actor=bob) is False
    assert profile_capability_reset(profile=profile, capability="model", actor=bob) is False
    # Audited once (the two that changed nothing are not): who, when, what it forgot.
    (entry,) = AuditEvent.objects.filter(action=CAPABILITY_RESET_ACTION)
    assert (entry.actor_name, entry.subject) == ("bob", "ollama-gemma")
    assert entry.at is not None
    assert entry.detail["capability"] == "native_tools"
    assert (entry.detail["before"], entry.detail["after"]) == ("no", "unknown")
    assert entry.detail["learned"]["reason"] == "refused"
