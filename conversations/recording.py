"""The recorder: persists each step and exchange of a running turn, then rings the doorbell.

A step's updates (its reply, its parsed calls, its close) are kept until the recorder next opens
a step — the loop opens one before every model or tool call — or is flushed, and then written
with that step in one transaction: nothing the loop saw is ever held while it waits on the
outside world, and a step costs two commits instead of seven.

Those transactions commit asynchronously on PostgreSQL (``synchronous_commit = off``): the rows
are visible to every reader at once, but the wait for the disk is skipped. A crash of the
database server (not of the worker) can lose the last fraction of a second of steps; the turn's
final status is written with an ordinary commit, which makes everything before it durable too.
Between writes the recorder hands its connection back to the pool, so a turn waiting on a model
holds no database connection.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Max
from django.utils import timezone

from conversations.integrity import chain_head, exchange_digest
from conversations.models import Exchange, RedactionRule, Step, Turn
from conversations.providers.streaming import DeltaCallback, PartialReply, throttled
from conversations.redaction import Redactor, redactor
from inspector import live
from inspector.wire import WireExchange

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
    "status",
    "finished_at",
}


# A streamed reply is shown at most this often, and only its last characters (each snapshot
# carries everything so far).
PARTIAL_INTERVAL_SECONDS = 0.05
PARTIAL_TAIL_CHARS = 8000
# The characters keys, tokens and e-mail addresses are made of (see ``redaction``).
_UNFINISHED_TOKEN = re.compile(r"[A-Za-z0-9_\-./+=:@~]+\Z")

# Step fields that may carry model or tool text (and so secrets).
_REDACTED_FIELDS = {"title", "prompt", "text", "calls", "diagnostics", "arguments", "result", "error"}


def _storable(text: str) -> str:
    """Text fit for every database: no NUL (Postgres refuses it), cut at the configured limit."""
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    limit = settings.EXCHANGE_BODY_LIMIT
    if len(text) > limit:
        return text[:limit] + f"\n… [cut by the inspector: {len(text)} characters in all]"
    return text


def active_redactor(*, secrets: Sequence[str] = ()) -> Redactor:
    """The built-in patterns, the enabled staff rules, and the secret values of this run."""
    rules = RedactionRule.objects.filter(enabled=True).values_list("name", "pattern")
    return redactor(rules=list(rules), secrets=secrets)


def exchange_rows(
    records: Sequence[WireExchange],
    *,
    turn_id: int | None,
    step_id: int | None,
    redact: Redactor,
    first_seq: int = 0,
) -> list[Exchange]:
    """Unsaved ``Exchange`` rows for captured records, in order, redacted."""

    def text(value: str) -> str:
        return _storable(redact.text(value))

    def headers(values: dict[str, str]) -> dict[str, str]:
        return {name: redact.text(value) for name, value in values.items()}

    return [
        Exchange(
            turn_id=turn_id,
            step_id=step_id,
            server_id=record.server_id,
            seq=first_seq + offset,
            channel=record.channel,
            direction=record.direction,
            label=record.label[:200],
            jsonrpc_id=record.jsonrpc_id[:64],
            request_headers=headers(record.request_headers),
            request_body=text(record.request_body),
            response_headers=headers(record.response_headers),
            response_body=text(record.response_body),
            status=record.status[:32],
            error=text(record.error),
            started_at=record.started_at,
            duration_ms=record.duration_ms,
        )
        for offset, record in enumerate(records)
    ]


def server_records_store(records: Sequence[WireExchange], *, redact: Redactor | None = None) -> None:
    """Messages that belong to a server but to no call (late replies, log notifications)."""
    if records:
        rows = exchange_rows(records, turn_id=None, step_id=None, redact=redact or active_redactor())
        Exchange.objects.bulk_create(rows)


class TurnRecorder:
    """Implements the agent's ``Recorder`` for one ``Turn``: write the rows, then publish their ids."""

    def __init__(self, turn: Turn, *, redact: Redactor | None = None) -> None:
        self.turn = turn
        self.conversation_id = turn.conversation.public_id
        self.redact = redact or active_redactor()
        self._seq = Step.objects.filter(turn=turn).aggregate(m=Max("seq"))["m"] or 0
        self._exchange_seq = Exchange.objects.filter(turn=turn).aggregate(m=Max("seq"))["m"] or 0
        self._parents: dict[int, int | None] = {}
        self._chain = chain_head(turn.conversation_id)
        # Step updates not yet written, by step id, in the order they were first made.
        self._updates: dict[int, dict[str, Any]] = {}
        self._exchanges: list[Exchange] = []
        self._turn_fields: list[str] = []
        self._changed: list[int] = []
        self._turn_written = False

    def step_open(self, *, kind: str, title: str, parent: int | None = None, **fields: Any) -> int:
        """Write the new step (with every pending update) at once, and return its id."""
        self._check(fields)
        fields = self._redacted(fields)
        title = self.redact.text(title)
        self._seq += 1
        now = timezone.now()
        step = Step(
            turn=self.turn,
            parent_id=parent,
            seq=self._seq,
            kind=kind,
            title=title[:300],
            started_at=now,
            updated_at=now,
            **fields,
        )
        if parent is not None:
            self._touch(parent, now)
        self._write(step)
        self._parents[step.pk] = parent
        self._publish([step.pk])
        return step.pk

    def step_save(self, step: int, *, exchanges: Sequence[WireExchange] = (), **fields: Any) -> None:
        """Queue an update of ``step``; it is written by the next ``step_open`` or ``flush``."""
        self._check(fields)
        fields = self._redacted(fields)
        now = timezone.now()
        if "title" in fields:
            fields["title"] = str(fields["title"])[:300]
        self._updates.setdefault(step, {}).update(fields, updated_at=now)
        parent = self._parents.get(step)
        if parent is not None:
            self._touch(parent, now)
        if exchanges:
            rows = exchange_rows(
                exchanges,
                turn_id=self.turn.pk,
                step_id=step,
                redact=self.redact,
                first_seq=self._exchange_seq + 1,
            )
            self._exchange_seq += len(rows)
            for row in rows:
                row.prev_hash = self._chain
                row.hash = self._chain = exchange_digest(row, turn_seq=self.turn.seq, previous=self._chain)
            self._exchanges.extend(rows)

    def step_close(
        self, step: int, *, status: str, exchanges: Sequence[WireExchange] = (), **fields: Any
    ) -> None:
        self.step_save(step, exchanges=exchanges, status=status, finished_at=timezone.now(), **fields)

    def partial_sink(self, step: int) -> DeltaCallback:
        """Where a streamed reply for ``step`` is shown while it arrives: redacted, cut to its
        tail, throttled, published (never stored)."""

        def publish(partial: PartialReply) -> None:
            live.publish_step_partial(
                conversation_id=self.conversation_id,
                turn_id=self.turn.pk,
                step_id=step,
                text=self._settled(partial.text),
                calls=[
                    {
                        "index": call.index,
                        "id": self.redact.text(call.id),
                        "name": self.redact.text(call.name),
                        "arguments": self._settled(call.arguments),
                    }
                    for call in partial.calls
                ],
            )

        return throttled(publish, interval=PARTIAL_INTERVAL_SECONDS)

    def _settled(self, text: str) -> str:
        """The redacted tail of a growing text, without its unfinished last word.

        A secret arriving in pieces matches no redaction pattern until it is whole; holding back
        the trailing run of token characters shows it only once a delimiter has followed it,
        when the redactor can see all of it. The stored step shows everything right after.
        """
        return self.redact.text(_UNFINISHED_TOKEN.sub("", text))[-PARTIAL_TAIL_CHARS:]

    def turn_save(self, *fields: str) -> None:
        """Queue a save of these fields of the turn (and its ``updated_at``) with the next write;
        the turn's doorbell rings once it is written."""
        self._turn_fields.extend(name for name in (*fields, "updated_at") if name not in self._turn_fields)

    def flush(self) -> None:
        """Write every pending update now, then publish the rows it changed."""
        if self._updates or self._exchanges or self._turn_fields:
            self._write(None)
            self._publish([])

    def turn_changed(self) -> None:
        live.publish_turn_changed(conversation_id=self.conversation_id, turn_id=self.turn.pk)

    def _touch(self, parent: int, now: Any) -> None:
        """A child changed: move the parent's ``updated_at`` so a reconnecting browser re-reads it."""
        self._updates.setdefault(parent, {})["updated_at"] = now

    def _write(self, step: Step | None) -> None:
        """One transaction: the pending turn fields, step updates and exchanges, then ``step``."""
        updates, self._updates = self._updates, {}
        exchanges, self._exchanges = self._exchanges, []
        turn_fields, self._turn_fields = self._turn_fields, []
        self._changed = list(updates)
        self._turn_written = bool(turn_fields)
        with transaction.atomic():
            if connection.vendor == "postgresql":
                with connection.cursor() as cursor:
                    cursor.execute("SET LOCAL synchronous_commit TO OFF")
            if turn_fields:
                self.turn.save(update_fields=turn_fields)
            for pk, fields in updates.items():
                Step.objects.filter(pk=pk).update(**fields)
            if exchanges:
                Exchange.objects.bulk_create(exchanges)
            if step is not None:
                step.save(force_insert=True)
        _release_connection()

    def _publish(self, opened: list[int]) -> None:
        if self._turn_written:
            self.turn_changed()
        rows = dict.fromkeys(self._parents.get(pk) or pk for pk in (*self._changed, *opened))
        for row in rows:
            live.publish_step_changed(conversation_id=self.conversation_id, turn_id=self.turn.pk, step_id=row)

    def _redacted(self, fields: dict[str, Any]) -> dict[str, Any]:
        return {
            name: self.redact.json(value) if name in _REDACTED_FIELDS else value
            for name, value in fields.items()
        }

    @staticmethod
    def _check(fields: dict[str, Any]) -> None:
        unknown = set(fields) - _STEP_FIELDS
        if unknown:
            raise TypeError(f"not Step fields: {', '.join(sorted(unknown))}")


def _release_connection() -> None:
    """Hand a pooled connection back between writes: a turn waiting on a model must not hold one."""
    if connection.settings_dict["OPTIONS"].get("pool") and not connection.in_atomic_block:
        connection.close()
