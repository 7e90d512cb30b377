from typing import Any

from billiard.einfo import ExceptionInfo
from celery import Task, shared_task
from celery.signals import worker_ready
from django.conf import settings
from django.db import InterfaceError, OperationalError

from conversations.lifecycle import lifecycle_start
from conversations.retention import conversations_prune
from conversations.runner import turn_abandon, turn_run

# Failures to reach the database (pool exhausted, "too many clients", a restart): worth a retry.
DATABASE_ERRORS = (OperationalError, InterfaceError)


class TurnTask(Task):  # type: ignore[type-arg]
    """When a turn's task finally fails (retries spent, or a bug), the turn says so: never stuck queued."""

    def on_failure(
        self,
        exc: Exception,
        task_id: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        einfo: ExceptionInfo,
    ) -> None:
        turn_id = args[0] if args else kwargs["turn_id"]
        retries = self.request.retries
        after = f" after {retries} retr{'y' if retries == 1 else 'ies'}" if retries else ""
        abandon_turn.delay(turn_id, f"the worker could not run this turn{after}: {type(exc).__name__}: {exc}")


@shared_task(
    base=TurnTask,
    acks_late=True,
    ignore_result=True,
    autoretry_for=DATABASE_ERRORS,
    retry_backoff=True,
    retry_backoff_max=settings.TURN_RETRY_BACKOFF_MAX_SECONDS,
    retry_jitter=False,
    max_retries=settings.TURN_DATABASE_RETRIES,
)
def run_turn(turn_id: int) -> None:
    turn_run(turn_id=turn_id)


@shared_task(
    acks_late=True,
    ignore_result=True,
    autoretry_for=DATABASE_ERRORS,
    retry_backoff=True,
    retry_backoff_max=settings.TURN_RETRY_BACKOFF_MAX_SECONDS,
    max_retries=100,
)
def abandon_turn(turn_id: int, reason: str) -> None:
    """Record why a turn could not run; retried until the database takes it."""
    turn_abandon(turn_id=turn_id, reason=reason)


@shared_task(ignore_result=True)
def prune_conversations() -> None:
    """The daily retention run (Celery beat); ``RETENTION_DAYS=0`` keeps everything."""
    if settings.RETENTION_DAYS > 0:
        conversations_prune(older_than_days=settings.RETENTION_DAYS)


@worker_ready.connect
def _check_stale_turns(**kwargs: Any) -> None:
    """A ready worker marks turns whose runner died at once, then checks periodically."""
    lifecycle_start()
