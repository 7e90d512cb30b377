"""Export (json, jsonl, OTLP/JSON) and import of transcripts, on records written by real turns."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from datetime import datetime
from io import StringIO
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import override_settings
from jsonschema import Draft202012Validator

from conversations.models import AuditEvent, Conversation, Exchange, ModelProfile, Step
from conversations.record.integrity import GENESIS, exchange_digest, turn_seal
from conversations.record.transcripts.document import ID_KEYS
from conversations.record.transcripts.export import transcript_export
from conversations.record.transcripts.importing import TranscriptError, transcript_import
from conversations.record.verification import conversation_verify
from conversations.runner import turn_run
from conversations.selectors import profiles_for_form
from conversations.services import conversation_start, demo_profile_ensure, turn_start
from servers import gateway
from servers.services import demo_server_ensure
from tests.factories import ExchangeFactory, StepFactory, UserFactory

WEATHER = "What will the weather be like in Beijing tomorrow?"


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


def _conversation(*, turns: int = 1) -> Conversation:
    alice = User.objects.get_or_create(username="alice")[0]
    conversation, turn = conversation_start(
        owner=alice,
        model_profile=demo_profile_ensure(),
        question=WEATHER,
        servers=[demo_server_ensure()],
        dispatch=False,
    )
    ran = [turn]
    turn_run(turn_id=turn.pk)
    for _ in range(turns - 1):
        ran.append(turn_start(conversation=conversation, question="And in Paris?", dispatch=False))
        turn_run(turn_id=ran[-1].pk)
    # The tests read the record of finished turns: a turn that failed says why here, not as a
    # missing step further on.
    for each in ran:
        each.refresh_from_db()
        assert each.status == "done", f"turn {each.seq} {each.status}: {each.error}"
    return conversation


def _canonical(document: Any) -> str:
    """The documented serialisation of the json export."""
    return json.dumps(document, indent=2, ensure_ascii=False, sort_keys=True) + "\n"


def _records(document: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every (level, record) of a json export in document order, for the ``ID_KEYS`` walk."""
    yield "conversation", document["conversation"]
    for turn in document["turns"]:
        yield "turn", turn
        for step in turn["steps"]:
            yield "step", step
            for exchange in step["exchanges"]:
                yield "exchange", exchange
        for exchange in turn["exchanges"]:
            yield "exchange", exchange


def _normalised(document: dict[str, Any]) -> dict[str, Any]:
    """The export with each id replaced by its ordinal position (parents by their step's)."""
    document = copy.deepcopy(document)
    step_positions: dict[int, int] = {}
    exchange_positions: dict[int, str] = {}
    counters: dict[str, int] = {}
    for level, record in _records(document):
        counters[level] = counters.get(level, 0) + 1
        if level == "step":
            step_positions[record["id"]] = counters[level]
        if level == "exchange":
            exchange_positions[record["id"]] = f"exchange#{counters[level]}"
        record["id"] = f"{level}#{counters[level]}"
    for level, record in _records(document):
        if level == "step" and record["parent"] is not None:
            record["parent"] = f"step#{step_positions[record['parent']]}"
        # A call's executed_exchange is an exchange's id: named by that exchange's position.
        for call in record.get("calls") or [] if level == "step" else []:
            if isinstance(call, dict) and call.get("executed_exchange") is not None:
                call["executed_exchange"] = exchange_positions[call["executed_exchange"]]
        for key in set(ID_KEYS[level]) - {"id", "parent"}:
            record[key] = f"this installation's {key}"
    return document


