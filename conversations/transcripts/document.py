"""The transcript document: its types, how a conversation becomes one, and its JSON and JSON Lines texts.

``json`` — the whole record, enough to rebuild the conversation elsewhere::

    {"format": "tool-call-inspector/transcript", "version": 1,
     "conversation": {id, title, owner, model_profile: {name, provider, model, base_url, demo},
                      paradigm, tool_choice, tool_choice_name, servers: [{name, transport}],
                      created_at},
     "turns": [{id, seq, question, status, answer, error, paradigm, tool_choice,
                tool_choice_name, model, tools, transcript, created_at, started_at, finished_at,
                steps: [{id, parent, seq, kind, status, title, prompt, prompt_exact,
                         prompt_source, tokens, usage, text, calls, diagnostics, server,
                         tool_name, arguments, result, is_error, error, started_at,
                         finished_at, exchanges: [EXCHANGE, ...]}],
                exchanges: [EXCHANGE, ...]}]}          # the turn's exchanges that have no step
    EXCHANGE = {id, seq, channel, direction, label, server, jsonrpc_id, status, error,
                started_at, duration_ms, request_headers, request_body, response_headers,
                response_body, prev_hash, hash}

Values are stored values, unchanged (empty strings stay empty; ``server`` is the server's
name or null). The document holds nothing volatile — no export time — and is written with
sorted keys, two-space indents and a final newline, so the same conversation always exports to
the same bytes. Step ``updated_at`` is left out: it is the live view's catch-up cursor, not
part of the record.

The keys that change when a transcript is imported are listed in ``ID_KEYS``: the
conversation's public id, and the database ids of turns, steps and exchanges (with each step's
``parent``, a step id). Everything else survives export → import → export byte for byte:
an imported conversation keeps what the export said about its owner, model profile, servers,
title, paradigm and creation time in ``Conversation.imported_meta``, and its re-export reads
them from there. Ids inside recorded JSON (a turn's ``tools[].server_id``) are data of the
original installation and are kept verbatim.

``jsonl`` — one exchange a line in hash-chain order: the exchange's keys as above plus
``conversation_id``, ``turn_seq`` and ``step_seq`` (null for an exchange with no step).

The OTLP/JSON export is ``conversations.transcripts.otel``; choosing a format is
``conversations.transcripts.export``; reading a document back is ``conversations.transcripts.importing``.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import NotRequired, TypedDict, cast

from conversations.integrity import key_id, manifest_sign
from conversations.models import Conversation, Exchange, ModelProfile, Step, Turn
from conversations.typealias import JSONDict, JSONValue

FORMAT = "tool-call-inspector/transcript"
VERSION = 1
# The keys whose values are this installation's: its ids, and its keyed chain (an import is
# re-chained and re-sealed with the importer's key). They change on import, nothing else does.
ID_KEYS: dict[str, tuple[str, ...]] = {
    "conversation": ("id", "integrity"),
    "turn": ("id", "seal", "seal_steps"),
    "step": ("id", "parent"),
    "exchange": ("id", "chain_version", "prev_hash", "hash"),
}


# --- the document ------------------------------------------------------------------------------


class ProfileDoc(TypedDict):
    name: str
    provider: str
    model: str
    base_url: str
    demo: bool


class ServerDoc(TypedDict):
    name: str
    transport: str


class IntegrityDoc(TypedDict):
    """The conversation's anchor (``conversations.integrity``), the id of the key it is under,
    and the export's signature (``integrity.manifest_sign``)."""

    key_id: str
    turns: int
    head: str
    anchor: str
    signature: NotRequired[JSONDict]


class ConversationDoc(TypedDict):
    id: str
    title: str
    owner: str
    model_profile: ProfileDoc
    paradigm: str
    tool_choice: str
    tool_choice_name: str
    servers: list[ServerDoc]
    created_at: str
    integrity: NotRequired[IntegrityDoc]


class ExchangeDoc(TypedDict):
    id: int
    seq: int
    channel: str
    direction: str
    label: str
    server: str | None
    jsonrpc_id: str
    status: str
    error: str
    started_at: str
    duration_ms: float | None
    request_headers: JSONValue
    request_body: str
    response_headers: JSONValue
    response_body: str
    chain_version: NotRequired[int]
    prev_hash: str
    hash: str


