"""Tamper evidence and redaction on records written by real turns."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import override_settings

from conversations.models import AuditEvent, Conversation, Exchange, RedactionRule, Step, Turn
from conversations.record import integrity
from conversations.record.integrity import SEALED_ACTION
from conversations.record.verification import conversation_verify
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


# --- the keyed chain: everything shown, anchored ---------------------------------------------------


def _two_turns() -> Conversation:
    conversation = _conversation()
    second = turn_start(
        conversation=conversation, question="What about the weather in Paris tomorrow?", dispatch=False
    )
    turn_run(turn_id=second.pk)
    return conversation


def _broken_at(conversation: Conversation, *where: str) -> str:
    """The verify command's failure, which must name each of ``where``."""
    with pytest.raises(CommandError) as failure:
        call_command("verify", str(conversation.public_id))
    message = str(failure.value)
    assert all(part in message for part in where), message
    return message


def test_a_fresh_conversation_is_keyed_and_every_turn_sealed_and_anchored() -> None:
    conversation = _two_turns()

    report = conversation_verify(conversation=conversation)
    conversation.refresh_from_db()

    assert report.intact and not report.legacy and report.sealed_turns == 2
    assert (
        set(Exchange.objects.filter(turn__conversation=conversation).values_list("chain_version", flat=True))
        == {integrity.CHAIN_VERSION}
        == {integrity.KEYED_BODY_DIGESTS}
    )
    assert all(len(turn.seal) == 64 and turn.seal_steps for turn in conversation.turns.all())
    assert conversation.chain_turns == 2 and conversation.chain_head == conversation.turns.get(seq=2).seal
    events = AuditEvent.objects.filter(conversation_public_id=conversation.public_id, action=SEALED_ACTION)
    assert [event.detail["turn"] for event in events.order_by("id")] == [1, 2]


def test_a_forged_answer_is_found_and_named_by_its_turn() -> None:
    conversation = _two_turns()
    Turn.objects.filter(conversation=conversation, seq=1).update(answer="FORGED")

    report = conversation_verify(conversation=conversation)

    assert not report.intact and (report.turn_seq, report.step_seq) == (1, None)
    assert "question, answer" in report.reason
    _broken_at(conversation, "turn 1", f"turn id {report.turn_id}")


def test_forged_arguments_of_a_tool_call_are_found_and_named_by_turn_and_step() -> None:
    conversation = _two_turns()
    tool = Step.objects.get(turn__conversation=conversation, turn__seq=2, kind="tool")
    Step.objects.filter(pk=tool.pk).update(arguments={"city": "Atlantis", "day": "tomorrow"})

    report = conversation_verify(conversation=conversation)

    assert not report.intact and (report.turn_seq, report.step_seq, report.step_id) == (2, tool.seq, tool.pk)
    assert report.anchor == f"tool-step-{tool.pk}"
    _broken_at(conversation, "turn 2", f"step {tool.seq}", f"step id {tool.pk}")


def test_a_forged_parsed_call_or_diagnostic_is_found_at_its_step() -> None:
    conversation = _conversation()
    decide = Step.objects.filter(turn__conversation=conversation, kind="decide").order_by("seq").first()
    assert decide is not None
    Step.objects.filter(pk=decide.pk).update(calls=[], diagnostics=["all good"])

    report = conversation_verify(conversation=conversation)

    assert not report.intact and report.step_id == decide.pk and report.anchor == f"step-{decide.pk}"


def test_deleting_the_last_exchanges_of_the_conversation_is_detected() -> None:
    conversation = _two_turns()
    last = list(Exchange.objects.filter(turn__conversation=conversation).order_by("-turn__seq", "-seq")[:2])
    Exchange.objects.filter(pk__in=[row.pk for row in last]).delete()

    report = conversation_verify(conversation=conversation)

    assert not report.intact and report.turn_seq == 2
    _broken_at(conversation, "turn 2")


