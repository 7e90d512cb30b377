"""Search, export (JSON, JSONL, OTLP), retention and the read audit work unchanged on a proxy
session's conversation."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from conversations.models import AuditEvent, Conversation, Exchange
from conversations.proxy.keys import create_key
from conversations.proxy.models import ProxySession
from conversations.proxy.recording import record_mcp, record_model_call
from conversations.record.retention import conversations_prune
from conversations.record.transcripts.export import transcript_export
from conversations.record.transcripts.importing import transcript_import
from conversations.record.verification import conversation_verify
from conversations.selectors.search import ConversationFilters, conversation_search
from tests.conversations.proxy.wire import chat_call, tools_call

pytestmark = pytest.mark.django_db(transaction=True)
TOKYO = {"timezone": "Asia/Tokyo"}


def _conversation() -> Conversation:
    alice = get_user_model().objects.create_user("alice")
    key = create_key(alice)[0]
    record_model_call(
        key,
        session="s",
        fmt="openai_chat",
        exchange=chat_call(question="What time is it in Tokyo?", calls=[("c1", "get_current_time", TOKYO)]),
    )
    record_mcp(
        key,
        session="s",
        server_name="time",
        records=[tools_call("get_current_time", TOKYO, call_id="c1", text="ZEBRA-NOON")],
    )
    return ProxySession.objects.get(key=key).conversation


def test_a_proxy_session_is_found_by_its_question_and_its_tool() -> None:
    conversation = _conversation()
    alice = conversation.owner

    by_text = conversation_search(user=alice, filters=ConversationFilters(q="Tokyo"))
    by_tool = conversation_search(user=alice, filters=ConversationFilters(tool="get_current_time"))

    assert list(by_text) == [conversation] and list(by_tool) == [conversation]


def test_a_proxy_session_exports_as_json_jsonl_and_otlp_and_its_export_imports_intact() -> None:
    conversation = _conversation()

    document = json.loads(transcript_export(conversation=conversation, fmt="json"))
    lines = transcript_export(conversation=conversation, fmt="jsonl").splitlines()
    otel = json.loads(transcript_export(conversation=conversation, fmt="otel"))

    calls = next(step["calls"] for step in document["turns"][0]["steps"] if step["kind"] == "decide")
    assert calls[0]["linked_by"] == "call_id"
    assert len(lines) == Exchange.objects.filter(turn__conversation=conversation).count()
    assert "ZEBRA-NOON" in json.dumps(otel) and otel["resourceSpans"]
    bob = get_user_model().objects.create_user("bob")
    imported = transcript_import(data=json.dumps(document), owner=bob)
    assert conversation_verify(conversation=imported).intact
    again = json.loads(transcript_export(conversation=imported, fmt="json"))
    linked = next(step["calls"] for step in again["turns"][0]["steps"] if step["kind"] == "decide")
    assert linked[0]["linked_by"] == "call_id" and linked[0]["executed_exchange"] is not None


def test_retention_prunes_an_old_proxy_session_and_its_rows() -> None:
    conversation = _conversation()
    Conversation.objects.filter(pk=conversation.pk).update(created_at=timezone.now() - timedelta(days=40))
    conversation.turns.update(created_at=timezone.now() - timedelta(days=40))

    conversations_prune(older_than_days=30)

    assert not Conversation.objects.filter(pk=conversation.pk).exists()
    assert not ProxySession.objects.exists() and not Exchange.objects.exists()


def test_opening_a_proxy_session_is_in_the_read_audit() -> None:
    conversation = _conversation()
    client = Client()
    client.force_login(conversation.owner)

    client.get(f"/c/{conversation.public_id}/")

    assert AuditEvent.objects.filter(action="opened", conversation_public_id=conversation.public_id).exists()
