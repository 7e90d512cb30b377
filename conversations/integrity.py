"""Tamper evidence: each conversation's exchanges form a hash chain.

Every record's hash covers its content and the previous record's hash, in conversation order
(turn number, then the exchange's position in the turn). Database ids are left out, so a
transcript exported and imported elsewhere still verifies.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from django.db.models import QuerySet

from conversations.models import Conversation, Exchange

GENESIS = "0" * 64


def exchange_digest(exchange: Exchange, *, turn_seq: int, previous: str) -> str:
    """The chain hash of one exchange given the hash before it."""
    content = {
        "turn": turn_seq,
        "seq": exchange.seq,
        "channel": exchange.channel,
        "direction": exchange.direction,
        "label": exchange.label,
        "jsonrpc_id": exchange.jsonrpc_id,
        "request_headers": exchange.request_headers,
        "request_body": exchange.request_body,
        "response_headers": exchange.response_headers,
        "response_body": exchange.response_body,
        "status": exchange.status,
        "error": exchange.error,
        "started_at": exchange.started_at.isoformat(),
        "duration_ms": exchange.duration_ms,
    }
    canonical = json.dumps(content, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(f"{previous}\n{canonical}".encode()).hexdigest()


def chain_head_query(conversation_id: int) -> QuerySet[Exchange, str]:
    """The hash of the conversation's latest exchange, as a query (at most one value): usable
    as a subquery, so a turn's recorder reads it with its other starting points at once."""
    return (
        Exchange.objects.filter(turn__conversation_id=conversation_id)
        .order_by("-turn__seq", "-seq", "-id")
        .values_list("hash", flat=True)[:1]
    )


@dataclass
class ChainReport:
    intact: bool
    checked: int
    broken_exchange_id: int | None = None
    reason: str = ""


def conversation_verify(*, conversation: Conversation) -> ChainReport:
    """Recompute the chain; report the first record whose stored hash does not match."""
    previous = GENESIS
    checked = 0
    rows = (
        Exchange.objects.filter(turn__conversation=conversation)
        .select_related("turn")
        .order_by("turn__seq", "seq", "id")
    )
    for exchange in rows.iterator(chunk_size=500):
        assert exchange.turn is not None
        expected = exchange_digest(exchange, turn_seq=exchange.turn.seq, previous=previous)
        checked += 1
        if exchange.prev_hash != previous:
            return ChainReport(False, checked, exchange.pk, "its link to the previous record does not match")
        if exchange.hash != expected:
            return ChainReport(False, checked, exchange.pk, "its content does not match its hash")
        previous = exchange.hash
    return ChainReport(True, checked)