def test_deleting_the_last_turn_is_detected_by_the_anchor_and_by_the_audit_log() -> None:
    conversation = _two_turns()
    conversation.refresh_from_db()
    first_seal = conversation.turns.get(seq=1).seal
    Turn.objects.filter(conversation=conversation, seq=2).delete()

    report = conversation_verify(conversation=conversation)
    assert not report.intact and "anchor says 2 sealed turn(s); 1 are left" in report.reason

    # Someone holding the database (not the key) rolls the anchor back to what it was after turn
    # 1: the audit log's last seal still says there were two.
    after_first = AuditEvent.objects.get(
        conversation_public_id=conversation.public_id, action=SEALED_ACTION, detail__turn=1
    )
    assert after_first.detail["head"] == first_seal
    first_anchor = _recorded_anchor(conversation, turns=1, head=first_seal)
    Conversation.objects.filter(pk=conversation.pk).update(
        chain_turns=1, chain_head=first_seal, chain_anchor=first_anchor
    )

    report = conversation_verify(conversation=conversation)
    assert not report.intact and "audit log's last seal says 2 sealed turn(s)" in report.reason


def _recorded_anchor(conversation: Conversation, *, turns: int, head: str) -> str:
    """The anchor the conversation had at ``turns`` sealed turns (an attacker who kept a copy)."""
    return integrity.anchor_mac(integrity.integrity_key(), str(conversation.public_id), turns, head)


def test_deleting_a_turn_in_the_middle_breaks_the_next_turn() -> None:
    conversation = _two_turns()
    turn_run(turn_id=turn_start(conversation=conversation, question="And in Rome?", dispatch=False).pk)
    Turn.objects.filter(conversation=conversation, seq=2).delete()

    report = conversation_verify(conversation=conversation)

    assert not report.intact and report.turn_seq == 3 and report.broken_exchange_id is not None


def test_sealing_an_earlier_turn_again_keeps_the_newest_seal_as_the_head() -> None:
    # An ended turn sealed a second time (the seal is idempotent): the anchor still counts every
    # sealed turn once and heads the chain with the newest seal.
    conversation = _two_turns()
    first = conversation.turns.get(seq=1)
    head = conversation.turns.get(seq=2).seal

    seal = integrity.turn_seal(turn=first)
    conversation.refresh_from_db()

    assert seal == first.seal  # nothing changed, so the same seal
    assert (conversation.chain_turns, conversation.chain_head) == (2, head)
    assert conversation_verify(conversation=conversation).intact
    event = AuditEvent.objects.filter(
        conversation_public_id=conversation.public_id, action=SEALED_ACTION
    ).latest("id")
    assert event.detail == {"turn": 1, "seal": seal, "turns": 2, "head": head}


def test_a_turn_after_an_unsealed_one_chains_from_the_start_and_the_anchor_counts_sealed_turns() -> None:
    conversation = _two_turns()
    Turn.objects.filter(conversation=conversation, seq=2).update(seal="", seal_steps=[])
    third = turn_start(conversation=conversation, question="And in Rome?", dispatch=False)
    turn_run(turn_id=third.pk)

    conversation.refresh_from_db()
    third.refresh_from_db()
    records = integrity._turn_records(third)
    key, identity = integrity.integrity_key(), str(conversation.public_id)
    digests = integrity.step_digests(key, identity, third, records, third.seal_rule)

    assert third.seal == integrity.turn_seal_mac(
        key, identity, third, records, digests, integrity.GENESIS, third.seal_rule
    )
    assert (conversation.chain_turns, conversation.chain_head) == (2, third.seal)


def test_a_seal_recomputed_without_the_key_does_not_verify() -> None:
    conversation = _conversation()
    turn = conversation.turns.get()
    forged = Turn.objects.get(pk=turn.pk)
    forged.answer = "FORGED"
    with override_settings(INTEGRITY_KEY="a key the forger made up"):
        integrity.turn_seal(turn=forged)  # reseals with the wrong key, anchors included

    report = conversation_verify(conversation=conversation)

    assert not report.intact


