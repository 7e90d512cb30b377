"""Imports are evidence: a file that does not verify with this installation's key is shown as an
unverified import, never as an intact record; a file claiming the id of a conversation recorded
here, that its importer may see, is compared with it and refused where it differs (one the
importer may not see: ``test_import_foreign_ids``)."""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.template.loader import render_to_string
from django.test import override_settings

from conversations.models import Conversation, Exchange
from conversations.record.integrity import GENESIS, exchange_digest, turn_seal
from conversations.record.transcripts.export import transcript_export
from conversations.record.transcripts.importing import TranscriptError, transcript_import
from conversations.record.transcripts.otel_import import trace_imports
from conversations.record.verification import VERIFIED_HERE, conversation_verify
from tests.factories import ConversationFactory, ExchangeFactory, StepFactory, TurnFactory, UserFactory

pytestmark = pytest.mark.django_db


def _sealed() -> Conversation:
    """A small sealed conversation drawn with factories: a decide step and a tool step."""
    exchange = ExchangeFactory()
    tool = StepFactory(parent=exchange.step, kind="tool", tool_name="get_forecast", result={"sky": "clear"})
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


def _document(conversation: Conversation) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(transcript_export(conversation=conversation, fmt="json"))
    return document


def _tool(document: dict[str, Any]) -> dict[str, Any]:
    step: dict[str, Any] = next(step for step in document["turns"][0]["steps"] if step["kind"] == "tool")
    return step


def _badge(conversation: Conversation) -> str:
    chain = conversation_verify(conversation=conversation)
    return render_to_string("inspector/_chain_badge.html", {"conversation": conversation, "chain": chain})


@pytest.mark.parametrize("forgery", ["integrity removed", "key id changed"])
def test_an_edited_export_of_a_conversation_recorded_here_is_refused_naming_the_change(forgery: str) -> None:
    conversation = _sealed()
    document = _document(conversation)
    _tool(document)["result"] = {"sky": "forged"}
    if forgery == "integrity removed":
        del document["conversation"]["integrity"]
    else:
        # Without its signature too: a file that names another key and is not signed is
        # imported as unverifiable, so only the local record can tell the edit.
        document["conversation"]["integrity"]["key_id"] = "0" * 16
        del document["conversation"]["integrity"]["signature"]

    with pytest.raises(
        TranscriptError, match=r"recorded here and the file differs from it at turns\[0\]\.steps"
    ):
        transcript_import(data=json.dumps(document), owner=conversation.owner)
    assert Conversation.objects.count() == 1


def test_a_renamed_server_in_an_export_of_a_conversation_recorded_here_is_refused() -> None:
    conversation = _sealed()
    document = _document(conversation)
    exchange = _tool(document)["exchanges"][0]
    exchange["server"] = "forged-server"
    del document["conversation"]["integrity"]

    with pytest.raises(TranscriptError, match=r"exchanges\[0\]\.server"):
        transcript_import(data=json.dumps(document), owner=conversation.owner)


def test_a_faithful_copy_of_a_conversation_recorded_here_imports_verified_and_intact() -> None:
    conversation = _sealed()

    imported = transcript_import(
        data=transcript_export(conversation=conversation, fmt="json"), owner=conversation.owner
    )

    assert (imported.imported_meta or {})["verification"]["status"] == VERIFIED_HERE
    report = conversation_verify(conversation=imported)
    assert report.intact and report.resealed_by == ""
    assert "✓ record intact" in _badge(imported)


def test_a_file_from_another_key_is_an_unverified_import_in_amber_never_the_green_badge() -> None:
    with override_settings(INTEGRITY_KEY="another installation's key"):
        document = _document(_sealed())
    Conversation.objects.all().delete()
    del document["conversation"]["integrity"]["signature"]
    bob = User.objects.create_user("bob")

    imported = transcript_import(data=json.dumps(document), owner=bob)

    report = conversation_verify(conversation=imported)
    assert report.intact and report.resealed_by == "bob"
    badge = _badge(imported)
    assert "unverified import — re-sealed on import by bob" in badge and "tone-busy" in badge
    assert "✓ record intact" not in badge and "tone-ok" not in badge
    out = StringIO()
    call_command("verify", str(imported.public_id), stdout=out)
    assert "unverified import — re-sealed on import by bob" in out.getvalue()


def test_a_file_stripped_of_its_keyed_chain_is_an_unverified_import() -> None:
    document = _document(_sealed())
    Conversation.objects.all().delete()
    del document["conversation"]["integrity"]

    imported = transcript_import(data=json.dumps(document), owner=User.objects.create_user("mallory"))

    assert conversation_verify(conversation=imported).resealed_by == "mallory"
    assert "✓ record intact" not in _badge(imported)


def test_a_new_conversation_without_exchanges_is_keyed_not_a_legacy_chain() -> None:
    conversation = ConversationFactory()
    TurnFactory(conversation=conversation, status="queued")

    report = conversation_verify(conversation=conversation)

    assert report.intact and not report.legacy and report.checked == 0
    badge = _badge(conversation)
    assert "legacy unkeyed chain" not in badge and "keyed, 0 sealed turns" in badge


def test_an_imported_trace_is_an_unverified_import_even_of_a_conversation_recorded_here() -> None:
    conversation = _sealed()

    [imported] = trace_imports(
        data=transcript_export(conversation=conversation, fmt="otel"), owner=UserFactory()
    )

    report = conversation_verify(conversation=imported)
    assert report.intact and report.resealed_by
    assert "unverified import" in _badge(imported) and "✓ record intact" not in _badge(imported)