class StepDoc(TypedDict):
    id: int
    parent: int | None
    seq: int
    kind: str
    status: str
    title: str
    prompt: str
    prompt_exact: bool
    prompt_source: str
    tokens: JSONValue
    usage: JSONValue
    text: str
    calls: JSONValue
    diagnostics: JSONValue
    server: str | None
    tool_name: str
    arguments: JSONValue
    result: JSONValue
    is_error: bool
    error: str
    started_at: str
    finished_at: str | None
    exchanges: list[ExchangeDoc]


class TurnDoc(TypedDict):
    id: int
    seq: int
    question: str
    status: str
    answer: str
    error: str
    paradigm: str
    tool_choice: str
    tool_choice_name: str
    model: str
    tools: JSONValue
    transcript: JSONValue
    created_at: str
    started_at: str | None
    finished_at: str | None
    seal: NotRequired[str]
    seal_steps: NotRequired[JSONValue]
    steps: list[StepDoc]
    exchanges: list[ExchangeDoc]


class TranscriptDoc(TypedDict):
    format: str
    version: int
    conversation: ConversationDoc
    turns: list[TurnDoc]


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _profile_doc(profile: ModelProfile) -> ProfileDoc:
    return {
        "name": profile.name,
        "provider": profile.provider,
        "model": profile.model,
        "base_url": profile.base_url,
        "demo": profile.is_demo,
    }


def _conversation_doc(conversation: Conversation, *, signed: bool) -> ConversationDoc:
    """The conversation's own block; an imported conversation's comes from ``imported_meta``."""
    live = _live_conversation_doc(conversation, signed=signed)
    meta = conversation.imported_meta
    if not isinstance(meta, dict):
        return live
    kept = {key: meta[key] for key in live if key not in ID_KEYS["conversation"] and key in meta}
    return cast(ConversationDoc, {**live, **kept})


def _live_conversation_doc(conversation: Conversation, *, signed: bool) -> ConversationDoc:
    return {
        "id": str(conversation.public_id),
        "title": conversation.title,
        "owner": conversation.owner.get_username(),
        "model_profile": _profile_doc(conversation.model_profile),
        "paradigm": conversation.paradigm,
        "tool_choice": conversation.tool_choice,
        "tool_choice_name": conversation.tool_choice_name,
        "servers": [
            {"name": server.name, "transport": server.transport}
            for server in conversation.servers.order_by("name")
        ],
        "created_at": conversation.created_at.isoformat(),
        "integrity": _integrity_doc(conversation, signed=signed),
    }


def _integrity_doc(conversation: Conversation, *, signed: bool) -> IntegrityDoc:
    """The anchor as stored now (a turn sealed since ``conversation`` was read moved it), and
    with ``signed`` the export's signature (it reads every record again: the json export only)."""
    turns, head, anchor = Conversation.objects.values_list("chain_turns", "chain_head", "chain_anchor").get(
        pk=conversation.pk
    )
    doc: IntegrityDoc = {"key_id": key_id(), "turns": turns, "head": head, "anchor": anchor}
    if signed:
        doc["signature"] = cast(JSONDict, manifest_sign(conversation=conversation))
    return doc


def _exchange_doc(exchange: Exchange) -> ExchangeDoc:
    return {
        "id": exchange.pk,
        "seq": exchange.seq,
        "channel": exchange.channel,
        "direction": exchange.direction,
        "label": exchange.label,
        "server": exchange.server.name if exchange.server else (exchange.server_name or None),
        "jsonrpc_id": exchange.jsonrpc_id,
        "status": exchange.status,
        "error": exchange.error,
        "started_at": exchange.started_at.isoformat(),
        "duration_ms": exchange.duration_ms,
        "request_headers": exchange.request_headers,
        "request_body": exchange.request_body,
        "response_headers": exchange.response_headers,
        "response_body": exchange.response_body,
        "chain_version": exchange.chain_version,
        "prev_hash": exchange.prev_hash,
        "hash": exchange.hash,
    }


