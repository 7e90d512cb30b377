"""The recorder: persists each step and exchange of a running turn, then rings the doorbell.

A step's updates (its reply, its parsed calls, its close) are kept until the recorder next opens
a step — the loop opens one before every model or tool call — or is flushed, and then go out
with that step as one batch: nothing the loop saw is held while it waits on the outside world.

On PostgreSQL a batch is handed to the process's record writer (``conversations.record.writer``),
a thread that makes its rows (redacted, linked into the hash chain) and commits batches in the
order they were made (several turns' batches in one transaction when they queue up) through the
record store (``conversations.record.store``), and rings each batch's doorbells only after its
commit: persist, then publish. While it waits on the database, a second thread makes
the rows of the batches queued behind. The loop does not wait for the database; it goes on to
the model or the tool while its last step is written. A new
step's id comes from ids the recorder reserves from the table's sequence in blocks, so opening a
step needs no round trip. ``drain`` waits for everything handed over to be committed, and raises
the error of a write that failed; the runner drains before it writes the turn's end, so a turn
never ends before its steps are stored, and a failed write fails the turn. Where the rows cannot
be written from another connection (SQLite's single writer, or a caller's open transaction that
the writer could not see into), each batch is written inline instead, by the same code.

While batches keep coming (the last write ended less than ``RECORD_WRITE_LINGER_SECONDS``
ago) the writer waits that long for more before it writes, so a fast loop's batches go out a few
at a time instead of one each; a batch after a quiet spell (a turn's first) goes at once, and so
does everything as soon as a turn drains or the queue is long.

Those transactions commit asynchronously on PostgreSQL (``synchronous_commit = off``): the rows
are visible to every reader at once, but the wait for the disk is skipped. A crash of the
database server (not of the worker) can lose the last fraction of a second of steps; the turn's
final status is written with an ordinary commit, which makes everything before it durable too.
Between writes connections go back to the pool, so a turn waiting on a model holds none.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from conversations import events
from conversations.escaping import storable_json, storable_text
from conversations.loop.providers.streaming import SNAPSHOT_TAIL_CHARS, DeltaCallback, PartialReply, throttled
from conversations.loop.wire import WireExchange
from conversations.models import Exchange, Step, Turn
from conversations.record.connections import BIG_RECORD_CHARS
from conversations.record.exchanges import exchange_rows, release_connection, request_search_span
from conversations.record.integrity import (
    GENESIS,
    Grown,
    exchange_digest,
    integrity_key,
    turn_seal,
)
from conversations.record.starting import NEXT_IDS, next_ids_params, starting_points
from conversations.record.store import Batch, FenceRefused, model_row, record_store
from conversations.record.writer import process_writer
from conversations.redaction import Redactor
from conversations.secret_sources import active_redactor

logger = logging.getLogger(__name__)

_STEP_FIELDS = {
    "kind",
    "title",
    "prompt",
    "prompt_exact",
    "prompt_source",
    "tokens",
    "usage",
    "text",
    "calls",
    "diagnostics",
    "tool_name",
    "arguments",
    "result",
    "is_error",
    "error",
    "server_id",
    "server_name",
    "status",
    "finished_at",
}


# A streamed reply is shown at most this often, and only its last characters (each snapshot
# carries the end of everything so far: ``SNAPSHOT_TAIL_CHARS``).
PARTIAL_INTERVAL_SECONDS = 0.05
PARTIAL_TAIL_CHARS = 8000
# The characters keys, tokens and e-mail addresses are made of (see ``redaction``).
_TOKEN_CHARACTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-./+=:@~"

# Step fields that may carry model or tool text (and so secrets).
_REDACTED_FIELDS = {"title", "prompt", "text", "calls", "diagnostics", "arguments", "result", "error"}
# Turn fields that may (the question, the tool list a server sent, what the model answered).
_REDACTED_TURN_FIELDS = ("question", "answer", "error", "tools", "transcript")


def index_last_request_whole(turn_id: int) -> None:
    """Once a turn has ended, have full-text search index its last request indexed only in part
    whole (it holds the whole history the model saw), so that words spread over the history
    still match one exchange. One ``UPDATE`` (plain SQL: it runs at the end of every turn);
    nothing to do where no request has a span."""
    table = connection.ops.quote_name(Exchange._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET search_start = NULL, search_length = NULL WHERE id = ("
            f"SELECT id FROM {table} WHERE turn_id = %s AND search_start IS NOT NULL"
            " ORDER BY seq DESC, id DESC LIMIT 1)",
            [turn_id],
        )


def turn_redacted(values: dict[str, Any], redact: Redactor) -> dict[str, Any]:
    """Turn field values as they may be stored: every text field storable (``_storable_value``)
    and redacted."""
    return {
        name: redact.json(_storable_value(value)) if name in _REDACTED_TURN_FIELDS else value
        for name, value in values.items()
    }


def _storable_value(value: Any) -> Any:
    """A text or JSON value in a form every database stores (``conversations.escaping``)."""
    if isinstance(value, str):
        return storable_text(value)[0]
    if isinstance(value, dict | list | float):
        return storable_json(value)[0]
    return value


def turn_end_save(
    *,
    turn: Turn,
    redact: Redactor | None = None,
    update_fields: Sequence[str] | None = None,
    if_running: bool = False,
    claim: int | None = None,
    grown: Grown | None = None,
) -> str | None:
    """Write an ended turn (an ordinary, synchronous commit), its texts redacted, have search
    index its last request whole (``index_last_request_whole``) and seal it
    (``integrity.turn_seal``), all in one transaction. Every step and exchange of the turn must be
    committed before (``TurnRecorder.drain``): the seal covers what is stored.

    ``update_fields``: only these fields are written (and redacted). ``if_running`` (its runner):
    only while the turn still runs in the database, by one conditional ``UPDATE`` that leaves the
    lifecycle fields other processes write (heartbeat, cancel request, runner) as they are; if
    another process ended the turn meanwhile (its heartbeat was lost) nothing is written, and
    that ending's status is returned (``missing``: deleted). ``claim`` (with ``if_running``):
    only while the turn runs under this claim (``store``'s fencing), else ``reclaimed``.
    ``grown``: see ``integrity.turn_seal``. Returns None once written.
    """
    redact = redact or active_redactor()
    names = (
        _REDACTED_TURN_FIELDS
        if update_fields is None
        else [n for n in update_fields if n in _REDACTED_TURN_FIELDS]
    )
    for name, value in turn_redacted({name: getattr(turn, name) for name in names}, redact).items():
        setattr(turn, name, value)
    with transaction.atomic():
        if if_running:
            ended = _ended_elsewhere(turn, claim, update_fields)
            if ended is not None:
                return ended
        else:
            turn.save(update_fields=update_fields)
        index_last_request_whole(turn.pk)
        # With no ``update_fields`` every field the seal covers was just written from ``turn``.
        turn_seal(turn=turn, grown=grown, written=update_fields is None)
    return None


# What other processes write to a running turn (its lifecycle), and what its seal writes after.
_NOT_ENDED = {"heartbeat_at", "cancel_requested_at", "cancel_requested_by", "runner", "claim"}
_NOT_ENDED |= {"seal", "seal_steps", "seal_rule", "usage_total", "tools_called"}


def _ended_elsewhere(turn: Turn, claim: int | None, update_fields: Sequence[str] | None) -> str | None:
    """Write the running turn's end (``update_fields``, or its every field but its id, its links and
    ``_NOT_ENDED``) by one ``UPDATE``, which locks its row, while it runs (under ``claim``); else
    the status another process ended it with."""
    turn.updated_at = timezone.now()  # the field's ``auto_now``, which ``update`` does not apply
    if update_fields is None:
        fields = Turn._meta.concrete_fields
        update_fields = [
            f.name for f in fields if not (f.primary_key or f.is_relation or f.name in _NOT_ENDED)
        ]
    running = Turn.objects.filter(pk=turn.pk, status=Turn.Status.RUNNING)
    if claim is not None:
        running = running.filter(claim=claim)
    if running.update(**{name: getattr(turn, name) for name in update_fields}):
        return None
    # Not written: why, as the row is now (running, but not under ``claim``: claimed again).
    status = Turn.objects.filter(pk=turn.pk).values_list("status", flat=True).first()
    if status is None:
        return "missing"
    return "reclaimed" if status == Turn.Status.RUNNING else str(status)


# Step ids are reserved from the sequence this many at a time at first (with the turn's starting
# points), doubling up to the most.
_ID_BLOCK_FIRST = 8
_ID_BLOCK_MOST = 64
# Where notes about a step go until its id is known (only a step written inline has none yet).
_UNSAVED_STEP = -1


@dataclass
class _Opening:
    """A step as the loop opened it, before redaction (its row is made when the batch is)."""

    pk: int | None
    kind: str
    title: str
    parent: int | None
    seq: int
    at: datetime
    fields: dict[str, Any]
    # Fields worked out on the writer's side (the spliced prompt): the loop does not wait on them.
    computed: Callable[[], dict[str, Any]] | None


@dataclass
class _Batch:
    """What one write of a turn holds, taken off the recorder when it was made.

    The loop hands over what it saw as it saw it; ``prepare`` (on the writer's side, one batch
    at a time) works out the computed fields, redacts every text, cuts it to size and links the
    exchanges into the conversation's hash chain, in the order the batches were made.

    A value handed over is the loop's no longer: the batch keeps it until it is written (a JSON
    value with nothing to redact or escape is written as the very object the loop gave), so the
    loop never changes one in place afterwards; it makes a new one.
    """

    owner: TurnRecorder
    turn_values: dict[str, Any] = field(default_factory=dict)
    updates: dict[int, dict[str, Any]] = field(default_factory=dict)
    # Captured exchanges, by the step they belong to, with the turn seq of the first.
    records: list[tuple[int, Sequence[WireExchange], int]] = field(default_factory=list)
    opening: _Opening | None = None
    # The page rows whose doorbells ring once the batch is committed (a tool step's row is its
    # parent's); the new step's row is added when its id is known.
    rows: list[int] = field(default_factory=list)
    # Run after the commit instead of the doorbells: a streamed reply shown after its step exists.
    after: Callable[[], None] | None = None
    # Made by ``prepare``.
    step: Step | None = None
    exchanges: list[Exchange] = field(default_factory=list)
    prepared: bool = False
    # What stopped ``prepare``, if anything did (the batch is then dropped, as a failed write's).
    unprepared: BaseException | None = None

    @property
    def big(self) -> bool:
        """Whether a record of the batch is big enough that the connection writing it is not
        pooled again (``conversations.record.connections``)."""
        return any(_big(record) for _, records, _ in self.records for record in records)

    def prepare(self) -> None:
        """Make the rows, redacted (once: a batch retried after a failed write keeps its rows)."""
        if self.prepared:
            return
        self.prepared = True
        owner = self.owner
        self.turn_values = turn_redacted(self.turn_values, owner.redact)
        self.updates = {pk: owner._redacted(fields, step=pk) for pk, fields in self.updates.items()}
        for step_id, records, first_seq in self.records:
            rows = exchange_rows(
                records,
                turn_id=owner.turn.pk,
                conversation_id=owner.turn.conversation_id,
                step_id=step_id,
                redact=owner.redact,
                first_seq=first_seq,
            )
            for row in rows:
                row.prev_hash = owner._chain
                row.hash = owner._chain = exchange_digest(
                    row, turn_seq=owner.turn.seq, previous=owner._chain, key=owner._key
                )
                if owner._spans and row.channel == Exchange.Channel.LLM and row.request_body:
                    owner._index_span(row)
            self.exchanges.extend(rows)
        opening = self.opening
        if opening is not None:
            fields = dict(opening.fields)
            if opening.computed is not None:
                fields.update(_computed(opening.computed))
            self.step = model_row(
                Step,
                {
                    "id": opening.pk,
                    "turn_id": owner.turn.pk,
                    "parent_id": opening.parent,
                    "seq": opening.seq,
                    "kind": opening.kind,
                    "started_at": opening.at,
                    "updated_at": opening.at,
                    **owner._redacted({"title": opening.title, **fields}, step=opening.pk),
                },
            )

    def ready(self) -> None:
        """``prepare``, keeping its error for the writer to hand to the turn's loop (nothing a
        batch holds may stop the writer's threads)."""
        try:
            self.prepare()
        except BaseException as exc:
            logger.exception("could not prepare a batch of turn %s", self.owner.turn.pk)
            self.unprepared = exc

    def live(self) -> bool:
        """Whether this batch is still to be written (the writer's thread only, once the batch
        is prepared).

        After a failed write of its turn it is dropped (the step it opens is lost too) until the
        loop has heard of the error; after that, it is kept from naming the steps that were lost.
        """
        owner = self.owner
        if owner._write_error is not None:
            self.lose()
            return False
        self.ready()
        if self.unprepared is not None:  # handed to the turn's loop, like a failed write
            owner._write_error = self.unprepared
            self.lose()
            return False
        lost = owner._lost
        if lost:
            self.updates = {pk: fields for pk, fields in self.updates.items() if pk not in lost}
            self.rows = [row for row in self.rows if row not in lost]
            for exchange in self.exchanges:
                if exchange.step_id in lost:
                    exchange.step_id = None  # the raw record stays, with its turn
            if self.step is not None and self.step.parent_id in lost:
                self.step.parent_id = None
        return True

    def lose(self) -> None:
        if self.opening is not None and self.opening.pk is not None:
            self.owner._lost.add(self.opening.pk)

    @property
    def writes(self) -> bool:
        return bool(self.turn_values or self.updates or self.exchanges or self.step is not None)

    def publish(self) -> None:
        owner = self.owner
        if self.turn_values:
            owner.turn_changed()
        rows = self.rows
        if self.step is not None:
            rows = [*rows, self.step.parent_id or self.step.pk]
        for row in dict.fromkeys(rows):
            events.emit(
                events.StepChanged(conversation_id=owner.conversation_id, turn_id=owner.turn.pk, step_id=row)
            )
        if self.after is not None:
            self.after()


