"""Seal rules: rule 3 seals a projection of the transcript document; turns sealed under rule 2
(before it) still verify, beside rule-3 turns in the same conversation."""

from __future__ import annotations

from collections.abc import Iterator
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from conversations.models import Conversation, Step, Turn
from conversations.record import integrity
from conversations.record.integrity import SEAL_RULE, SEAL_RULE_DOCUMENT, SEAL_RULE_FIELDS, SEAL_RULE_SERVERS
from conversations.record.transcripts.fields import StepDoc, TurnDoc
from conversations.record.verification import conversation_verify
from conversations.runner import turn_run
from conversations.services import conversation_start, demo_profile_ensure, turn_start
from servers import gateway
from servers.services import demo_server_ensure

pytestmark = pytest.mark.django_db

WEATHER = "What's the weather in Beijing tomorrow?"


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


def _old_then_new(monkeypatch: pytest.MonkeyPatch) -> Conversation:
    """A conversation whose first turn was sealed under rule 2, as before rule 3, and whose
    second turn is sealed under today's rule."""
    alice = User.objects.get_or_create(username="alice")[0]
    conversation, turn = conversation_start(
        owner=alice,
        model_profile=demo_profile_ensure(),
        question=WEATHER,
        servers=[demo_server_ensure()],
        dispatch=False,
    )
    with monkeypatch.context() as patched:
        patched.setattr(integrity, "SEAL_RULE", SEAL_RULE_FIELDS)
        turn_run(turn_id=turn.pk)
    turn_run(turn_id=turn_start(conversation=conversation, question="And in Paris?", dispatch=False).pk)
    return conversation


def test_new_seals_use_the_rule_that_covers_server_names() -> None:
    assert SEAL_RULE == SEAL_RULE_SERVERS


def test_a_turn_sealed_under_the_old_rule_verifies_beside_one_sealed_under_the_new(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    conversation = _old_then_new(monkeypatch)

    rules = list(conversation.turns.order_by("seq").values_list("seal_rule", flat=True))
    report = conversation_verify(conversation=conversation)
    out = StringIO()
    call_command("verify", str(conversation.public_id), stdout=out)

    assert rules == [SEAL_RULE_FIELDS, SEAL_RULE]
    assert report.intact and report.sealed_turns == 2
    assert out.getvalue().startswith("intact:")


@pytest.mark.parametrize("seq", [1, 2])
def test_a_forged_step_is_found_under_either_rule(monkeypatch: pytest.MonkeyPatch, seq: int) -> None:
    conversation = _old_then_new(monkeypatch)
    step = Step.objects.filter(turn__conversation=conversation, turn__seq=seq).order_by("seq").first()
    assert step is not None
    Step.objects.filter(pk=step.pk).update(title="forged")

    report = conversation_verify(conversation=conversation)

    assert not report.intact
    assert (report.turn_seq, report.step_seq) == (seq, step.seq)
    with pytest.raises(CommandError, match=f"turn {seq}, step {step.seq}"):
        call_command("verify", str(conversation.public_id))


@pytest.mark.parametrize(("seq", "claimed"), [(1, SEAL_RULE_DOCUMENT), (2, SEAL_RULE_FIELDS), (2, 9)])
def test_a_seal_read_under_another_rule_does_not_verify(
    monkeypatch: pytest.MonkeyPatch, seq: int, claimed: int
) -> None:
    conversation = _old_then_new(monkeypatch)
    Turn.objects.filter(conversation=conversation, seq=seq).update(seal_rule=claimed)

    report = conversation_verify(conversation=conversation)

    assert not report.intact and report.turn_seq == seq


def test_the_document_rule_covers_every_field_of_a_turn_and_a_step_but_ids_links_and_children() -> None:
    """Rule 3 seals what the transcript document shows. A field added to the document changes
    what rule 3 covers, and so every seal made under it: such a field needs a new rule (and
    this list updated with it)."""
    turn_fields = set(TurnDoc.__annotations__) - integrity.UNSEALED["turn"]
    step_fields = set(StepDoc.__annotations__) - integrity.UNSEALED["step"]

    assert turn_fields == {
        "seq",
        "question",
        "status",
        "answer",
        "error",
        "paradigm",
        "tool_choice",
        "tool_choice_name",
        "model",
        "tools",
        "transcript",
        "created_at",
        "started_at",
        "finished_at",
    }
    assert step_fields | {"parent"} == {
        "seq",
        "parent",
        "kind",
        "status",
        "title",
        "prompt",
        "prompt_exact",
        "prompt_source",
        "tokens",
        "usage",
        "text",
        "calls",
        "diagnostics",
        "tool_name",
        "arguments",
        "result",
        "is_error",
        "error",
        "started_at",
        "finished_at",
    }