def _step_doc(step: Step, exchanges: list[ExchangeDoc]) -> StepDoc:
    return {
        "id": step.pk,
        "parent": step.parent_id,
        "seq": step.seq,
        "kind": step.kind,
        "status": step.status,
        "title": step.title,
        "prompt": step.prompt,
        "prompt_exact": step.prompt_exact,
        "prompt_source": step.prompt_source,
        "tokens": step.tokens,
        "usage": step.usage,
        "text": step.text,
        "calls": step.calls,
        "diagnostics": step.diagnostics,
        "server": step.server.name if step.server else (step.server_name or None),
        "tool_name": step.tool_name,
        "arguments": step.arguments,
        "result": step.result,
        "is_error": step.is_error,
        "error": step.error,
        "started_at": step.started_at.isoformat(),
        "finished_at": _iso(step.finished_at),
        "exchanges": exchanges,
    }


def _turn_doc(turn: Turn, steps: list[StepDoc], exchanges: list[ExchangeDoc]) -> TurnDoc:
    return {
        "id": turn.pk,
        "seq": turn.seq,
        "question": turn.question,
        "status": turn.status,
        "answer": turn.answer,
        "error": turn.error,
        "paradigm": turn.paradigm,
        "tool_choice": turn.tool_choice,
        "tool_choice_name": turn.tool_choice_name,
        "model": turn.model_name,
        "tools": turn.tools,
        "transcript": turn.transcript,
        "created_at": turn.created_at.isoformat(),
        "started_at": _iso(turn.started_at),
        "finished_at": _iso(turn.finished_at),
        "seal": turn.seal,
        "seal_steps": turn.seal_steps,
        "steps": steps,
        "exchanges": exchanges,
    }


def transcript_document(*, conversation: Conversation, signed: bool = True) -> TranscriptDoc:
    """The ``json`` export as a structure (three queries for the rows, whatever their number;
    ``signed`` adds the signature, which reads them again)."""
    by_step: dict[int, list[ExchangeDoc]] = {}
    by_turn: dict[int, list[ExchangeDoc]] = {}
    exchanges = (
        Exchange.objects.filter(turn__conversation=conversation)
        .select_related("server")
        .order_by("seq", "id")
    )
    for exchange in exchanges:
        doc = _exchange_doc(exchange)
        if exchange.step_id is not None:
            by_step.setdefault(exchange.step_id, []).append(doc)
        elif exchange.turn_id is not None:
            by_turn.setdefault(exchange.turn_id, []).append(doc)
    steps: dict[int, list[StepDoc]] = {}
    rows = Step.objects.filter(turn__conversation=conversation).select_related("server").order_by("seq")
    for step in rows:
        steps.setdefault(step.turn_id, []).append(_step_doc(step, by_step.get(step.pk, [])))
    return {
        "format": FORMAT,
        "version": VERSION,
        "conversation": _conversation_doc(conversation, signed=signed),
        "turns": [
            _turn_doc(turn, steps.get(turn.pk, []), by_turn.get(turn.pk, []))
            for turn in conversation.turns.order_by("seq")
        ],
    }


def dumps(value: object) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True) + "\n"


def export_json(document: TranscriptDoc) -> str:
    return dumps(document)


def chain_order(turn: TurnDoc) -> list[tuple[int | None, ExchangeDoc]]:
    """A turn's exchanges with their step's seq, in the hash chain's order (seq, then id)."""
    pairs: list[tuple[int | None, ExchangeDoc]] = [(None, e) for e in turn["exchanges"]]
    pairs.extend((step["seq"], e) for step in turn["steps"] for e in step["exchanges"])
    return sorted(pairs, key=lambda pair: (pair[1]["seq"], pair[1]["id"]))


def export_jsonl(document: TranscriptDoc) -> str:
    conversation_id = document["conversation"]["id"]
    lines = [
        json.dumps(
            {"conversation_id": conversation_id, "turn_seq": turn["seq"], "step_seq": step_seq, **exchange},
            ensure_ascii=False,
            sort_keys=True,
            separators=(",", ":"),
        )
        for turn in document["turns"]
        for step_seq, exchange in chain_order(turn)
    ]
    return "".join(line + "\n" for line in lines)