def _with_ids_of(document: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """``document`` with ``other``'s values at every ``ID_KEYS`` key (the two walk in step)."""
    document = copy.deepcopy(document)
    pairs = list(zip(_records(document), _records(other), strict=True))
    for (level, record), (other_level, other_record) in pairs:
        assert level == other_level
        for key in ID_KEYS[level]:
            record[key] = other_record[key]
        for call, other_call in zip(record.get("calls") or [], other_record.get("calls") or [], strict=False):
            if isinstance(call, dict) and "executed_exchange" in call:
                call["executed_exchange"] = other_call["executed_exchange"]
    return document


def _id_values(document: dict[str, Any]) -> set[tuple[str, Any]]:
    return {(level, record["id"]) for level, record in _records(document)}


# --- json: export → import → export --------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_export_import_export_is_byte_identical_apart_from_the_ids() -> None:
    original = _conversation(turns=2)
    first = transcript_export(conversation=original, fmt="json")
    bob = User.objects.create_user("bob")

    imported = transcript_import(data=first, owner=bob)
    second = transcript_export(conversation=imported, fmt="json")

    before, after = json.loads(first), json.loads(second)
    assert first == _canonical(before)
    assert _normalised(before) == _normalised(after)
    assert _canonical(_with_ids_of(before, after)) == second
    assert not _id_values(before) & _id_values(after)
    assert after["conversation"]["id"] == str(imported.public_id)


@pytest.mark.django_db(transaction=True)
def test_the_json_export_holds_every_raw_body_and_the_step_fields() -> None:
    conversation = _conversation()

    document = json.loads(transcript_export(conversation=conversation, fmt="json"))

    assert (document["format"], document["version"]) == ("tool-call-inspector/transcript", 2)
    assert "exported_at" not in document
    turn = document["turns"][0]
    decide = next(step for step in turn["steps"] if step["kind"] == "decide")
    tool = next(step for step in turn["steps"] if step["kind"] == "tool")
    assert decide["usage"]["prompt_tokens"] > 0 and decide["tokens"]["encoding"]
    assert (
        decide["prompt"] and decide["prompt_source"] and decide["calls"][0]["tool"] == "get_weather_forecast"
    )
    assert tool["parent"] == decide["id"] and tool["server"] == "demo"
    assert tool["arguments"] == {"city": "Beijing", "day": "tomorrow"}
    stored = Exchange.objects.filter(turn__conversation=conversation)
    exported = [e for step in turn["steps"] for e in step["exchanges"]] + turn["exchanges"]
    assert sorted((e["request_body"], e["response_body"], e["hash"]) for e in exported) == sorted(
        stored.values_list("request_body", "response_body", "hash")
    )


@pytest.mark.django_db(transaction=True)
def test_an_imported_conversation_verifies_is_read_only_and_names_its_servers() -> None:
    original = _conversation()
    bob = User.objects.create_user("bob")

    imported = transcript_import(data=transcript_export(conversation=original, fmt="json"), owner=bob)

    report = conversation_verify(conversation=imported)
    assert report.intact and report.checked == Exchange.objects.filter(turn__conversation=imported).count()
    assert imported.read_only and not original.read_only
    assert imported.owner == bob and imported.imported_meta is not None
    assert imported.imported_meta["original_id"] == str(original.public_id)
    assert imported.imported_meta["owner"] == "alice"
    assert imported.model_profile == original.model_profile  # same name, provider and model: reused
    tool = Step.objects.get(turn__conversation=imported, kind="tool")
    assert (tool.server, tool.server_name) == (None, "demo")
    call = Exchange.objects.get(turn__conversation=imported, label="tools/call")
    assert (call.server, call.server_name) == (None, "demo")
    # Each imported exchange names its new conversation (what the list's text filter reads).
    assert set(
        Exchange.objects.filter(turn__conversation=imported).values_list("conversation_id", flat=True)
    ) == {imported.pk}


@pytest.mark.django_db
def test_a_transcript_of_an_unknown_profile_gets_an_imported_profile_of_its_own() -> None:
    document = _factory_document()
    document["conversation"]["model_profile"].update(name="gpt", model="gpt-4o", base_url="")
    owner = UserFactory()

    first = transcript_import(data=json.dumps(document), owner=owner)
    again = transcript_import(data=json.dumps(document), owner=owner)

    assert first.model_profile.name == "imported: gpt"
    assert (first.model_profile.model, first.model_profile.api_key_env) == ("gpt-4o", "")
    assert again.model_profile == first.model_profile
    assert ModelProfile.objects.filter(name__startswith="imported: ").count() == 1


# --- jsonl ---------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_jsonl_has_one_valid_json_exchange_a_line_in_chain_order() -> None:
    conversation = _conversation(turns=2)

    text = transcript_export(conversation=conversation, fmt="jsonl")

    lines = text.splitlines()
    assert text.endswith("\n")
    assert len(lines) == Exchange.objects.filter(turn__conversation=conversation).count()
    records = [json.loads(line) for line in lines]
    assert {r["conversation_id"] for r in records} == {str(conversation.public_id)}
    assert [r["turn_seq"] for r in records] == sorted(r["turn_seq"] for r in records)
    assert all(later["prev_hash"] == earlier["hash"] for earlier, later in pairwise(records))
    call = next(r for r in records if r["label"] == "tools/call")
    assert call["step_seq"] is not None and json.loads(call["request_body"])["method"] == "tools/call"


# --- OTLP/JSON -----------------------------------------------------------------------------------

_HEX = {"type": "string", "pattern": "^[0-9a-f]+$"}
OTLP_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$defs": {
        "anyValue": {
            "type": "object",
            "minProperties": 1,
            "maxProperties": 1,
            "additionalProperties": False,
            "properties": {
                "stringValue": {"type": "string"},
                "intValue": {"type": "string", "pattern": "^-?[0-9]+$"},
                "doubleValue": {"type": "number"},
                "boolValue": {"type": "boolean"},
                "arrayValue": {
                    "type": "object",
                    "required": ["values"],
                    "additionalProperties": False,
                    "properties": {"values": {"type": "array", "items": {"$ref": "#/$defs/anyValue"}}},
                },
            },
        },
        "attributes": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["key", "value"],
                "additionalProperties": False,
                "properties": {
                    "key": {"type": "string", "minLength": 1},
                    "value": {"$ref": "#/$defs/anyValue"},
                },
            },
        },
        "nanos": {"type": "string", "pattern": "^[0-9]{19}$"},
        "span": {
            "type": "object",
            "required": ["traceId", "spanId", "name", "kind", "startTimeUnixNano", "endTimeUnixNano"],
            "additionalProperties": False,
            "properties": {
                "traceId": {**_HEX, "minLength": 32, "maxLength": 32, "not": {"const": "0" * 32}},
                "spanId": {**_HEX, "minLength": 16, "maxLength": 16, "not": {"const": "0" * 16}},
                "parentSpanId": {**_HEX, "minLength": 16, "maxLength": 16},
                "name": {"type": "string", "minLength": 1},
                "kind": {"type": "integer", "minimum": 0, "maximum": 5},
                "startTimeUnixNano": {"$ref": "#/$defs/nanos"},
                "endTimeUnixNano": {"$ref": "#/$defs/nanos"},
                "attributes": {"$ref": "#/$defs/attributes"},
                "status": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"code": {"enum": [0, 1, 2]}, "message": {"type": "string"}},
                },
            },
        },
    },
    "type": "object",
    "required": ["resourceSpans"],
    "additionalProperties": False,
    "properties": {
        "resourceSpans": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["resource", "scopeSpans"],
                "properties": {
                    "resource": {
                        "type": "object",
                        "required": ["attributes"],
                        "properties": {"attributes": {"$ref": "#/$defs/attributes"}},
                    },
                    "scopeSpans": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["scope", "spans"],
                            "properties": {
                                "scope": {
                                    "type": "object",
                                    "required": ["name"],
                                    "properties": {"name": {"type": "string"}, "version": {"type": "string"}},
                                },
                                "spans": {"type": "array", "items": {"$ref": "#/$defs/span"}},
                            },
                        },
                    },
                },
            },
        }
    },
}


