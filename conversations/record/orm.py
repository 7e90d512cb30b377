"""The ORM record store: the readable reference every other store is held to."""

from __future__ import annotations

from django.db import DEFAULT_DB_ALIAS, transaction
from django.db.models import F

from conversations.models import Turn
from conversations.record.store import Batch, FenceRefused, Insert, ids_taken_back_on_failure


class OrmStore:
    """``bulk_create`` for new rows and ``QuerySet.update`` for changed ones, in order, in one
    ``transaction.atomic``, after the fences' guards."""

    def __init__(self, using: str = DEFAULT_DB_ALIAS) -> None:
        self.using = using

    def write(self, batch: Batch) -> None:
        with ids_taken_back_on_failure(batch), transaction.atomic(using=self.using):
            self._guard(batch)
            for operation in batch.operations:
                if isinstance(operation, Insert):
                    rows = list(operation.rows)
                    type(rows[0])._default_manager.db_manager(self.using).bulk_create(rows)
                else:
                    manager = operation.model._default_manager.db_manager(self.using)
                    manager.filter(pk=operation.pk).update(**operation.values)
            for callback in batch.on_commit:
                transaction.on_commit(callback, using=self.using)

    def _guard(self, batch: Batch) -> None:
        """Hold each fenced turn while it runs under the batch's claim, or refuse the batch: an
        ``UPDATE … WHERE claim = X AND status = 'running'`` that changes nothing but takes the
        row's write lock until the commit (SQLite: the database's), in turn id order."""
        turns = Turn._default_manager.db_manager(self.using)
        for turn_id, claim in sorted(batch.fences.items()):
            held = turns.filter(pk=turn_id, claim=claim, status=Turn.Status.RUNNING).update(claim=F("claim"))
            if not held:
                raise FenceRefused(sorted(batch.fences))
