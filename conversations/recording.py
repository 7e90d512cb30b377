"""The recorder: persists each step and exchange of a running turn, then rings the doorbell."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from conversations.models import Exchange, Step, Turn
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


def _storable(text: str) -> str:
    """Text fit for every database: no NUL (Postgres refuses it), cut at the configured limit."""
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    limit = settings.EXCHANGE_BODY_LIMIT
    if len(text) > limit:
        return text[:limit] + f"\n… [cut by the inspector: {len(text)} characters in all]"
    return text


def exchange_rows(
    records: Sequence[WireExchange], *, turn_id: int | None, step_id: int | None, first_seq: int = 0
) -> list[Exchange]:
    """Unsaved ``Exchange`` rows for captured records, in order."""
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
            request_headers=record.request_headers,
            request_body=_storable(record.request_body),
            response_headers=record.response_headers,
            response_body=_storable(record.response_body),
            status=record.status[:32],
            error=_storable(record.error),
            started_at=record.started_at,
            duration_ms=record.duration_ms,
        )
        for offset, record in enumerate(records)
    ]


def server_records_store(records: Sequence[WireExchange]) -> None:
    """Messages that belong to a server but to no call (late replies, log notifications)."""
    if records:
        Exchange.objects.bulk_create(exchange_rows(records, turn_id=None, step_id=None))


class TurnRecorder:
    """Implements the agent's ``Recorder`` for one ``Turn``: write the row, then publish its id."""

    def __init__(self, turn: Turn) -> None:
        self.turn = turn
        self.conversation_id = turn.conversation.public_id
        self._seq = Step.objects.filter(turn=turn).aggregate(m=Max("seq"))["m"] or 0
        self._exchange_seq = Exchange.objects.filter(turn=turn).aggregate(m=Max("seq"))["m"] or 0
        self._parents: dict[int, int | None] = {}

    def step_open(self, *, kind: str, title: str, parent: int | None = None, **fields: Any) -> int:
        self._check(fields)
        self._seq += 1
        now = timezone.now()
        step = Step.objects.create(
            turn=self.turn,
            parent_id=parent,
            seq=self._seq,
            kind=kind,
            title=title[:300],
            started_at=now,
            updated_at=now,
            **fields,
        )
        self._parents[step.pk] = parent
        if parent is not None:
            Step.objects.filter(pk=parent).update(updated_at=now)
        self._publish(step.pk)
        return step.pk

    def step_save(self, step: int, *, exchanges: Sequence[WireExchange] = (), **fields: Any) -> None:
        self._check(fields)
        now = timezone.now()
        if "title" in fields:
            fields["title"] = str(fields["title"])[:300]
        with transaction.atomic():
            Step.objects.filter(pk=step).update(updated_at=now, **fields)
            parent = self._parents.get(step)
            if parent is not None:
                Step.objects.filter(pk=parent).update(updated_at=now)
            if exchanges:
                rows = exchange_rows(
                    exchanges, turn_id=self.turn.pk, step_id=step, first_seq=self._exchange_seq + 1
                )
                self._exchange_seq += len(rows)
                Exchange.objects.bulk_create(rows)
        self._publish(step)

    def step_close(
        self, step: int, *, status: str, exchanges: Sequence[WireExchange] = (), **fields: Any
    ) -> None:
        self.step_save(step, exchanges=exchanges, status=status, finished_at=timezone.now(), **fields)

    def turn_changed(self) -> None:
        live.publish_turn_changed(conversation_id=self.conversation_id, turn_id=self.turn.pk)

    def _publish(self, step: int) -> None:
        row = self._parents.get(step) or step
        live.publish_step_changed(conversation_id=self.conversation_id, turn_id=self.turn.pk, step_id=row)

    @staticmethod
    def _check(fields: dict[str, Any]) -> None:
        unknown = set(fields) - _STEP_FIELDS
        if unknown:
            raise TypeError(f"not Step fields: {', '.join(sorted(unknown))}")
