"""Where a started run is driven: by the Celery task ``evals.tasks.advance_run`` when turns go
to Celery workers (``TURN_RUNNER``), else by a thread of this process — and who takes over a run
whose driver is gone (``runs_resume_stale``), so that no run stays running forever.

A driver saves the run's row at every step (``EvalRun.updated_at`` is its heartbeat) and names
itself in ``EvalRun.driver``. Every serving process checks, when it starts and then every
``TURN_REAP_SECONDS`` (``conversations.lifecycle.stale_check_register``, after the turns of dead
runners are marked interrupted), for unfinished runs whose driver was a process of this host that
no longer exists, or that took no step for ``EVAL_DRIVER_WINDOW_SECONDS``; it claims each with
one conditional UPDATE (of two processes checking at once only one wins) and drives it on: the
case runs already graded are kept, the ones whose turn was interrupted are asked again, the rest
start as usual.
"""

from __future__ import annotations

import logging
import threading
import uuid
from datetime import datetime, timedelta

from django.conf import settings
from django.db import close_old_connections
from django.db.models import Q
from django.utils import timezone

from conversations.lifecycle import runner_gone, runner_name
from inspector.evals.driver import run_execute
from inspector.evals.models import EvalRun
from inspector.evals.tasks import advance_run

logger = logging.getLogger(__name__)


def _new_driver() -> str:
    """A driver's name: this process (embedded), or a new Celery task chain."""
    if settings.TURN_RUNNER == "celery":
        return f"celery:{uuid.uuid4().hex}"
    return runner_name()


def run_dispatch(run_id: int, driver: str | None = None) -> None:
    """Have the run driven in the background as ``driver`` (default: a new one): the Celery task
    ``evals.tasks.advance_run`` when turns go to Celery workers, else a thread of this process."""
    driver = driver or _new_driver()
    if settings.TURN_RUNNER == "celery":
        advance_run.delay(run_id, driver)
        return
    threading.Thread(
        target=_drive_embedded, args=(run_id, driver), name=f"eval-run-{run_id}", daemon=True
    ).start()


def _drive_embedded(run_id: int, driver: str) -> None:
    close_old_connections()
    try:
        run_execute(run=EvalRun.objects.get(pk=run_id), driver=driver)
    except Exception:  # the thread's boundary
        logger.exception("eval run %s failed", run_id)
    finally:
        close_old_connections()


def runs_resume_stale(*, now: datetime | None = None, window: float | None = None) -> list[int]:
    """Take over and drive on every unfinished run whose driver is gone; return their ids.

    Gone: no step for ``window`` seconds (``EVAL_DRIVER_WINDOW_SECONDS``), or its driver was a
    process of this host that no longer exists (``conversations.lifecycle.runner_gone``).
    """
    now = now or timezone.now()
    window = float(settings.EVAL_DRIVER_WINDOW_SECONDS) if window is None else window
    cutoff = now - timedelta(seconds=window)
    host = runner_name().partition(":")[0]
    candidates = (
        EvalRun.objects.exclude(status__in=EvalRun.FINISHED)
        .filter(Q(updated_at__lt=cutoff) | Q(driver__startswith=f"{host}:"))
        .values_list("pk", "driver", "updated_at")
    )
    resumed: list[int] = []
    for pk, driver, updated_at in candidates:
        if updated_at >= cutoff and not runner_gone(driver):
            continue
        successor = _new_driver()
        # Claimed only if nobody stepped it or took it over since it was read.
        claimed = (
            EvalRun.objects.filter(pk=pk, driver=driver, updated_at=updated_at)
            .exclude(status__in=EvalRun.FINISHED)
            .update(driver=successor, updated_at=timezone.now())
        )
        if claimed:
            logger.warning("eval run %s: its driver %r is gone; driving it on as %s", pk, driver, successor)
            run_dispatch(pk, successor)
            resumed.append(pk)
    return resumed