def _value(any_value: dict[str, Any]) -> Any:
    ((kind, value),) = any_value.items()
    if kind == "intValue":
        return int(value)
    if kind == "arrayValue":
        return [_value(item) for item in value["values"]]
    return value


def _attrs(span: dict[str, Any]) -> dict[str, Any]:
    keys = [attribute["key"] for attribute in span["attributes"]]
    assert len(keys) == len(set(keys)), f"duplicate attribute keys in {span['name']}"
    return {attribute["key"]: _value(attribute["value"]) for attribute in span["attributes"]}


def _spans(text: str) -> list[dict[str, Any]]:
    document = json.loads(text)
    Draft202012Validator(OTLP_SCHEMA).validate(document)
    resource = document["resourceSpans"][0]
    assert _attrs(resource["resource"]) == {"service.name": "tool-call-inspector"}
    spans: list[dict[str, Any]] = resource["scopeSpans"][0]["spans"]
    return spans


@pytest.mark.django_db(transaction=True)
def test_the_otel_export_is_otlp_json_with_the_genai_and_mcp_spans() -> None:
    conversation = _conversation()
    decide = Step.objects.get(turn__conversation=conversation, kind="decide")

    spans = _spans(transcript_export(conversation=conversation, fmt="otel"))

    by_name: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        by_name.setdefault(span["name"], []).append(span)
    ids = {span["spanId"] for span in spans}
    assert len(ids) == len(spans) and len({span["traceId"] for span in spans}) == 1
    assert all(span.get("parentSpanId") in ids for span in spans if span["name"] != "invoke_agent")
    assert all(_attrs(s)["gen_ai.conversation.id"] == str(conversation.public_id) for s in spans)
    assert all(int(s["endTimeUnixNano"]) >= int(s["startTimeUnixNano"]) for s in spans)
    (root,) = by_name["invoke_agent"]
    assert "parentSpanId" not in root and _attrs(root)["gen_ai.operation.name"] == "invoke_agent"

    chats = by_name["chat demo"]
    model_calls = Exchange.objects.filter(turn__conversation=conversation, channel="llm").count()
    assert (
        len(chats)
        == model_calls
        == Step.objects.filter(turn__conversation=conversation, kind__in=["decide", "answer"]).count()
    )
    first_chat = _attrs(chats[0])
    assert chats[0]["kind"] == 1  # the demo model runs in this app: INTERNAL
    assert first_chat["gen_ai.operation.name"] == "chat"
    assert (first_chat["gen_ai.provider.name"], first_chat["gen_ai.request.model"]) == ("openai", "demo")
    assert first_chat["gen_ai.response.id"].startswith("chatcmpl-")
    assert first_chat["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert first_chat["gen_ai.usage.input_tokens"] == decide.usage["prompt_tokens"]
    assert first_chat["gen_ai.usage.output_tokens"] == decide.usage["completion_tokens"]

    (tool,) = by_name["execute_tool get_weather_forecast"]
    tool_attrs = _attrs(tool)
    assert tool["kind"] == 1 and tool["parentSpanId"] == root["spanId"]
    assert tool_attrs["gen_ai.operation.name"] == "execute_tool"
    assert tool_attrs["gen_ai.tool.name"] == "get_weather_forecast"
    assert tool_attrs["gen_ai.tool.call.id"] == decide.calls[0]["id"]

    (call,) = by_name["tools/call get_weather_forecast"]
    call_attrs = _attrs(call)
    exchange = Exchange.objects.get(turn__conversation=conversation, label="tools/call")
    assert call["kind"] == 3 and call["parentSpanId"] == tool["spanId"]
    assert call_attrs["mcp.method.name"] == "tools/call"
    assert call_attrs["jsonrpc.request.id"] == exchange.jsonrpc_id
    assert call_attrs["mcp.protocol.version"] == "2025-11-25"
    assert call_attrs["network.transport"] == "pipe"
    assert (call_attrs["inspector.exchange.id"], call_attrs["inspector.exchange.hash"]) == (
        exchange.pk,
        exchange.hash,
    )
    assert "error.type" not in call_attrs and "status" not in call
    assert "initialize" in by_name and "tools/list" in by_name


@pytest.mark.django_db(transaction=True)
@override_settings(OTEL_EXPORT_CONTENT=False)
def test_the_otel_export_without_content_keeps_bodies_out_of_attributes() -> None:
    conversation = _conversation()

    text = transcript_export(conversation=conversation, fmt="otel")

    attributes = json.dumps([_attrs(span) for span in _spans(text)])
    assert "high_c" not in attributes and "messages" not in attributes


@pytest.mark.django_db(transaction=True)
def test_one_trace_per_turn_and_an_imported_conversation_exports_the_same_spans() -> None:
    original = _conversation(turns=2)
    imported = transcript_import(
        data=transcript_export(conversation=original, fmt="json"), owner=User.objects.create_user("bob")
    )

    before = _spans(transcript_export(conversation=original, fmt="otel"))
    after = _spans(transcript_export(conversation=imported, fmt="otel"))

    assert len({span["traceId"] for span in before}) == 2
    strip = {"gen_ai.conversation.id", "inspector.exchange.id"}

    def shape(spans: list[dict[str, Any]]) -> list[tuple[str, int, dict[str, Any]]]:
        return [(s["name"], s["kind"], {k: v for k, v in _attrs(s).items() if k not in strip}) for s in spans]

    assert shape(before) == shape(after)


@pytest.mark.django_db
def test_errors_become_span_statuses() -> None:
    rpc = ExchangeFactory(
        mcp=True,
        response_body='{"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "bad params"}}',
        step=StepFactory(kind="tool", tool_name="echo", status="error", error="bad params"),
    )
    tool_error = ExchangeFactory(
        mcp=True,
        seq=rpc.seq + 1,
        response_body='{"jsonrpc": "2.0", "id": 2, "result": {"content": [], "isError": true}}',
        step=StepFactory(parent=None, turn=rpc.turn, kind="tool", tool_name="echo", is_error=True),
    )
    assert tool_error.turn == rpc.turn

    spans = _spans(transcript_export(conversation=rpc.turn.conversation, fmt="otel"))

    calls = [s for s in spans if s["name"] == "tools/call echo"]
    assert [s["status"]["code"] for s in calls] == [2, 2]
    assert _attrs(calls[0])["rpc.response.status_code"] == "-32602"
    assert _attrs(calls[0])["error.type"] == "-32602" and calls[0]["status"]["message"] == "bad params"
    assert _attrs(calls[1])["error.type"] == "tool_error"
    executed = [s for s in spans if s["name"] == "execute_tool echo"]
    assert all(s["status"]["code"] == 2 for s in executed)
    assert _attrs(executed[1])["error.type"] == "tool_error"


# --- import failures -----------------------------------------------------------------------------


def _factory_document() -> dict[str, Any]:
    """A small valid export drawn with factories: a decide step, a tool step, a chained exchange each."""
    exchange = ExchangeFactory()
    tool = StepFactory(parent=exchange.step, kind="tool", tool_name="echo")
    ExchangeFactory(mcp=True, step=tool)
    conversation = exchange.turn.conversation
    previous = GENESIS
    rows = Exchange.objects.filter(turn__conversation=conversation).select_related("turn")
    for row in rows.order_by("turn__seq", "seq", "id"):
        row.prev_hash, row.hash = previous, exchange_digest(row, turn_seq=row.turn.seq, previous=previous)
        row.save(update_fields=["prev_hash", "hash"])
        previous = row.hash
    turn_seal(turn=exchange.turn)
    conversation.refresh_from_db()
    document: dict[str, Any] = json.loads(transcript_export(conversation=conversation, fmt="json"))
    return document


def _broken(change: str) -> str | bytes:
    if change == "not json":
        return b"{'format': nope"
    if change == "bad utf-8":
        return b'{"format": "\xff"}'
    if change == "not an object":
        return "[1, 2]"
    document = _factory_document()
    turn = document["turns"][0]
    if change == "wrong format":
        document["format"] = "something/else"
    elif change == "wrong version":
        document["version"] = 3
    elif change == "missing turns":
        del document["turns"]
    elif change == "seq as a string":
        turn["seq"] = "1"
    elif change == "unexpected key":
        turn["steps"][0]["colour"] = "blue"
    elif change == "unknown step kind":
        turn["steps"][0]["kind"] = "dream"
    elif change == "NaN":
        return _canonical(document).replace('"duration_ms": 12.5', '"duration_ms": NaN', 1)
    elif change == "NUL character":
        turn["question"] = "a\x00b"
    elif change == "bad time":
        turn["steps"][0]["started_at"] = "yesterday"
    elif change == "dangling parent":
        turn["steps"][1]["parent"] = 999_999
    elif change == "turn twice":
        document["turns"].append(copy.deepcopy(turn))
    return _canonical(document)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("not json", "not valid JSON"),
        ("bad utf-8", "not valid JSON"),
        ("not an object", "must be a JSON object"),
        ("wrong format", "not a Tool-Call Inspector transcript"),
        ("wrong version", "unsupported transcript version 3"),
        ("missing turns", "'turns' is a required property"),
        ("seq as a string", r"turns\[0\]\.seq: '1' is not of type 'integer'"),
        ("unexpected key", r"turns\[0\]\.steps\[0\]: Additional properties .*'colour'"),
        ("unknown step kind", r"turns\[0\]\.steps\[0\]\.kind: 'dream' is not one of"),
        ("NaN", "NaN is not a JSON number"),
        ("NUL character", r"turns\[0\]\.question: holds a NUL U\+0000 at character 1"),
        ("bad time", r"turns\[0\]\.steps\[0\]\.started_at: 'yesterday' is not an ISO 8601"),
        ("dangling parent", r"turns\[0\]\.steps\[1\]\.parent: 999999 is not another step"),
        ("turn twice", r"turns\[1\]\.seq: turn 1 appears twice"),
    ],
)
@pytest.mark.django_db
def test_a_malformed_transcript_is_refused_with_a_clear_message_and_nothing_stored(
    change: str, message: str
) -> None:
    data = _broken(change)
    owner = UserFactory()
    before = Conversation.objects.count()

    with pytest.raises(TranscriptError, match=message):
        transcript_import(data=data, owner=owner)

    assert Conversation.objects.count() == before