def _computed(compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """A step's computed fields; a failure is shown in the step instead of failing the write."""
    try:
        return compute()
    except Exception as exc:  # the record says what went wrong
        logger.exception("could not work out a step's computed fields")
        return {"prompt": f"[the inspector could not splice this prompt: {type(exc).__name__}: {exc}]"}


def _write(batches: Sequence[_Batch]) -> None:
    """Commit these batches in one transaction, in their order.

    A step opened and then updated within the same write is inserted with its updates applied;
    every other step update is one ``UPDATE`` per step, whatever number of batches it spans.
    """
    turn_values: dict[int, dict[str, Any]] = {}
    opened: dict[int, Step] = {}
    unsaved: list[Step] = []
    updates: dict[int, dict[str, Any]] = {}
    exchanges: list[Exchange] = []
    # The values a step opened in this write had before its updates were applied to it: should
    # the write fail, they are put back, and each batch is retried alone as it was made.
    replaced: list[tuple[Step, str, Any]] = []
    fences: dict[int, int] = {}
    for batch in batches:
        if batch.owner.claim is not None:
            fences[batch.owner.turn.pk] = batch.owner.claim
        if batch.turn_values:
            turn_values.setdefault(batch.owner.turn.pk, {}).update(batch.turn_values)
        for pk, fields in batch.updates.items():
            step = opened.get(pk)
            if step is not None:
                for name, value in fields.items():
                    replaced.append((step, name, getattr(step, name)))
                    setattr(step, name, value)
            else:
                updates.setdefault(pk, {}).update(fields)
        exchanges.extend(batch.exchanges)
        if batch.step is not None:
            if batch.step.pk is None:
                unsaved.append(batch.step)
            else:
                opened[batch.step.pk] = batch.step
    # Asynchronous commit (see the module's docstring); the steps before the exchanges that name them.
    write = Batch(relaxed=True, fences=fences)
    write.insert(list(opened.values()))
    write.insert(unsaved)
    write.insert(exchanges)
    for pk, values in turn_values.items():
        write.update(Turn, pk, values)
    for pk, fields in updates.items():
        write.update(Step, pk, fields)
    try:
        record_store().write(write)
    except BaseException:
        for step, name, value in reversed(replaced):
            setattr(step, name, value)
        raise


def _big(record: WireExchange) -> bool:
    return max(len(record.request_body), len(record.response_body)) >= BIG_RECORD_CHARS


def _reserve_ids(model: type[Step], count: int) -> list[int]:
    """``count`` fresh ids from the table's own sequence (the ids the database would have given)."""
    with connection.cursor() as cursor:
        cursor.execute(NEXT_IDS, next_ids_params(model, count))
        return [int(row[0]) for row in cursor.fetchall()]


def _starting_points(turn: Turn, ids: int = 0) -> tuple[int, int, str | None, list[int]]:
    """The turn's last step and exchange numbers, the hash of the conversation's latest
    exchange and ``ids`` fresh step ids (PostgreSQL: as ``_reserve_ids`` gives them), in one
    query (``record.starting``): every turn reads them, and the first steps it opens need no
    round trip of their own for their ids. A turn that is gone has none of them."""
    try:
        found = starting_points(turn, step_ids=ids)
    except Turn.DoesNotExist:
        return 0, 0, None, []
    return found["last_step"], found["last_exchange"], found["head"], found["step_ids"]


class TurnRecorder:
    """Implements the agent's ``Recorder`` for one ``Turn``: write the rows, then publish their ids."""

    def __init__(self, turn: Turn, *, redact: Redactor | None = None, claim: int | None = None) -> None:
        """``claim``: the claim the turn's runner holds (``lifecycle.turn_claim``): every write
        then carries it, and the database refuses it once the claim no longer holds (the turn
        ended by another process). None: unfenced (a process writing an ended turn's last step)."""
        self.turn = turn
        self.claim = claim
        # The refusal of a write under ``claim``: from then on nothing more is written.
        self.refused: FenceRefused | None = None
        self.conversation_id = turn.conversation.public_id
        self.redact = redact or active_redactor()
        # Where the turn's steps and exchanges go on, and the conversation's hash chain: read in
        # one query.
        seq, exchange_seq, head, ids = _starting_points(turn, _ID_BLOCK_FIRST)
        self._seq, self._exchange_seq = seq, exchange_seq
        self._parents: dict[int, int | None] = {}
        self._chain = head or GENESIS
        self._key = integrity_key()
        # Step updates not yet handed over, by step id, in the order they were first made.
        self._updates: dict[int, dict[str, Any]] = {}
        self._records: list[tuple[int, Sequence[WireExchange], int]] = []
        self._turn_fields: list[str] = []
        # The writer thread, when the rows may be written from another connection (see above).
        self._writer = (
            process_writer(_write)
            if connection.vendor == "postgresql" and not connection.in_atomic_block
            else None
        )
        # Full-text search (PostgreSQL) indexes only what each model request adds to the turn's
        # previous one (and the last one whole once the turn has ended: ``index_last_request_whole``).
        # Kept by the writer: the previous request body.
        self._spans = connection.vendor == "postgresql"
        self._last_request: str | None = None
        # On PostgreSQL a step's id is known before its row is written (see ``_next_id``).
        self._reserves_ids = connection.vendor == "postgresql"
        self._ids: deque[int] = deque(ids)
        self._id_block = 2 * _ID_BLOCK_FIRST if ids else _ID_BLOCK_FIRST
        # Kept by the writer (under its lock): batches handed over and not yet written or dropped
        # (``_drained`` is set while there are none), and the error of the first write that
        # failed, until the loop has been told of it.
        self._outstanding = 0
        self._drained = threading.Event()
        self._drained.set()
        self._write_error: BaseException | None = None
        # Ids of steps whose write failed or was dropped (the writer's thread only).
        self._lost: set[int] = set()
        # By step (the writer's side): the diagnostics the loop last gave it, and what the
        # recorder had to escape in its values (``_storable_fields``).
        self._given_diagnostics: dict[int, list[Any]] = {}
        self._escapes: dict[int, list[str]] = {}
        # Whether the turn has carried a record of ``connections.BIG_RECORD_CHARS`` or more
        # (its end reads and writes it again: the runner's connection is not pooled after it).
        self.carried_big = False

    @property
    def deferred(self) -> bool:
        """Whether batches are written by the writer thread (else inline, before returning)."""
        return self._writer is not None

    def step_open(
        self,
        *,
        kind: str,
        title: str,
        parent: int | None = None,
        computed: Callable[[], dict[str, Any]] | None = None,
        **fields: Any,
    ) -> int:
        """Hand the new step (with every pending update) over to be written; return its id.

        ``computed`` gives fields that are worked out where the row is written (off the loop's
        path when a writer thread writes it); it must not depend on anything the loop changes.
        """
        self._check(fields)
        self._raise_write_error()
        self._seq += 1
        now = timezone.now()
        opening = _Opening(
            pk=self._next_id() if self._reserves_ids else None,
            kind=kind,
            title=title,
            parent=parent,
            seq=self._seq,
            at=now,
            fields=fields,
            computed=computed,
        )
        if parent is not None:
            self._touch(parent, now)
        batch = self._batch(opening=opening)
        self._send(batch)
        pk = opening.pk if opening.pk is not None else batch.step.pk  # type: ignore[union-attr]
        if opening.pk is None:
            # Written inline, so its id is known now: what was noted for it goes with the id.
            for notes in (self._given_diagnostics, self._escapes):
                if _UNSAVED_STEP in notes:
                    notes[pk] = notes.pop(_UNSAVED_STEP)
        self._parents[pk] = parent
        return pk

    def step_save(self, step: int, *, exchanges: Sequence[WireExchange] = (), **fields: Any) -> None:
        """Queue an update of ``step``; it goes out with the next ``step_open`` or ``flush``."""
        self._check(fields)
        now = timezone.now()
        self._updates.setdefault(step, {}).update(fields, updated_at=now)
        parent = self._parents.get(step)
        if parent is not None:
            self._touch(parent, now)
        if exchanges:
            self._records.append((step, list(exchanges), self._exchange_seq + 1))
            self._exchange_seq += len(exchanges)
            if not self.carried_big:
                self.carried_big = any(_big(record) for record in exchanges)

    def step_close(
        self, step: int, *, status: str, exchanges: Sequence[WireExchange] = (), **fields: Any
    ) -> None:
        self.step_save(step, exchanges=exchanges, status=status, finished_at=timezone.now(), **fields)

    def partial_sink(self, step: int) -> DeltaCallback:
        """Where a streamed reply for ``step`` is shown while it arrives: redacted, cut to its
        tail, throttled, published (never stored) — after the step's own row is written, so the
        page has the row to show it in."""

        def publish(partial: PartialReply) -> None:
            event = events.StepPartial(
                conversation_id=self.conversation_id,
                turn_id=self.turn.pk,
                step_id=step,
                text=self._settled(partial.text),
                calls=[
                    {
                        "index": call.index,
                        "id": self.redact.text(storable_text(call.id)[0]),
                        "name": self.redact.text(storable_text(call.name)[0]),
                        "arguments": self._settled(call.arguments),
                    }
                    for call in partial.calls
                ],
            )
            send = functools.partial(events.emit, event)
            if self._writer is None:
                send()
            else:
                self._writer.put(_Batch(owner=self, after=send))

        return throttled(publish, interval=PARTIAL_INTERVAL_SECONDS)

    def _settled(self, text: str) -> str:
        """The redacted tail of a growing text, without its unfinished last word.

        A secret arriving in pieces matches no redaction pattern until it is whole; holding back
        the trailing run of token characters shows it only once a delimiter has followed it,
        when the redactor can see all of it. A snapshot cut to its tail may begin inside a word
        (a secret's end, which no pattern would recognise): that first run is held back too.
        The stored step shows everything right after. Linear in the snapshot, which is bounded.
        """
        settled = text.rstrip(_TOKEN_CHARACTERS)
        if len(text) >= SNAPSHOT_TAIL_CHARS:
            settled = settled.lstrip(_TOKEN_CHARACTERS)
        return self.redact.text(storable_text(settled)[0])[-PARTIAL_TAIL_CHARS:]

    def turn_save(self, *fields: str) -> None:
        """Queue a save of these fields of the turn (and its ``updated_at``) with the next write;
        the turn's doorbell rings once it is written. The values are taken when the batch goes
        out, so later changes to the turn object do not leak into an earlier write."""
        self._turn_fields.extend(name for name in (*fields, "updated_at") if name not in self._turn_fields)

    def flush(self) -> None:
        """Hand every pending update over to be written (inline: written before returning); the
        rows it changed are published once written."""
        if self._updates or self._records or self._turn_fields:
            self._send(self._batch(opening=None))

    def drain(self) -> None:
        """Flush, then wait until everything handed over is committed.

        Raises:
            Exception: the error of a write that failed since the loop last heard of one.
        """
        self.flush()
        if self._writer is not None:
            self._writer.wait(self)
        self._raise_write_error()

    def turn_end(self) -> str | None:
        """Write the turn's end, redacted, and seal it, if it is still running in the database
        (``turn_end_save``); after ``drain``. Returns the status another process ended it with
        instead, if one has."""
        return turn_end_save(turn=self.turn, redact=self.redact, if_running=True, claim=self.claim)

    def seal(self) -> None:
        """Seal a turn whose end another writer stored (``integrity.turn_seal``); after ``drain``."""
        turn_seal(turn=self.turn)

    def _index_span(self, row: Exchange) -> None:
        """Index only what this model request adds to the turn's previous one (the writer's side)."""
        previous, self._last_request = self._last_request, row.request_body
        if previous is None:
            return
        span = request_search_span(previous, row.request_body)
        if span is not None:
            row.search_start, row.search_length = span

    def turn_changed(self) -> None:
        events.emit(events.TurnChanged(conversation_id=self.conversation_id, turn_id=self.turn.pk))

    def _touch(self, parent: int, now: Any) -> None:
        """A child changed: move the parent's ``updated_at`` so a reconnecting browser re-reads it."""
        self._updates.setdefault(parent, {})["updated_at"] = now

    def _next_id(self) -> int:
        if not self._ids:
            self._ids.extend(_reserve_ids(Step, self._id_block))
            self._id_block = min(2 * self._id_block, _ID_BLOCK_MOST)
            release_connection()
        return self._ids.popleft()

    def _batch(self, *, opening: _Opening | None) -> _Batch:
        """Everything pending (and the step being opened), taken off the recorder."""
        updates, self._updates = self._updates, {}
        records, self._records = self._records, []
        turn_fields, self._turn_fields = self._turn_fields, []
        turn_values = {name: getattr(self.turn, name) for name in turn_fields}
        if turn_values:
            turn_values["updated_at"] = self.turn.updated_at = timezone.now()
        rows = [self._parents.get(pk) or pk for pk in updates]
        return _Batch(
            owner=self, turn_values=turn_values, updates=updates, records=records, opening=opening, rows=rows
        )

    def _send(self, batch: _Batch) -> None:
        if self.refused is not None:
            raise self.refused
        if self._writer is not None:
            self._writer.put(batch)
            # Whatever the loop read since its last write, it holds no connection while it waits.
            release_connection()
            return
        batch.prepare()
        try:
            _write([batch])
        except FenceRefused as exc:
            self.refused = exc
            raise
        finally:
            release_connection()
        batch.publish()

    def _raise_write_error(self) -> None:
        error = self._write_error
        if isinstance(error, FenceRefused):
            # Kept: the writer drops every later batch of the turn (``_Batch.live``).
            self.refused = error
            raise error
        if error is not None:
            self._write_error = None
            raise error
        if self.refused is not None:
            raise self.refused

    def _redacted(self, fields: dict[str, Any], *, step: int | None) -> dict[str, Any]:
        """Fields as they may be stored: every value storable (``_storable_fields``), every text
        redacted, the title and tool name cut to their columns."""
        storable = self._storable_fields(fields, step=step)
        redacted = {
            name: self.redact.json(value) if name in _REDACTED_FIELDS else value
            for name, value in storable.items()
        }
        if "title" in redacted:
            redacted["title"] = str(redacted["title"])[:300]
        if "tool_name" in redacted:
            redacted["tool_name"] = str(redacted["tool_name"])[:200]
        return redacted

    def _storable_fields(self, fields: dict[str, Any], *, step: int | None) -> dict[str, Any]:
        """``fields`` with every text and JSON value in a form every database stores
        (``conversations.escaping``); what had to be escaped is said in the step's diagnostics,
        after the diagnostics the loop gave it (the writer's side: batches are prepared in order)."""
        key = step if step is not None else _UNSAVED_STEP
        storable: dict[str, Any] = {}
        notes: list[str] = []
        for name, value in fields.items():
            if isinstance(value, str):
                value, problem = storable_text(value)
                if problem:
                    notes.append(f"{name}: {problem}")
            elif isinstance(value, dict | list | float):
                value, found = storable_json(value, path=name)
                notes.extend(found)
            storable[name] = value
        if "diagnostics" in storable:
            given = storable["diagnostics"]
            self._given_diagnostics[key] = list(given) if isinstance(given, list) else [given]
        if notes:
            self._escapes.setdefault(key, []).extend(notes)
        escapes = self._escapes.get(key)
        if escapes and (notes or "diagnostics" in storable):
            storable["diagnostics"] = [
                *self._given_diagnostics.get(key, []),
                *(f"the inspector escaped what no database stores as it is — {note}" for note in escapes),
            ]
        return storable

    @staticmethod
    def _check(fields: dict[str, Any]) -> None:
        unknown = set(fields) - _STEP_FIELDS
        if unknown:
            raise TypeError(f"not Step fields: {', '.join(sorted(unknown))}")
