"""One transcript document: the json export, the API's conversation detail and ``ask --json``
give the same document; the import's schema and the OpenAPI description come from its types."""

from __future__ import annotations

import json
from collections.abc import Iterator
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from rest_framework.authtoken.models import Token

from conversations.models import Conversation, Exchange
from conversations.record import integrity
from conversations.record.integrity import SEAL_RULE_FIELDS
from conversations.record.transcripts.export import transcript_export
from conversations.record.transcripts.fields import ExchangeDoc, StepDoc, TranscriptDoc, TurnDoc
from conversations.record.transcripts.importing import TRANSCRIPT_SCHEMA, transcript_import
from servers import gateway
from servers.models import McpServer
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

WEATHER = "What's the weather in Beijing tomorrow?"


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


def _asked() -> dict[str, Any]:
    """``ask --json`` of a weather question (a turn with a tool call over the demo server)."""
    User.objects.create_superuser("admin")
    out = StringIO()
    call_command("ask", WEATHER, "--json", stdout=out)
    printed: dict[str, Any] = json.loads(out.getvalue())
    return printed


def _exported(conversation: Conversation) -> dict[str, Any]:
    exported: dict[str, Any] = json.loads(transcript_export(conversation=conversation, fmt="json"))
    return exported


def _from_api(conversation: Conversation) -> dict[str, Any]:
    token, _ = Token.objects.get_or_create(user=conversation.owner)
    response = Client(HTTP_AUTHORIZATION=f"Token {token.key}").get(
        f"/api/conversations/{conversation.public_id}"
    )
    assert response.status_code == 200
    served: dict[str, Any] = response.json()
    return served


def _exchanges(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        exchange
        for turn in document["turns"]
        for exchanges in [turn["exchanges"], *(step["exchanges"] for step in turn["steps"])]
        for exchange in exchanges
    ]


def test_the_export_the_api_and_ask_json_give_the_same_document_for_a_turn_with_a_tool_call() -> None:
    printed = _asked()
    conversation = Conversation.objects.get(public_id=printed["conversation"]["id"])

    exported, served = _exported(conversation), _from_api(conversation)

    assert printed == exported == served
    [turn] = printed["turns"]
    [tool] = [step for step in turn["steps"] if step["kind"] == "tool"]
    assert tool["server"] == "demo" and tool["arguments"]["city"] == "Beijing"
    # Every key, but those only the API's answer for a turn of more than 500 steps holds.
    assert set(turn) == set(TurnDoc.__annotations__) - {"steps_count", "steps_next"}
    assert set(tool) == set(StepDoc.__annotations__)
    assert all(set(exchange) == set(ExchangeDoc.__annotations__) for exchange in _exchanges(printed))
    assert set(printed) == set(TranscriptDoc.__annotations__)


def test_a_conversation_whose_server_was_deleted_shows_the_name_its_records_kept_everywhere() -> None:
    printed = _asked()
    conversation = Conversation.objects.get(public_id=printed["conversation"]["id"])
    McpServer.objects.filter(name="demo").delete()

    exported, served = _exported(conversation), _from_api(conversation)

    assert exported == served
    [tool] = [step for step in served["turns"][0]["steps"] if step["kind"] == "tool"]
    # The record kept the name when it was written: deleting the server row loses nothing.
    assert tool["server"] == "demo"
    mcp = [exchange for exchange in tool["exchanges"] if exchange["label"] == "tools/call"]
    assert mcp and all(exchange["server"] == "demo" for exchange in mcp)


def test_an_imported_conversation_is_the_same_document_in_the_export_and_the_api() -> None:
    printed = _asked()
    imported = transcript_import(data=json.dumps(printed), owner=UserFactory(username="bob"))

    exported, served = _exported(imported), _from_api(imported)

    assert exported == served
    assert served["conversation"]["servers"] == printed["conversation"]["servers"]
    [tool] = [step for step in served["turns"][0]["steps"] if step["kind"] == "tool"]
    assert tool["server"] == "demo"


def test_a_message_without_a_json_rpc_id_has_a_null_id_everywhere() -> None:
    printed = _asked()
    conversation = Conversation.objects.get(public_id=printed["conversation"]["id"])
    unnumbered = Exchange.objects.filter(turn__conversation=conversation, jsonrpc_id="").count()

    for document in (printed, _exported(conversation), _from_api(conversation)):
        ids = [exchange["jsonrpc_id"] for exchange in _exchanges(document)]
        assert "" not in ids
        assert ids.count(None) == unnumbered > 0
        assert any(isinstance(value, str) for value in ids)


def test_a_version_1_file_with_empty_json_rpc_ids_still_imports_and_reexports_them_as_null(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A file as written before version 2: sealed under seal rule 2, no ``seal_rule`` key, ""
    for an absent JSON-RPC id."""
    monkeypatch.setattr(integrity, "SEAL_RULE", SEAL_RULE_FIELDS)
    printed = _asked()
    monkeypatch.undo()
    old = json.loads(json.dumps(printed))
    old["version"] = 1
    for exchange in _exchanges(old):
        exchange["jsonrpc_id"] = exchange["jsonrpc_id"] or ""
    for turn in old["turns"]:
        del turn["seal_rule"]

    imported = transcript_import(data=json.dumps(old), owner=UserFactory(username="bob"))

    assert (imported.imported_meta or {})["format_version"] == 1
    assert (imported.imported_meta or {})["verification"]["status"] == "this-installation"
    again = _exported(imported)
    assert [e["jsonrpc_id"] for e in _exchanges(again)] == [e["jsonrpc_id"] for e in _exchanges(printed)]


def test_the_import_schema_is_the_documents_types() -> None:
    definitions = TRANSCRIPT_SCHEMA["$defs"]
    assert isinstance(definitions, dict)

    for name, doc_type in (("Turn", TurnDoc), ("Step", StepDoc), ("Exchange", ExchangeDoc)):
        schema = definitions[name]
        assert isinstance(schema, dict)
        assert set(schema["properties"]) == set(doc_type.__annotations__)
        assert schema["additionalProperties"] is False
    exchange = definitions["Exchange"]
    assert isinstance(exchange, dict)
    assert exchange["properties"]["jsonrpc_id"] == {"type": ["string", "null"], "maxLength": 64}


def test_the_openapi_document_describes_the_transcript_document(client: Client) -> None:
    alice = UserFactory(username="alice")
    client.force_login(alice)

    schema = client.get("/api/openapi.json").json()

    detail = schema["paths"]["/api/conversations/{public_id}"]["get"]["responses"]["200"]
    assert detail["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Transcript"}
    components = schema["components"]["schemas"]
    assert set(components["Transcript"]["properties"]) == set(TranscriptDoc.__annotations__)
    for name, doc_type in (("Turn", TurnDoc), ("Step", StepDoc), ("Exchange", ExchangeDoc)):
        assert set(components[name]["properties"]) == set(doc_type.__annotations__)
    assert components["Exchange"]["properties"]["jsonrpc_id"] == {
        "type": "string",
        "maxLength": 64,
        "nullable": True,
    }
    assert components["Turn"]["properties"]["steps"] == {
        "type": "array",
        "items": {"$ref": "#/components/schemas/Step"},
    }
