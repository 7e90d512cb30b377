"""The ORM record store: the readable reference every other store is held to."""

from __future__ import annotations

from django.db import DEFAULT_DB_ALIAS, transaction

from conversations.record.store import Batch, Insert, ids_taken_back_on_failure


class OrmStore:
    """``bulk_create`` for new rows and ``QuerySet.update`` for changed ones, in order, in one
    ``transaction.atomic``."""

    def __init__(self, using: str = DEFAULT_DB_ALIAS) -> None:
        self.using = using

    def write(self, batch: Batch) -> None:
        with ids_taken_back_on_failure(batch), transaction.atomic(using=self.using):
            for operation in batch.operations:
                if isinstance(operation, Insert):
                    rows = list(operation.rows)
                    type(rows[0])._default_manager.db_manager(self.using).bulk_create(rows)
                else:
                    manager = operation.model._default_manager.db_manager(self.using)
                    manager.filter(pk=operation.pk).update(**operation.values)
            for callback in batch.on_commit:
                transaction.on_commit(callback, using=self.using)
