"""The proxy's write: a record's steps and exchanges, the links they make, the turn sealed.

One transaction per record (a model call, or one MCP exchange group): the session's row is
locked, the steps are inserted, their exchanges made by the recorder's own ``exchange_rows``
(redacted, made storable, cut to size) and linked into the conversation's hash chain, the
links made (``linking``), and the turn written and sealed by the recorder's ``turn_end_save`` —
so every model call and every MCP exchange group leaves a sealed turn and an anchored
conversation behind, and a failure leaves nothing. The doorbells ring after the commit.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Max

from conversations import events
from conversations.escaping import storable_json, storable_text
from conversations.loop.wire import WireExchange, safe_headers
from conversations.models import Exchange, Step, Turn
from conversations.proxy.linking import link_turn
from conversations.proxy.models import ProxySession
from conversations.record.exchanges import exchange_rows
from conversations.record.integrity import GENESIS, Grown, exchange_digest, integrity_key, turn_seal
from conversations.record.recording import turn_end_save
from conversations.record.store import Batch, record_store
from conversations.redaction import Redactor

# Step fields that may carry model or tool text (and so secrets): as the recorder's.
_REDACTED = {"title", "prompt", "text", "calls", "diagnostics", "arguments", "result", "error"}


@dataclass
class NewStep:
    """A step to insert, with the captured records that belong to it."""

    kind: str
    title: str
    started_at: datetime
    finished_at: datetime | None
    records: Sequence[WireExchange]
    fields: dict[str, Any] = field(default_factory=dict)


def stored_record(record: WireExchange, redact: Redactor) -> WireExchange:
    """A copy of ``record`` whose headers have every credential-named value masked and whose
    label and error are redacted (``exchange_rows`` redacts the bodies and header values)."""
    return dataclasses.replace(
        record,
        label=redact.text(record.label),
        request_headers=safe_headers(record.request_headers),
        response_headers=safe_headers(record.response_headers),
    )


def _field_value(name: str, value: Any, redact: Redactor) -> Any:
    if isinstance(value, str):
        value = storable_text(value)[0]
    elif isinstance(value, dict | list | float):
        value = storable_json(value)[0]
    if name in _REDACTED:
        value = redact.json(value)
    if name == "title":
        value = str(value)[:300]
    elif name == "tool_name":
        value = str(value)[:200]
    return value


def write_steps(
    *, session: ProxySession, turn: Turn, steps: Sequence[NewStep], redact: Redactor
) -> list[Exchange]:
    """Insert ``steps`` and their exchanges into ``turn`` (the latest of the session), link what
    can be linked, write the turn and seal it. Inside the caller's transaction, after the
    session's row is locked. Returns the exchange rows written, in order."""
    last_step = Step.objects.filter(turn=turn).aggregate(last=Max("seq"))["last"] or 0
    last_exchange = Exchange.objects.filter(turn=turn).aggregate(last=Max("seq"))["last"] or 0
    # The chain runs in turn order: a record of an earlier turn than the latest (stored late)
    # follows that turn's last exchange, and the turns after it are chained on again below.
    head = _head_through(turn) or GENESIS
    key = integrity_key()
    rows = [
        Step(
            turn_id=turn.pk,
            seq=last_step + offset,
            kind=new.kind,
            started_at=new.started_at,
            updated_at=new.finished_at or new.started_at,
            finished_at=new.finished_at,
            **{
                name: _field_value(name, value, redact)
                for name, value in {"title": new.title, **new.fields}.items()
            },
        )
        for offset, new in enumerate(steps, start=1)
    ]
    inserted = Batch()
    inserted.insert(rows)
    record_store().write(inserted)
    exchanges: list[Exchange] = []
    seq = last_exchange + 1
    for row, new in zip(rows, steps, strict=True):
        made = exchange_rows(
            [stored_record(record, redact) for record in new.records],
            turn_id=turn.pk,
            conversation_id=turn.conversation_id,
            step_id=row.pk,
            redact=redact,
            first_seq=seq,
        )
        seq += len(made)
        for exchange in made:
            exchange.prev_hash = head
            exchange.hash = head = exchange_digest(exchange, turn_seq=turn.seq, previous=head, key=key)
        exchanges.extend(made)
    written = Batch()
    written.insert(exchanges)
    record_store().write(written)
    # The links read the new rows back, so they are made once those are written.
    changed = [row.pk for row in rows]
    linked = Batch()
    for pk, values in link_turn(turn, tools=session.tools):
        linked.update(Step, pk, values)
        changed.append(pk)
    if linked:
        record_store().write(linked)
    turn.finished_at = max(
        [
            turn.finished_at or turn.started_at or turn.created_at,
            *(s.finished_at or s.started_at for s in steps),
        ]
    )
    # The turn's seal covered its steps up to ``last_step``: only what this write added or
    # changed is read back for the new one.
    turn_end_save(turn=turn, redact=redact, grown=Grown(sealed=last_step, changed=changed))
    _rechain_after(turn, head, key)
    transaction.on_commit(functools.partial(_announce, session, turn, changed))
    return exchanges


def _head_through(turn: Turn) -> str | None:
    """The hash of the last exchange of ``turn`` and the turns before it."""
    return (
        Exchange.objects.filter(turn__conversation_id=turn.conversation_id, turn__seq__lte=turn.seq)
        .order_by("-turn__seq", "-seq", "-id")
        .values_list("hash", flat=True)
        .first()
    )


def _rechain_after(turn: Turn, head: str, key: bytes) -> None:
    """Chain the exchanges of the turns after ``turn`` on from ``head`` (its last exchange's
    hash, which a record stored late changed) and seal those turns again, in order. Nothing to
    do for the session's latest turn, the usual case."""
    later = list(Turn.objects.filter(conversation_id=turn.conversation_id, seq__gt=turn.seq).order_by("seq"))
    if not later:
        return
    rechained = Batch()
    for after in later:
        for row in Exchange.objects.filter(turn=after).order_by("seq", "id"):
            row.prev_hash = head
            row.hash = head = exchange_digest(row, turn_seq=after.seq, previous=head, key=key)
            rechained.update(Exchange, row.pk, {"prev_hash": row.prev_hash, "hash": row.hash})
    if rechained:
        record_store().write(rechained)
    for after in later:
        if after.seal:
            after.conversation = turn.conversation
            turn_seal(turn=after)


def _announce(session: ProxySession, turn: Turn, changed: list[int]) -> None:
    """Ring the page's doorbells for the written rows (a tool step's row is its parent's)."""
    conversation_id = session.conversation.public_id
    parents = dict(Step.objects.filter(pk__in=changed).values_list("pk", "parent_id"))
    events.emit(events.TurnChanged(conversation_id=conversation_id, turn_id=turn.pk))
    for pk in dict.fromkeys(parents.get(pk) or pk for pk in changed):
        events.emit(events.StepChanged(conversation_id=conversation_id, turn_id=turn.pk, step_id=pk))
