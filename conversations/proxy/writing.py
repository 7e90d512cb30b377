"""The proxy's write: a record's steps and exchanges, the links they make, the turn sealed.

One transaction per record (a model call, or one MCP exchange group): the session's row is
locked, the steps are inserted, their exchanges made by the recorder's own ``exchange_rows``
(redacted, made storable, cut to size) and linked into the conversation's hash chain, the
links made (``linking``), and the turn written and sealed by the recorder's ``turn_end_save`` —
so every model call and every MCP exchange group leaves a sealed turn and an anchored
conversation behind, and a failure leaves nothing. The doorbells ring after the commit.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction

from conversations import events
from conversations.escaping import storable_json, storable_text
from conversations.loop.wire import WireExchange
from conversations.models import Exchange, Step, Turn
from conversations.proxy.linking import link_turn
from conversations.proxy.models import ProxySession
from conversations.record.exchanges import exchange_rows
from conversations.record.integrity import GENESIS, Grown, exchange_digest, integrity_key, turn_seal
from conversations.record.recording import turn_end_save
from conversations.record.starting import starting_points
from conversations.record.store import Batch, model_row, record_store
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
    session's row is locked. Returns the exchange rows written, in order.

    Where they go on (the last seqs, the chain's head, on PostgreSQL the new rows' ids) is read
    in one query, and the steps and exchanges are then written together (elsewhere the steps
    first, for the ids the database gives them)."""
    start = _starting_points(turn, steps=len(steps), exchanges=sum(len(new.records) for new in steps))
    # The chain runs in turn order: a record of an earlier turn than the latest (stored late)
    # follows that turn's last exchange, and the turns after it are chained on again below.
    head = start.head or GENESIS
    key = integrity_key()
    rows = [
        model_row(
            Step,
            {
                "id": start.step_ids[offset - 1] if start.step_ids else None,
                "turn_id": turn.pk,
                "seq": start.last_step + offset,
                "kind": new.kind,
                "started_at": new.started_at,
                "updated_at": new.finished_at or new.started_at,
                "finished_at": new.finished_at,
                **{
                    name: _field_value(name, value, redact)
                    for name, value in {"title": new.title, **new.fields}.items()
                },
            },
        )
        for offset, new in enumerate(steps, start=1)
    ]
    written = Batch()
    if start.step_ids:
        # Ids the tables' sequences gave ahead: the steps go out with their exchanges, one write.
        written.insert(rows)
    else:
        inserted = Batch()
        inserted.insert(rows)
        record_store().write(inserted)
    exchanges: list[Exchange] = []
    seq = start.last_exchange + 1
    for row, new in zip(rows, steps, strict=True):
        made = exchange_rows(
            new.records,
            turn_id=turn.pk,
            conversation_id=turn.conversation_id,
            step_id=row.pk,
            redact=redact,
            first_seq=seq,
            proxied=True,
        )
        seq += len(made)
        for exchange in made:
            exchange.prev_hash = head
            exchange.hash = head = exchange_digest(exchange, turn_seq=turn.seq, previous=head, key=key)
        exchanges.extend(made)
    if start.exchange_ids:
        for exchange, pk in zip(exchanges, start.exchange_ids, strict=True):
            exchange.pk = pk
    written.insert(exchanges)
    record_store().write(written)
    # The links read the new rows back, so they are made once those are written.
    changed = [row.pk for row in rows]
    # The page row of each changed step, where known without a read (``_announce``).
    parents: dict[int, int | None] = {row.pk: row.parent_id for row in rows}
    linked = Batch()
    for pk, values in link_turn(turn, tools=session.tools):
        linked.update(Step, pk, values)
        changed.append(pk)
        if "parent_id" in values:
            parents[pk] = values["parent_id"]
    if linked:
        record_store().write(linked)
    turn.finished_at = max(
        [
            turn.finished_at or turn.started_at or turn.created_at,
            *(s.finished_at or s.started_at for s in steps),
        ]
    )
    if turn.conversation_id == session.conversation_id:
        # One read of the conversation for the seal (``turn_seal``) and the doorbells.
        turn.conversation = session.conversation
    # The turn's seal covered its steps up to ``last_step``: only what this write added or
    # changed is read back for the new one.
    turn_end_save(turn=turn, redact=redact, grown=Grown(sealed=start.last_step, changed=changed))
    if start.later:
        _rechain_after(turn, head, key)
    transaction.on_commit(functools.partial(_announce, session, turn, changed, parents))
    return exchanges


@dataclass(frozen=True)
class _Start:
    """Where a write into a turn goes on: its last step's and exchange's seq (0: none), the hash
    its exchanges chain on from and, on PostgreSQL, the ids of the new
    steps and exchanges (empty elsewhere: the database gives them as they are written)."""

    last_step: int
    last_exchange: int
    head: str | None
    # Whether the conversation has turns after this one (their chain goes on from this one's).
    later: bool
    step_ids: list[int]
    exchange_ids: list[int]


def _starting_points(turn: Turn, *, steps: int, exchanges: int) -> _Start:
    """``_Start`` for ``steps`` new steps and ``exchanges`` new exchanges of ``turn``, in one
    query (``record.starting``). The head is the hash of the last exchange, in chain order, of
    the turn and the turns before it."""
    found = starting_points(turn, head_up_to_turn=True, later=True, step_ids=steps, exchange_ids=exchanges)
    return _Start(
        found["last_step"],
        found["last_exchange"],
        found["head"],
        found["later"],
        found["step_ids"],
        found["exchange_ids"],
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


def _announce(session: ProxySession, turn: Turn, changed: list[int], known: dict[int, int | None]) -> None:
    """Ring the page's doorbells for the written rows (a tool step's row is its parent's).
    ``known``: the parents of the steps this write made or moved; the others' are read."""
    conversation_id = session.conversation.public_id
    parents = dict(known)
    unknown = [pk for pk in changed if pk not in known]
    if unknown:
        parents.update(Step.objects.filter(pk__in=unknown).values_list("pk", "parent_id"))
    events.emit(events.TurnChanged(conversation_id=conversation_id, turn_id=turn.pk))
    for pk in dict.fromkeys(parents.get(pk) or pk for pk in changed):
        events.emit(events.StepChanged(conversation_id=conversation_id, turn_id=turn.pk, step_id=pk))
