"""The Celery application; turns run as tasks on a thread pool (the agent loop is IO-bound).

Two things here keep a worker serving across broker trouble and say what it did:

- ``RedisTransport``, the broker transport (``CELERY_BROKER_TRANSPORT``): kombu's Redis transport
  with one fix for closing a channel after its connection has already been torn down (see
  ``_Channel``). Without it a Redis restart while a turn runs kills the worker.
- one log line per turn task that ends: turn id, the turn's status, the task's duration.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import redis
from celery import Celery, Task
from celery.signals import task_postrun, task_prerun
from kombu.transport import redis as kombu_redis

from inspector.memory import keep_big_allocations_mapped, release_if_grown

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "inspector.settings")
# Celery's Django fixup runs Django's system checks when a worker starts, and the URL checks
# import the URLconf: every view, form and API module (and the bundled demo server's code), which
# a worker never serves, ~15 MB of its memory. The web process runs none either; ``make check``
# and ``manage.py check --deploy`` are where they run. An operator may still ask for them (=0).
if os.environ.get("CELERY_SKIP_CHECKS") == "0":
    del os.environ["CELERY_SKIP_CHECKS"]
else:
    os.environ["CELERY_SKIP_CHECKS"] = "1"
# Every process of the app (web, worker, management command) imports this module first
# (``inspector/__init__``): the allocator is tuned before any payload arrives.
keep_big_allocations_mapped()

logger = logging.getLogger("inspector.worker")

app = Celery("inspector")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

TURN_TASK = "conversations.tasks.run_turn"


class _Channel(kombu_redis.Channel):
    """kombu's Redis channel, whose connection parameters say "closed" once its transport is gone.

    When the broker connection drops, Celery (5.7) first ``collect()``s the connection — which
    detaches the transport from it (``transport.client = None``) even when closing the channel
    failed half-way — and then ``close()``s it again. The second close puts the unacknowledged
    messages (a turn still running here, acks_late) back on the queue, which needs a fresh Redis
    client, whose parameters are read from ``transport.client``: ``AttributeError: 'NoneType'
    object has no attribute 'hostname'``, an error kombu does not expect there, so the worker
    stops ("Unrecoverable error"). Raising the connection error kombu does expect lets the close
    finish and the worker reconnect. The message is left unacknowledged in Redis, so it is not
    delivered again while the turn still runs in this process; its late ack fails the same way
    and Redis redelivers it after the visibility timeout, where claiming a finished turn is a no-op.
    """

    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        if self.connection is None or self.connection.client is None:
            raise redis.ConnectionError("the broker connection was closed")
        params: dict[str, Any] = super()._connparams(asynchronous=asynchronous)  # type: ignore[misc]
        return params


class RedisTransport(kombu_redis.Transport):
    """The Redis broker transport with ``_Channel``; named by ``CELERY_BROKER_TRANSPORT``."""

    Channel = _Channel


_started: dict[str, float] = {}


@task_prerun.connect
def _turn_task_started(task_id: str, task: Task[Any, Any], **_: Any) -> None:
    if task.name == TURN_TASK:
        _started[task_id] = time.monotonic()


@task_postrun.connect
def _turn_task_ended(
    task_id: str,
    task: Task[Any, Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    retval: Any = None,
    state: str | None = None,
    **_: Any,
) -> None:
    """One INFO line per turn task: ``turn <id> <status> in <seconds> s (task <state>)``; the
    status is what the task returned (how it left the turn), or the exception it raised."""
    if task.name != TURN_TASK:
        return
    # The turn's objects are unreferenced now: what a big one grew the worker by goes back.
    release_if_grown()
    started = _started.pop(task_id, None)
    duration = time.monotonic() - started if started is not None else 0.0
    turn_id: int = args[0] if args else kwargs["turn_id"]
    status = retval if isinstance(retval, str) else f"not finished ({type(retval).__name__})"
    logger.info("turn %s %s in %.3f s (task %s)", turn_id, status, duration, state or "?")