@pytest.mark.django_db(transaction=True)
def test_a_transcript_changed_after_export_is_refused_because_its_chain_breaks() -> None:
    document = json.loads(transcript_export(conversation=_conversation(), fmt="json"))
    tool = next(step for step in document["turns"][0]["steps"] if step["kind"] == "tool")
    (call,) = [e for e in tool["exchanges"] if e["label"] == "tools/call"]
    call["response_body"] = call["response_body"].replace("Beijing", "Shanghai")
    before = Conversation.objects.count()

    with pytest.raises(
        TranscriptError, match=r"does not verify at turn 1, step \d+, exchange \d+ \(tools/call\)"
    ):
        transcript_import(data=_canonical(document), owner=User.objects.create_user("bob"))

    assert Conversation.objects.count() == before


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("edit", "named"),
    [
        ("answer", r"turn 1: the turn does not match its seal"),
        ("arguments", r"turn 1, step \d+: the step does not match its seal"),
        ("last turn", r"anchor says 2 sealed turn\(s\); 1 are left"),
    ],
)
def test_an_edited_export_of_this_installation_is_refused_naming_the_record(edit: str, named: str) -> None:
    document = json.loads(transcript_export(conversation=_conversation(turns=2), fmt="json"))
    if edit == "answer":
        document["turns"][0]["answer"] = "FORGED"
    elif edit == "arguments":
        tool = next(step for step in document["turns"][0]["steps"] if step["kind"] == "tool")
        tool["arguments"] = {"city": "Atlantis"}
    else:
        document["turns"].pop()

    with pytest.raises(TranscriptError, match=named):
        transcript_import(data=_canonical(document), owner=User.objects.create_user("bob"))