def test_records_made_before_keyed_sealing_still_verify_under_their_old_rule() -> None:
    conversation = _two_turns()
    _make_legacy(conversation)

    report = conversation_verify(conversation=conversation)
    out = StringIO()
    call_command("verify", str(conversation.public_id), stdout=out)

    assert report.intact and report.legacy and report.sealed_turns == 0
    assert "unkeyed legacy chain" in out.getvalue()
    # A legacy record is still checked: changing one breaks its (unkeyed) link.
    call = Exchange.objects.filter(turn__conversation=conversation, label="tools/call").first()
    assert call is not None
    Exchange.objects.filter(pk=call.pk).update(response_body="{}")
    assert conversation_verify(conversation=conversation).broken_exchange_id == call.pk


def test_a_new_turn_after_legacy_ones_is_keyed_and_a_legacy_record_after_it_is_refused() -> None:
    conversation = _conversation()
    _make_legacy(conversation)
    turn_run(turn_id=turn_start(conversation=conversation, question="And in Paris?", dispatch=False).pk)

    report = conversation_verify(conversation=conversation)
    assert report.intact and not report.legacy and report.sealed_turns == 1

    # Downgrading the keyed turn's records to the unkeyed rule does not pass.
    later = Exchange.objects.filter(turn__conversation=conversation, turn__seq=2).order_by("seq")
    Exchange.objects.filter(pk__in=[row.pk for row in later]).update(chain_version=1)
    assert not conversation_verify(conversation=conversation).intact


def test_records_of_the_keyed_version_before_body_digests_still_verify_and_new_ones_follow_them() -> None:
    conversation = _conversation()
    _rechain_as_version_2(conversation)
    turn_run(turn_id=turn_start(conversation=conversation, question="And in Paris?", dispatch=False).pk)

    report = conversation_verify(conversation=conversation)
    versions = Exchange.objects.filter(turn__conversation=conversation).values_list(
        "turn__seq", "chain_version"
    )
    assert report.intact and not report.legacy and report.sealed_turns == 2
    assert set(versions) == {(1, integrity.KEYED), (2, integrity.KEYED_BODY_DIGESTS)}

    # A version 2 record is still checked against its whole body.
    call = Exchange.objects.get(turn__conversation=conversation, turn__seq=1, label="tools/call")
    Exchange.objects.filter(pk=call.pk).update(
        response_body=call.response_body.replace("Beijing", "Shanghai")
    )
    assert conversation_verify(conversation=conversation).broken_exchange_id == call.pk


def test_a_record_claiming_another_chain_version_than_its_hash_was_made_under_does_not_verify() -> None:
    conversation = _conversation()
    first = Exchange.objects.filter(turn__conversation=conversation).order_by("seq").first()
    assert first is not None and first.chain_version == integrity.KEYED_BODY_DIGESTS

    for claimed in (integrity.KEYED, 4):
        Exchange.objects.filter(pk=first.pk).update(chain_version=claimed)
        report = conversation_verify(conversation=conversation)
        assert not report.intact and report.broken_exchange_id == first.pk
    assert "unknown chain version 4" in report.reason


def test_a_version_3_hash_covers_each_body_by_its_sha256_under_its_own_label() -> None:
    # A known answer: the stored hashes of every record made since version 3 depend on exactly
    # this construction, so a change to it must be a new version, never an edit of this one.
    exchange = Exchange(
        seq=4,
        channel=Exchange.Channel.LLM,
        direction=Exchange.Direction.CLIENT,
        label="chat.completions",
        jsonrpc_id="",
        request_headers={"content-type": "application/json"},
        request_body='{"messages": [{"role": "user", "content": "naïve «quotes» \\" \\n"}]}',
        response_headers={},
        response_body='data: {"choices": []}\n\ndata: [DONE]\n\n',
        status="200",
        error="",
        started_at=datetime(2026, 12, 1, 12, 0, tzinfo=UTC),
        duration_ms=12.5,
        chain_version=integrity.KEYED_BODY_DIGESTS,
    )
    digest = integrity.exchange_digest(exchange, turn_seq=2, previous=integrity.GENESIS, key=b"k" * 32)

    assert digest == "94d92b7c52ed8529a963504801d178fa6b75f1a3d16cf851d9b6627d45956d8d"
    # The body itself is no part of the MAC's input, only its SHA-256: the same hash results
    # from the content with the bodies' digests in their place.
    content = integrity._exchange_content(exchange, 2)
    for name in ("request_body", "response_body"):
        content[name] = "sha256:" + hashlib.sha256(str(content[name]).encode()).hexdigest()
    text = "exchange/3\n" + integrity.GENESIS + "\n" + integrity._canonical(content)
    assert integrity._mac(b"k" * 32, text) == digest
    # Under version 2 the same record hashes differently (its whole body, another label).
    exchange.chain_version = integrity.KEYED
    assert (
        integrity.exchange_digest(exchange, turn_seq=2, previous=integrity.GENESIS, key=b"k" * 32) != digest
    )


