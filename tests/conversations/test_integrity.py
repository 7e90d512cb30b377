"""Tamper evidence and redaction on records written by real turns."""

from __future__ import annotations

import json
from collections.abc import Iterator
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from conversations.integrity import conversation_verify
from conversations.models import Conversation, Exchange, RedactionRule, Step
from conversations.redaction import redactor
from conversations.runner import turn_run
from conversations.services import conversation_start, demo_profile_ensure, turn_start
from servers import gateway
from servers.services import demo_server_ensure

WEATHER = "What will the weather be like in Beijing tomorrow?"

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


def _conversation(question: str = WEATHER) -> Conversation:
    alice = User.objects.create_user("alice")
    conversation, turn = conversation_start(
        owner=alice,
        model_profile=demo_profile_ensure(),
        question=question,
        servers=[demo_server_ensure()],
        dispatch=False,
    )
    turn_run(turn_id=turn.pk)
    return conversation


def test_the_chain_of_a_normal_conversation_verifies_across_turns() -> None:
    conversation = _conversation()
    second = turn_start(conversation=conversation, question="And in Paris?", dispatch=False)
    turn_run(turn_id=second.pk)

    report = conversation_verify(conversation=conversation)
    out = StringIO()
    call_command("verify", str(conversation.public_id), stdout=out)

    assert (
        report.intact and report.checked == Exchange.objects.filter(turn__conversation=conversation).count()
    )
    assert out.getvalue().startswith("intact:")


def test_a_direct_database_edit_breaks_the_chain_at_that_record() -> None:
    conversation = _conversation()
    call = Exchange.objects.get(turn__conversation=conversation, label="tools/call")
    Exchange.objects.filter(pk=call.pk).update(
        response_body=call.response_body.replace("Beijing", "Shanghai")
    )

    report = conversation_verify(conversation=conversation)

    assert not report.intact
    assert report.broken_exchange_id == call.pk
    with pytest.raises(CommandError, match=f"BROKEN at exchange {call.pk}"):
        call_command("verify", str(conversation.public_id))


def test_deleting_a_record_breaks_the_link_of_the_next_one() -> None:
    conversation = _conversation()
    rows = list(Exchange.objects.filter(turn__conversation=conversation).order_by("turn__seq", "seq"))
    rows[1].delete()

    report = conversation_verify(conversation=conversation)

    assert not report.intact and report.broken_exchange_id == rows[2].pk


def test_verify_says_clearly_when_there_is_no_such_conversation() -> None:
    with pytest.raises(CommandError, match="no conversation"):
        call_command("verify", "00000000-0000-0000-0000-000000000000")


@pytest.mark.parametrize(
    ("secret", "name"),
    [
        ("sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2", "api_key"),
        ("AKIAIOSFODNN7EXAMPLE", "api_key"),
        ("Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig", "bearer_token"),
        ("alice@example.com", "email"),
    ],
)
def test_each_pattern_class_is_redacted_before_anything_is_stored(secret: str, name: str) -> None:
    conversation = _conversation(f"Take a note titled creds with the text {secret}")

    stored = json.dumps(
        list(Exchange.objects.filter(turn__conversation=conversation).values()), default=str
    ) + json.dumps(list(Step.objects.filter(turn__conversation=conversation).values()), default=str)

    assert secret not in stored
    assert f"[REDACTED:{name}]" in stored


def test_a_staff_rule_is_applied_and_the_chain_still_verifies() -> None:
    RedactionRule.objects.create(name="ticket", pattern=r"TICKET-\d{4}")

    conversation = _conversation("Take a note titled t with the text TICKET-1234")

    bodies = "".join(
        Exchange.objects.filter(turn__conversation=conversation).values_list("request_body", flat=True)
    )
    assert "TICKET-1234" not in bodies and "[REDACTED:ticket]" in bodies
    assert conversation_verify(conversation=conversation).intact


def test_the_redactor_replaces_known_secret_values_wherever_they_appear() -> None:
    redact = redactor(secrets=["hunter2-very-secret"])

    assert redact.json({"a": ["x hunter2-very-secret y"]}) == {"a": ["x [REDACTED:secret] y"]}
    assert redactor(secrets=["abc"]).text("abc") == "abc"  # too short to be a secret worth hiding


def test_verify_refuses_a_malformed_id_clearly() -> None:
    with pytest.raises(CommandError, match="no conversation not-a-uuid"):
        call_command("verify", "not-a-uuid")
