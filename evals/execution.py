"""Where a started run is driven: by the Celery task ``evals.tasks.advance_run`` when turns go
to Celery workers (``TURN_RUNNER``), else by a thread of this process."""

from __future__ import annotations

import logging
import threading

from django.conf import settings
from django.db import close_old_connections

from evals.driver import run_execute
from evals.models import EvalRun
from evals.tasks import advance_run

logger = logging.getLogger(__name__)


def run_dispatch(run_id: int) -> None:
    """Have the run driven in the background: the Celery task ``evals.tasks.advance_run`` when
    turns go to Celery workers, else a thread of this process."""
    if settings.TURN_RUNNER == "celery":
        advance_run.delay(run_id)
        return
    threading.Thread(target=_drive_embedded, args=(run_id,), name=f"eval-run-{run_id}", daemon=True).start()


def _drive_embedded(run_id: int) -> None:
    close_old_connections()
    try:
        run_execute(run=EvalRun.objects.get(pk=run_id))
    except Exception:  # the thread's boundary
        logger.exception("eval run %s failed", run_id)
    finally:
        close_old_connections()