@pytest.mark.django_db(transaction=True)
def test_an_import_belongs_to_the_importer_and_keeps_the_files_claims_as_claims() -> None:
    document = json.loads(transcript_export(conversation=_conversation(), fmt="json"))
    document["conversation"]["owner"] = "admin"
    # Another installation's file, unsigned: its records are sealed with a key this one does not have.
    document["conversation"]["integrity"]["key_id"] = "0123456789abcdef"
    del document["conversation"]["integrity"]["signature"]
    mallory = User.objects.create_user("mallory")

    imported = transcript_import(data=_canonical(document), owner=mallory)

    meta = imported.imported_meta or {}
    assert imported.owner == mallory and meta["imported_by"] == "mallory" and meta["owner"] == "admin"
    assert meta["verification"]["status"] == "other-installation"
    assert "verifies internally only" in meta["verification"]["detail"]
    # From the import on, this installation's seals cover it.
    assert conversation_verify(conversation=imported).intact


@pytest.mark.django_db(transaction=True)
def test_another_installations_signed_export_verifies_with_its_public_key() -> None:
    with override_settings(INTEGRITY_KEY="the exporting installation's key"):
        exported = transcript_export(conversation=_conversation(), fmt="json")
        out = StringIO()
        call_command("verify", "--public-key", stdout=out)
    fingerprint = out.getvalue().split("fingerprint ")[1].split()[0]

    imported = transcript_import(data=exported, owner=User.objects.create_user("bob"))

    verification = (imported.imported_meta or {})["verification"]
    assert verification["status"] == "signed-elsewhere" and verification["signer"] == fingerprint
    assert f"signed by the key with fingerprint {fingerprint}" in verification["detail"]


