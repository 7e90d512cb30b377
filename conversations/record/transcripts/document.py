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

from django.db.models import Count, F, Q, Subquery, Window
from django.db.models.functions import RowNumber

from conversations.models import Conversation, Exchange, Step, Turn
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


def transcript_document(
    *, conversation: Conversation, signed: bool = True, steps_per_turn: int | None = None
) -> TranscriptDoc:
    """The transcript document of ``conversation``: the ``json`` export, the API's answer and
    what ``ask --json`` prints (three queries for the rows, whatever their number; ``signed``
    adds the export's signature, which reads them again).

    ``steps_per_turn`` (the API's): a turn of more steps holds only its first ones, and
    ``steps_count`` says how many it has (``turn_steps_page`` gives the next ones); neither
    they nor their exchanges are read."""
    steps_read = Step.objects.filter(turn__conversation=conversation)
    exchanges_read = Exchange.objects.filter(turn__conversation=conversation)
    counts: dict[int, int] = {}
    if steps_per_turn is not None:
        counts = dict(
            steps_read.order_by().values("turn_id").annotate(n=Count("pk")).values_list("turn_id", "n")
        )
        long_turns = [turn_id for turn_id, n in counts.items() if n > steps_per_turn]
        if long_turns:
            first = Subquery(
                Step.objects.filter(turn_id__in=long_turns)
                .annotate(place=Window(RowNumber(), partition_by=[F("turn_id")], order_by=F("seq").asc()))
                .filter(place__lte=steps_per_turn)
                .values("pk")
            )
            steps_read = steps_read.filter(~Q(turn_id__in=long_turns) | Q(pk__in=first))
            exchanges_read = exchanges_read.filter(
                Q(step__isnull=True) | ~Q(turn_id__in=long_turns) | Q(step_id__in=first)
            )
    by_step: dict[int, list[ExchangeDoc]] = {}
    by_turn: dict[int, list[ExchangeDoc]] = {}
    exchanges = exchanges_read.select_related("server").order_by("seq", "id")
    for exchange in exchanges:
        doc = exchange_doc(exchange)
        if exchange.step_id is not None:
            by_step.setdefault(exchange.step_id, []).append(doc)
        elif exchange.turn_id is not None:
            by_turn.setdefault(exchange.turn_id, []).append(doc)
    steps: dict[int, list[StepDoc]] = {}
    for step in steps_read.select_related("server").order_by("seq"):
        steps.setdefault(step.turn_id, []).append(step_doc(step, by_step.get(step.pk, [])))
    for turn_steps in steps.values():
        calls_linked(turn_steps)
    turns: list[TurnDoc] = []
    for turn in conversation.turns.order_by("seq"):
        turn_block = turn_doc(turn, steps.get(turn.pk, []), by_turn.get(turn.pk, []))
        if counts.get(turn.pk, 0) > len(turn_block["steps"]):
            turn_block["steps_count"] = counts[turn.pk]
        turns.append(turn_block)
    return {
        "format": FORMAT,
        "version": VERSION,
        "conversation": _conversation_doc(conversation, signed=signed),
        "turns": turns,
    }


def turn_steps_page(*, turn: Turn, after: int, limit: int) -> list[StepDoc]:
    """The steps of ``turn`` numbered after ``after``, at most ``limit`` of them, in order, each
    with its exchanges, as the transcript document holds them (two queries)."""
    steps = list(
        Step.objects.filter(turn=turn, seq__gt=after).select_related("server").order_by("seq")[:limit]
    )
    by_step: dict[int, list[ExchangeDoc]] = {}
    exchanges = Exchange.objects.filter(step__in=[step.pk for step in steps]).select_related("server")
    for exchange in exchanges.order_by("seq", "id"):
        if exchange.step_id is not None:
            by_step.setdefault(exchange.step_id, []).append(exchange_doc(exchange))
    docs = [step_doc(step, by_step.get(step.pk, [])) for step in steps]
    # Linked within the page: a call whose tool step falls on another page is left unlinked here.
    calls_linked(docs)
    return docs


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
