"""Where queued turns go: Celery workers, or a thread pool inside the web process.

``TURN_RUNNER`` picks one; both call the same ``turn_run``.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from django.conf import settings
from django.db import close_old_connections

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
        except Exception as exc:  # noqa: BLE001 — the thread's boundary
            logger.exception("embedded turn %s crashed", turn_id)
            try:
                turn_abandon(turn_id=turn_id, reason=f"the turn could not run: {type(exc).__name__}: {exc}")
            except Exception:  # noqa: BLE001 — nothing more can be done here; the log has it
                logger.exception("could not mark turn %s failed", turn_id)
        finally:
            close_old_connections()


DISPATCHERS: dict[str, TurnDispatcher] = {"celery": CeleryDispatcher(), "embedded": EmbeddedDispatcher()}


def turn_dispatch(turn_id: int) -> None:
    DISPATCHERS[settings.TURN_RUNNER].dispatch(turn_id)
