"""Where queued turns go: Celery workers, or a thread pool inside the web process.

``TURN_RUNNER`` picks one; both call the same ``turn_run``.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from django.conf import settings
from django.db import DatabaseError, close_old_connections

from conversations.lifecycle import QueuedScan, lifecycle_start, stale_check_register, turns_recover_queued
from conversations.models import Turn
from conversations.record.trace_delivery import trace_deliveries_retry
from conversations.runner import turn_abandon, turn_run
from conversations.tasks import run_turn

logger = logging.getLogger(__name__)


class TurnDispatcher(Protocol):
    def dispatch(self, turn_id: int) -> None: ...


class CeleryDispatcher:
    def dispatch(self, turn_id: int) -> None:
        run_turn.delay(turn_id)


class EmbeddedDispatcher:
    """A thread pool in this process: the embedded default needs no broker and no worker."""

    def __init__(self) -> None:
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def dispatch(self, turn_id: int) -> None:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=settings.EMBEDDED_RUNNER_THREADS, thread_name_prefix="turn"
                )
        self._executor.submit(self._run, turn_id)

    @staticmethod
    def _run(turn_id: int) -> None:
        close_old_connections()
        try:
            turn_run(turn_id=turn_id)
        except Exception as exc:  # the thread's boundary
            logger.exception("embedded turn %s crashed", turn_id)
            try:
                turn_abandon(turn_id=turn_id, reason=f"the turn could not run: {type(exc).__name__}: {exc}")
            except Exception:  # nothing more can be done here; the log has it
                logger.exception("could not mark turn %s failed", turn_id)
        finally:
            close_old_connections()


DISPATCHERS: dict[str, TurnDispatcher] = {"celery": CeleryDispatcher(), "embedded": EmbeddedDispatcher()}


def turn_dispatch(turn_id: int) -> None:
    DISPATCHERS[settings.TURN_RUNNER].dispatch(turn_id)


def turns_resume_queued() -> list[int]:
    """Hand every queued turn to this process's runner again; returns their ids.

    In the embedded mode a queued turn lives only in the database and in the thread pool of the
    process that queued it: one queued by a process that has since died would wait forever. Run
    by a web process when it starts serving; a turn another live process is about to run is
    claimed by one of them only (``lifecycle.turn_claim``).
    """
    queued = list(Turn.objects.filter(status=Turn.Status.QUEUED).order_by("pk").values_list("pk", flat=True))
    for turn_id in queued:
        turn_dispatch(turn_id)
    return queued


_queued_scan = QueuedScan()


def queued_turns_check() -> None:
    """In the Celery mode, a check of every serving process (web and worker, ``lifecycle``'s
    stale check, every ``TURN_REAP_SECONDS``): a turn whose task the broker lost (Redis restarted
    without persistence while no worker had taken it) is sent again, once, after
    ``TURN_QUEUED_REDISPATCH_SECONDS``, and failed with the reason after ``TURN_QUEUED_FAIL_SECONDS``
    (``lifecycle.turns_recover_queued``). The embedded mode resumes its queued turns when a web
    process starts (``embedded_resume``) and has no broker to lose them."""
    if settings.TURN_RUNNER == "celery":
        turns_recover_queued(dispatch=turn_dispatch, scan=_queued_scan)


# Registered as this module is imported: every process of the app imports it (the app's
# ``ready``), so the check is in place before a web process or a worker first looks.
stale_check_register(queued_turns_check)


def serving_start(sender: object, **kwargs: object) -> None:
    """``request_started`` receiver: the first request a web process serves makes it a checker
    of stale turns (``lifecycle_start``) and, in the embedded mode, picks up what an earlier
    process left (``embedded_resume``)."""
    if lifecycle_start() and settings.TURN_RUNNER == "embedded":
        embedded_resume()


def embedded_resume() -> None:
    """What an earlier embedded process left undone: its queued turns run here, and the traces it
    had not sent yet are sent by this process's sender. A receiver of request_started must not
    fail the request it runs in (a health probe against a database not migrated yet, or down):
    on a database error the work stays where it is, and the log says so."""
    try:
        resumed = turns_resume_queued()
    except DatabaseError:
        logger.exception("could not resume the queued turns left by an earlier process")
    else:
        if resumed:
            logger.info("resumed %d queued turn(s) left by an earlier process: %s", len(resumed), resumed)
    try:
        resent = trace_deliveries_retry()
    except DatabaseError:
        logger.exception("could not pick up the traces an earlier process left unsent")
    else:
        if resent:
            logger.info("sending %d trace(s) an earlier process left unsent", len(resent))
