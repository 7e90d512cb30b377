import logging
from typing import Any

from billiard.einfo import ExceptionInfo
from celery import Task, shared_task
from celery.signals import worker_process_init, worker_ready
from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.utils import timezone

from conversations import warm_start
from conversations.lifecycle import lifecycle_start
from conversations.models import TraceDelivery
from conversations.record.retention import conversations_prune
from conversations.record.trace_delivery import trace_deliver, trace_deliveries_retry
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
def run_turn(turn_id: int) -> str:
    """Run the turn (``runner.turn_run``); returns how it left it, for the worker's log line."""
    return turn_run(turn_id=turn_id)


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


@shared_task(bind=True, acks_late=True, ignore_result=True, autoretry_for=DATABASE_ERRORS, retry_backoff=True)
def deliver_trace(self: Task, turn_id: int) -> None:  # type: ignore[type-arg]
    """Send a turn's trace (``trace_delivery.trace_deliver``); while the collector is down, again
    at the delivery's next attempt time, ``TRACE_DELIVERY_TASK_RETRIES`` times, then the sweep's."""
    delivery = trace_deliver(turn_id=turn_id)
    pending = delivery is not None and delivery.status == TraceDelivery.Status.PENDING
    if pending and self.request.retries < settings.TRACE_DELIVERY_TASK_RETRIES:
        assert delivery is not None
        wait = (delivery.next_attempt_at - timezone.now()).total_seconds()
        raise self.retry(countdown=max(wait, 0.0), max_retries=settings.TRACE_DELIVERY_TASK_RETRIES)


@shared_task(ignore_result=True)
def retry_trace_deliveries() -> None:
    """Celery beat: every pending trace that is due goes to a sender again (the collector came back)."""
    trace_deliveries_retry()


@worker_ready.connect
def _retry_pending_traces(**kwargs: Any) -> None:
    """A worker that starts sends the traces left pending (by a collector down, a worker gone)."""
    try:
        trace_deliveries_retry()
    except DATABASE_ERRORS:
        logging.getLogger(__name__).exception("could not read the pending trace deliveries")


@worker_ready.connect
def _check_stale_turns(**kwargs: Any) -> None:
    """A ready worker marks turns whose runner died at once, then checks periodically."""
    lifecycle_start()


@worker_ready.connect
def _warm_start(sender: Any = None, **kwargs: Any) -> None:
    """A worker whose turns run in this process (threads, solo) loads what a turn needs now
    (``conversations.warm_start``); a prefork pool's children do it in their own process."""
    if "prefork" not in type(getattr(sender, "pool", None)).__module__:
        warm_start.start_in_background("Celery worker")


@worker_process_init.connect
def _warm_start_child(**kwargs: Any) -> None:
    warm_start.start_in_background("Celery worker process")
