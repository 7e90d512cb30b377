from celery import shared_task
from django.conf import settings
from django.db import InterfaceError, OperationalError

from evals.driver import run_advance
from evals.models import EvalRun


@shared_task(
    acks_late=True,
    ignore_result=True,
    autoretry_for=(OperationalError, InterfaceError),
    retry_backoff=True,
    max_retries=20,
)
def advance_run(run_id: int) -> None:
    """One step of an eval run (``driver.run_advance``); while it has not finished, the step
    after it is queued ``EVAL_POLL_SECONDS`` later. A worker slot is held only for the step, so
    the run never waits on a slot its own turns need."""
    run = EvalRun.objects.filter(pk=run_id).first()
    if run is None:
        return
    if not run_advance(run=run):
        advance_run.apply_async((run_id,), countdown=settings.EVAL_POLL_SECONDS)