@pytest.mark.django_db(transaction=True)
def test_an_edited_signed_export_of_another_installation_is_refused_naming_the_record() -> None:
    with override_settings(INTEGRITY_KEY="the exporting installation's key"):
        document = json.loads(transcript_export(conversation=_conversation(), fmt="json"))
    tool = next(step for step in document["turns"][0]["steps"] if step["kind"] == "tool")
    tool["result"] = {"content": [{"type": "text", "text": "forged"}]}

    with pytest.raises(
        TranscriptError, match=rf"signature does not verify at turn 1, step {tool['seq']}: the step"
    ):
        transcript_import(data=_canonical(document), owner=User.objects.create_user("bob"))


@pytest.mark.django_db(transaction=True)
def test_a_file_made_before_keyed_sealing_imports_as_an_unkeyed_chain_and_is_sealed_here() -> None:
    document = _factory_document()
    previous = GENESIS
    turn = document["turns"][0]
    for _, exchange in sorted(
        [(None, e) for e in turn["exchanges"]]
        + [(s["seq"], e) for s in turn["steps"] for e in s["exchanges"]],
        key=lambda pair: (pair[1]["seq"], pair[1]["id"]),
    ):
        del exchange["chain_version"]
        exchange["prev_hash"] = previous
        exchange["hash"] = previous = _legacy_hash(exchange, turn["seq"], previous)
    for key in ("seal", "seal_steps"):
        del turn[key]
    del document["conversation"]["integrity"]

    imported = transcript_import(data=json.dumps(document), owner=UserFactory())

    assert (imported.imported_meta or {})["verification"]["status"] == "legacy-unkeyed"
    report = conversation_verify(conversation=imported)
    assert report.intact and not report.legacy and report.sealed_turns == 1


