"""Seal rule 4: the server name recorded with each step and exchange, which the pages and the
exports show, is inside the seal and the export's signature; turns sealed under rule 3 still
verify under it. An import's own fields — what its file claims and what the import found — are
sealed too."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import transaction
from django.test import override_settings

from conversations.models import Conversation, Exchange, Step
from conversations.record import integrity
from conversations.record.integrity import (
    GENESIS,
    SEAL_RULE,
    SEAL_RULE_DOCUMENT,
    UNSEALED,
    exchange_digest,
    turn_seal,
)
from conversations.record.transcripts.document import transcript_document
from conversations.record.transcripts.export import transcript_export
from conversations.record.transcripts.fields import ID_KEYS
from conversations.record.transcripts.importing import TranscriptError, transcript_import
from conversations.record.transcripts.otel_import import trace_imports
from conversations.record.verification import IMPORT_SEAL, VERIFIED_HERE, conversation_verify, import_claims
from tests.factories import ExchangeFactory, StepFactory, UserFactory

pytestmark = pytest.mark.django_db


def _sealed() -> Conversation:
    exchange = ExchangeFactory()
    tool = StepFactory(
        parent=exchange.step,
        kind="tool",
        tool_name="get_forecast",
        server_name="weather",
        result={"sky": "clear"},
    )
    ExchangeFactory(mcp=True, step=tool, server_name="weather")
    conversation = exchange.turn.conversation
    previous = GENESIS
    for row in Exchange.objects.filter(turn__conversation=conversation).order_by("turn__seq", "seq", "id"):
        row.prev_hash, row.hash = (
            previous,
            exchange_digest(row, turn_seq=exchange.turn.seq, previous=previous),
        )
        row.save(update_fields=["prev_hash", "hash"])
        previous = row.hash
    turn_seal(turn=exchange.turn)
    conversation.refresh_from_db()
    return conversation


def test_every_field_the_transcript_document_shows_is_sealed_or_is_this_installations_own() -> None:
    conversation = _sealed()
    document = transcript_document(conversation=conversation, signed=False)
    turn = conversation.turns.get()
    steps = {step.pk: step for step in Step.objects.filter(turn=turn)}
    exchanges = {row.pk: row for row in Exchange.objects.filter(turn=turn)}
    turn_doc = document["turns"][0]
    seqs = {step.pk: step.seq for step in steps.values()}

    sealed_turn = set(integrity._turn_content(turn, SEAL_RULE))
    # steps_count and steps_next are in a paged API answer only (where the rest of a turn is).
    paging = {"steps_count", "steps_next"}
    assert set(turn_doc) - sealed_turn == set(UNSEALED["turn"]) - paging and UNSEALED["turn"] - set(
        ID_KEYS["turn"]
    ) == {"steps", "exchanges", *paging}
    for step_doc in turn_doc["steps"]:
        step = steps[step_doc["id"]]
        parent = seqs.get(step.parent_id) if step.parent_id else None
        sealed_step = set(integrity._step_content(step, parent, SEAL_RULE))
        assert set(step_doc) - sealed_step == set(ID_KEYS["step"]) - {"parent"} | {"exchanges"}
        for exchange_doc in step_doc["exchanges"]:
            # An exchange's own hash covers its content; the step's seal adds its server name.
            row = exchanges[exchange_doc["id"]]
            sealed_exchange = set(integrity._exchange_content(row, turn.seq)) | {"server"}
            assert set(exchange_doc) - sealed_exchange == set(ID_KEYS["exchange"])


@pytest.mark.parametrize("model", [Exchange, Step])
def test_a_server_name_changed_after_the_seal_breaks_the_record(model: type[Exchange] | type[Step]) -> None:
    conversation = _sealed()
    model.objects.filter(turn__conversation=conversation, server_name="weather").update(server_name="forged")

    report = conversation_verify(conversation=conversation)

    assert not report.intact and report.turn_seq == 1 and report.step_seq is not None


def test_a_turn_sealed_under_rule_3_still_verifies(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(integrity, "SEAL_RULE", SEAL_RULE_DOCUMENT)
    conversation = _sealed()
    monkeypatch.undo()

    assert conversation.turns.get().seal_rule == SEAL_RULE_DOCUMENT
    assert conversation_verify(conversation=conversation).intact


def _signed_elsewhere() -> dict[str, Any]:
    with override_settings(INTEGRITY_KEY="another installation's key"):
        document: dict[str, Any] = json.loads(transcript_export(conversation=_sealed(), fmt="json"))
    Conversation.objects.all().delete()
    return document


def test_a_forged_server_name_in_a_file_signed_elsewhere_is_refused() -> None:
    document = _signed_elsewhere()
    tool = next(step for step in document["turns"][0]["steps"] if step["kind"] == "tool")
    tool["exchanges"][0]["server"] = "forged"

    with pytest.raises(TranscriptError, match="signature does not verify"):
        transcript_import(data=json.dumps(document), owner=UserFactory())


def test_a_file_signed_under_rule_3_before_the_rule_was_named_still_verifies(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(integrity, "SEAL_RULE", SEAL_RULE_DOCUMENT)
    document = _signed_elsewhere()
    monkeypatch.undo()
    del document["conversation"]["integrity"]["signature"]["rule"]

    imported = transcript_import(data=json.dumps(document), owner=UserFactory())

    assert (imported.imported_meta or {})["verification"]["status"] == "signed-elsewhere"


def _imported_elsewhere() -> Conversation:
    """An import of a file signed by another installation (an amber, unverified import)."""
    return transcript_import(data=json.dumps(_signed_elsewhere()), owner=UserFactory(username="importer"))


def _meta_set(conversation: Conversation, key: str, value: object) -> None:
    meta = dict(conversation.imported_meta or {})
    meta[key] = value
    Conversation.objects.filter(pk=conversation.pk).update(imported_meta=meta)


def test_every_field_an_imports_document_and_page_show_is_sealed_or_is_this_installations_own() -> None:
    imported = _imported_elsewhere()
    assert conversation_verify(conversation=imported).intact
    block = transcript_document(conversation=imported, signed=False)["conversation"]
    claims = import_claims(imported)

    shown = set(block) - set(ID_KEYS["conversation"])
    assert shown <= set(claims["meta"])  # type: ignore[arg-type]
    # Each field the export shows, each the import added (who, when, what its file proved), and
    # each of the row's own fields the pages show: changed in the database, the record breaks.
    forgeries: list[tuple[str, Any]] = [
        *((f"meta.{key}", key) for key in sorted(shown | {"verification", "imported_by", "original_id"})),
        ("row.title", {"title": "forged"}),
        ("row.owner", {"owner": UserFactory(username="mallory")}),
        ("row.paradigm", {"paradigm": "prompt_xml"}),
        ("row.tool_choice", {"tool_choice": "none"}),
    ]
    for name, change in forgeries:
        with transaction.atomic():
            if isinstance(change, str):
                _meta_set(imported, change, {"forged": True})
            else:
                Conversation.objects.filter(pk=imported.pk).update(**change)
            report = conversation_verify(conversation=Conversation.objects.get(pk=imported.pk))
            assert not report.intact and "import's own fields" in report.reason, name
            transaction.set_rollback(True)
    imported.model_profile.model = "forged-model"
    imported.model_profile.save()
    report = conversation_verify(conversation=Conversation.objects.get(pk=imported.pk))
    assert not report.intact and "import's own fields" in report.reason


def test_an_import_claiming_to_be_verified_here_after_the_fact_is_broken_and_never_green() -> None:
    imported = _imported_elsewhere()
    assert conversation_verify(conversation=imported).resealed_by == "importer"
    verdict = dict((imported.imported_meta or {})["verification"])

    _meta_set(imported, "verification", {**verdict, "status": VERIFIED_HERE})
    assert not conversation_verify(conversation=Conversation.objects.get(pk=imported.pk)).intact

    # Without its seal (an import made before claims were sealed, or a seal removed), an import
    # is never taken as verified, whatever its verdict says.
    meta = dict(Conversation.objects.get(pk=imported.pk).imported_meta or {})
    del meta[IMPORT_SEAL]
    Conversation.objects.filter(pk=imported.pk).update(imported_meta=meta)
    report = conversation_verify(conversation=Conversation.objects.get(pk=imported.pk))
    assert report.intact and report.resealed_by == "importer"


def test_an_imported_trace_is_sealed_with_what_its_import_added() -> None:
    conversation = _sealed()
    trace = transcript_export(conversation=conversation, fmt="otel")
    [imported] = trace_imports(data=trace, owner=UserFactory(username="importer"))

    assert conversation_verify(conversation=imported).intact
    _meta_set(imported, "unmapped", ["forged"])

    assert not conversation_verify(conversation=Conversation.objects.get(pk=imported.pk)).intact
