from celery import shared_task
from django.conf import settings
from django.db import InterfaceError, OperationalError

from inspector.evals.driver import run_advance
from inspector.evals.models import EvalRun


@shared_task(
    acks_late=True,
    ignore_result=True,
    autoretry_for=(OperationalError, InterfaceError),
    retry_backoff=True,
    max_retries=20,
)
def advance_run(run_id: int, driver: str = "") -> None:
    """One step of an eval run as ``driver`` (``driver.run_advance``); while the run has not
    finished and nobody took it over, the step after it is queued ``EVAL_POLL_SECONDS`` later. A
    worker slot is held only for the step, so the run never waits on a slot its own turns need.
    A duplicate or redelivered step starts no case twice; a step of a chain that was replaced
    (``evals.execution.runs_resume_stale``) ends the old chain."""
    run = EvalRun.objects.filter(pk=run_id).first()
    if run is None:
        return
    if not run_advance(run=run, driver=driver):
        advance_run.apply_async((run_id, driver), countdown=settings.EVAL_POLL_SECONDS)