def _legacy_hash(exchange: dict[str, Any], turn_seq: int, previous: str) -> str:
    row = Exchange(
        **{key: exchange[key] for key in ("seq", "channel", "direction", "label", "status", "error")},
        jsonrpc_id=exchange["jsonrpc_id"] or "",
        request_headers=exchange["request_headers"],
        request_body=exchange["request_body"],
        response_headers=exchange["response_headers"],
        response_body=exchange["response_body"],
        started_at=datetime.fromisoformat(exchange["started_at"]),
        duration_ms=exchange["duration_ms"],
        chain_version=1,
    )
    return exchange_digest(row, turn_seq=turn_seq, previous=previous)


@pytest.mark.django_db
def test_an_import_creates_no_profile_anyone_else_is_offered() -> None:
    document = _factory_document()
    document["conversation"]["model_profile"].update(name="gpt", model="gpt-4o", base_url="")
    alice, bob = UserFactory(), UserFactory()

    first = transcript_import(data=json.dumps(document), owner=alice)
    second = transcript_import(data=json.dumps(document), owner=bob)

    assert first.model_profile.imported_by == alice and second.model_profile.imported_by == bob
    assert first.model_profile != second.model_profile
    offered = set(profiles_for_form())
    assert first.model_profile not in offered and second.model_profile not in offered