def test_a_record_rewritten_under_the_unkeyed_rule_after_version_3_ones_is_refused_as_a_downgrade() -> None:
    conversation = _conversation()
    rows = list(Exchange.objects.filter(turn__conversation=conversation).order_by("seq"))
    last = rows[-1]
    # What someone with database access but not the key can do: forge the body and recompute
    # the unkeyed hash, which anyone can.
    last.response_body = "forged"
    last.chain_version = integrity.LEGACY
    last.hash = integrity.exchange_digest(last, turn_seq=1, previous=last.prev_hash)
    last.save(update_fields=["response_body", "chain_version", "hash"])

    report = conversation_verify(conversation=conversation)

    assert not report.intact and report.broken_exchange_id == last.pk
    assert report.reason == "it claims the unkeyed legacy rule after keyed records"


def _rechain(conversation: Conversation, version: int) -> None:
    """Rewrite every exchange's hash under chain ``version``, in conversation order."""
    previous = integrity.GENESIS
    rows = Exchange.objects.filter(turn__conversation=conversation).select_related("turn")
    for row in rows.order_by("turn__seq", "seq", "id"):
        assert row.turn is not None
        row.chain_version = version
        row.prev_hash = previous
        row.hash = previous = integrity.exchange_digest(row, turn_seq=row.turn.seq, previous=previous)
        row.save(update_fields=["chain_version", "prev_hash", "hash"])


def _rechain_as_version_2(conversation: Conversation) -> None:
    """Rewrite the conversation as the release before body digests stored it, sealed again."""
    _rechain(conversation, integrity.KEYED)
    for turn in conversation.turns.order_by("seq"):
        integrity.turn_seal(turn=turn)


def _make_legacy(conversation: Conversation) -> None:
    """Rewrite the conversation as the previous version stored it: unkeyed SHA-256, no seals."""
    _rechain(conversation, integrity.LEGACY)
    Turn.objects.filter(conversation=conversation).update(seal="", seal_steps=[])
    Conversation.objects.filter(pk=conversation.pk).update(chain_turns=0, chain_head="", chain_anchor="")
    AuditEvent.objects.filter(conversation_public_id=conversation.public_id, action=SEALED_ACTION).delete()


def test_the_key_is_the_one_the_settings_hold_whatever_the_environment_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("INTEGRITY_KEY", "a key the environment holds after start-up")

    with override_settings(INTEGRITY_KEY="the configured key"):
        assert integrity.integrity_key() == b"the configured key"


def test_the_key_lives_outside_the_database_in_a_private_file(settings: Any) -> None:
    path = Path(settings.INTEGRITY_KEY_FILE)
    key = integrity.integrity_key()

    assert path.read_text().strip().encode() == key and path.stat().st_mode & 0o777 == 0o600
    conversation = _conversation()
    dump = json.dumps(
        [list(model.objects.values()) for model in (Conversation, Turn, Step, Exchange, AuditEvent)],
        default=str,
    )
    assert key.decode() not in dump
    with override_settings(INTEGRITY_KEY="another installation's key"):
        assert not conversation_verify(conversation=conversation).intact


def test_the_mac_is_hmac_sha256_in_hex_so_seals_made_by_earlier_releases_still_verify() -> None:
    # A known answer (HMAC-SHA256 of this UTF-8 text under this key): a change in how the
    # digest is computed must not change a byte of it, or every stored seal would fail.
    assert (
        integrity._mac(b"k" * 32, "a seal over «rows» ✓")
        == "944508cf7078171eb8d4476254da1e2346b9eb2fba82ecc950be7c5b74879403"
    )
