"""The transcript document, produced here for every reader — the ``json`` export, the REST API
(``GET /api/conversations/<uuid>``) and ``ask --json`` — and its JSON and JSON Lines texts.
Its types, and what each stored row shows in it, are ``conversations.record.transcripts.fields``.

``json`` — the whole record, enough to rebuild the conversation elsewhere::

    {"format": "tool-call-inspector/transcript", "version": 2,
     "conversation": {id, title, owner, model_profile: {name, provider, model, base_url, demo},
                      paradigm, tool_choice, tool_choice_name, servers: [{name, transport}],
                      created_at, integrity: {key_id, turns, head, anchor, signature}},
     "turns": [{id, seq, question, status, answer, error, paradigm, tool_choice,
                tool_choice_name, model, tools, transcript, created_at, started_at, finished_at,
                seal, seal_steps, seal_rule,
                steps: [{id, parent, seq, kind, status, title, prompt, prompt_exact,
                         prompt_source, tokens, usage, text, calls: [CALL, ...], diagnostics, server,
                         tool_name, arguments, result, is_error, error, started_at,
                         finished_at, exchanges: [EXCHANGE, ...]}],
                exchanges: [EXCHANGE, ...]}]}          # the turn's exchanges that have no step
    CALL = {id, name, arguments_text, arguments, ..., executed_exchange, linked_by}
    EXCHANGE = {id, seq, channel, direction, label, server, jsonrpc_id, status, error,
                started_at, duration_ms, request_headers, request_body, response_headers,
                response_body, chain_version, prev_hash, hash}

Values are stored values, read as ``fields`` says (``server`` and ``jsonrpc_id``), but each
call of a model step also carries ``executed_exchange``, the id of the ``tools/call`` exchange
that ran it (null: none did), and ``linked_by``, how that is known (``"call_id"``,
``"arguments"`` or null: ``fields.calls_linked``; an import stores the calls without them). The document holds nothing volatile — no export time — and is written with
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

The OTLP/JSON export is ``conversations.record.transcripts.otel``; choosing a format is
``conversations.record.transcripts.export``; reading a document back is ``conversations.record.transcripts.importing``.
"""

from __future__ import annotations

import json
from typing import cast

from conversations.models import Conversation, Exchange, Step
from conversations.record.integrity import key_id, manifest_sign
from conversations.record.transcripts.fields import (
    FORMAT,
    ID_KEYS,
    VERSION,
    ConversationDoc,
    ExchangeDoc,
    IntegrityDoc,
    StepDoc,
    TranscriptDoc,
    TurnDoc,
    calls_linked,
    exchange_doc,
    profile_doc,
    step_doc,
    turn_doc,
)
from conversations.typealias import JSONDict


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
        "model_profile": profile_doc(conversation.model_profile),
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


def transcript_document(*, conversation: Conversation, signed: bool = True) -> TranscriptDoc:
    """The transcript document of ``conversation``: the ``json`` export, the API's answer and
    what ``ask --json`` prints (three queries for the rows, whatever their number; ``signed``
    adds the export's signature, which reads them again)."""
    by_step: dict[int, list[ExchangeDoc]] = {}
    by_turn: dict[int, list[ExchangeDoc]] = {}
    exchanges = (
        Exchange.objects.filter(turn__conversation=conversation)
        .select_related("server")
        .order_by("seq", "id")
    )
    for exchange in exchanges:
        doc = exchange_doc(exchange)
        if exchange.step_id is not None:
            by_step.setdefault(exchange.step_id, []).append(doc)
        elif exchange.turn_id is not None:
            by_turn.setdefault(exchange.turn_id, []).append(doc)
    steps: dict[int, list[StepDoc]] = {}
    rows = Step.objects.filter(turn__conversation=conversation).select_related("server").order_by("seq")
    for step in rows:
        steps.setdefault(step.turn_id, []).append(step_doc(step, by_step.get(step.pk, [])))
    for turn_steps in steps.values():
        calls_linked(turn_steps)
    return {
        "format": FORMAT,
        "version": VERSION,
        "conversation": _conversation_doc(conversation, signed=signed),
        "turns": [
            turn_doc(turn, steps.get(turn.pk, []), by_turn.get(turn.pk, []))
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