@pytest.mark.django_db(transaction=True)
def test_a_transcript_missing_an_exchange_is_refused() -> None:
    document = json.loads(transcript_export(conversation=_conversation(), fmt="json"))
    document["turns"][0]["steps"][0]["exchanges"].pop(1)

    with pytest.raises(TranscriptError, match="its link to the previous record does not match"):
        transcript_import(data=_canonical(document), owner=User.objects.create_user("bob"))


# --- the commands --------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_export_writes_to_stdout_or_a_file_and_is_audited(tmp_path: Path) -> None:
    conversation = _conversation()
    out = StringIO()

    call_command("export", str(conversation.public_id), stdout=out)
    call_command(
        "export",
        str(conversation.public_id),
        "--format",
        "otel",
        "--output",
        str(tmp_path / "t.json"),
        "--user",
        "alice",
        stderr=StringIO(),
    )

    assert out.getvalue() == transcript_export(conversation=conversation, fmt="json")
    assert (tmp_path / "t.json").read_text(encoding="utf-8") == transcript_export(
        conversation=conversation, fmt="otel"
    )
    events = list(AuditEvent.objects.filter(action="exported").order_by("at"))
    assert [(e.actor_name, e.detail["format"]) for e in events] == [("system", "json"), ("alice", "otel")]
    assert all(e.conversation_public_id == conversation.public_id for e in events)


@pytest.mark.django_db
@pytest.mark.parametrize("conversation_id", ["00000000-0000-0000-0000-000000000000", "not-a-uuid"])
def test_export_of_an_unknown_conversation_is_a_clear_error(conversation_id: str) -> None:
    with pytest.raises(CommandError, match="no conversation"):
        call_command("export", conversation_id)


@pytest.mark.django_db(transaction=True)
def test_import_prints_the_new_id_and_page_and_is_audited(tmp_path: Path) -> None:
    original = _conversation()
    path = tmp_path / "transcript.json"
    call_command("export", str(original.public_id), "--output", str(path), stderr=StringIO())
    User.objects.create_user("bob")
    out = StringIO()

    call_command("import", str(path), "--user", "bob", stdout=out)

    imported = Conversation.objects.exclude(pk=original.pk).get()
    assert f"imported {imported.public_id} /c/{imported.public_id}/" in out.getvalue()
    assert imported.owner.username == "bob" and imported.read_only
    event = AuditEvent.objects.get(action="imported")
    assert (event.actor_name, event.conversation_public_id) == ("bob", imported.public_id)
    assert event.detail["original_id"] == str(original.public_id)


@pytest.mark.django_db
def test_import_of_a_bad_or_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    UserFactory(username="bob")
    (tmp_path / "bad.json").write_text("{}")

    with pytest.raises(CommandError, match=r"cannot import .*bad.json: not a Tool-Call Inspector transcript"):
        call_command("import", str(tmp_path / "bad.json"), "--user", "bob")
    with pytest.raises(CommandError, match="cannot read"):
        call_command("import", str(tmp_path / "missing.json"), "--user", "bob")
    with pytest.raises(CommandError, match="no user named 'carol'"):
        call_command("import", str(tmp_path / "bad.json"), "--user", "carol")
    assert not AuditEvent.objects.filter(action="imported").exists()


@pytest.mark.django_db
def test_import_without_user_needs_a_superuser_to_own_it(tmp_path: Path) -> None:
    (tmp_path / "t.json").write_text(_canonical(_factory_document()))

    with pytest.raises(CommandError, match="pass --user"):
        call_command("import", str(tmp_path / "t.json"))
