"""The life of a running turn: its heartbeat, its cancel, and what happens when its runner dies.

A turn is claimed (queued -> running) by one atomic conditional UPDATE, so a duplicate or
redelivered task never runs it twice. While it runs, the process running it *watches* it: one
daemon thread per process writes the heartbeat of every turn the process runs (one UPDATE per
beat for all of them, every ``TURN_HEARTBEAT_SECONDS``) and looks for cancel requests (one
SELECT every ``TURN_CANCEL_POLL_SECONDS``); a turn that was asked to stop, or that another
process has meanwhile marked finished, gets its ``TurnSignal`` set, and its runner abandons
whatever it waits on.

Every serving process of the app — the web process (from the first request it serves) and each
Celery worker (when it is ready) — also *reaps*: at once, then every ``TURN_REAP_SECONDS``, it
marks ``interrupted`` each running turn whose heartbeat stopped ``TURN_HEARTBEAT_WINDOW_SECONDS``
ago (or whose runner was a process of this host that no longer exists), keeping every step it
recorded and adding an error step that says why. The marking is a conditional UPDATE too: a
turn that heart-beat meanwhile is left alone, and of two processes reaping at once only one
writes.

A queued turn has no runner to lose, but its task can be lost: a broker that restarts without
persistence forgets the messages no worker has taken. ``turns_recover_queued`` (run on the same
beat in the Celery mode, ``conversations.execution``) hands a turn queued for
``TURN_QUEUED_REDISPATCH_SECONDS`` to the runner once more, and fails one still queued after
``TURN_QUEUED_FAIL_SECONDS`` with an error step that says why; the claim makes the second task
harmless when the first one was not lost after all.

Other apps may check for their own stale work on the same beat (``stale_check_register``): the
evals app takes over an eval run whose driver is gone. This module never imports them.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import Max, Q
from django.utils import timezone

from conversations.models import Step, Turn
from conversations.record.recording import TurnRecorder, index_last_request_whole

logger = logging.getLogger(__name__)

# How the stop flag of a turn is set, for its step's wording.
CANCEL = "cancel"
LOST = "lost"


class _Process:
    """This process's name on the turns it runs: ``host:pid:boot`` (boot tells a restarted
    process with a reused pid, as in a container, from the one that died)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.host = socket.gethostname()
        self.name = f"{self.host}:{self.pid}:{secrets.token_hex(4)}"


_process: _Process | None = None


def runner_name() -> str:
    """The ``Turn.runner`` this process writes when it claims a turn."""
    global _process
    if _process is None or _process.pid != os.getpid():
        _process = _Process()
    return _process.name


# Claims are 1 … 2**63 - 1 (a signed 64-bit column; 0 is "never claimed", -1 the refusal).
CLAIM_MOST = 2**63 - 1


def turn_claim(*, turn_id: int) -> int | None:
    """Move a queued turn to running for this process, atomically; return the claim this sets
    (a fresh random token), or None if the turn was not queued.

    Of two tasks for the same turn (a duplicate, a redelivery) only one gets a claim. Every
    write the claimant makes carries it (``TurnRecorder(claim=...)``): once the turn is no longer
    running under it (interrupted, cancelled, claimed again) the database refuses the write.
    """
    now = timezone.now()
    claim = secrets.randbelow(CLAIM_MOST) + 1
    claimed = Turn.objects.filter(pk=turn_id, status=Turn.Status.QUEUED).update(
        status=Turn.Status.RUNNING,
        started_at=now,
        heartbeat_at=now,
        runner=runner_name(),
        claim=claim,
        updated_at=now,
    )
    return claim if claimed == 1 else None


@dataclass
class TurnSignal:
    """Set when a running turn must stop: a cancel was requested (``kind`` ``cancel``, ``by``
    whom), or another process has marked it finished (``lost``). Safe to use from any thread."""

    turn_id: int
    event: threading.Event = field(default_factory=threading.Event)
    kind: str = ""
    by: str = ""
    reason: str = ""
    _listeners: list[Callable[[], None]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def stop(self, *, kind: str, reason: str, by: str = "") -> None:
        with self._lock:
            if self.event.is_set():
                return
            self.kind, self.by, self.reason = kind, by, reason
            self.event.set()
            listeners = list(self._listeners)
        for listener in listeners:
            listener()

    def on_stop(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener`` (once) when the signal is set, at once if it is; returns an undo."""
        with self._lock:
            if not self.event.is_set():
                self._listeners.append(listener)
                return lambda: self._forget(listener)
        listener()
        return lambda: None

    def _forget(self, listener: Callable[[], None]) -> None:
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    @property
    def stopped(self) -> str:
        """Why the turn must stop, or "" while it may go on."""
        return self.reason if self.event.is_set() else ""


class _Watcher:
    """This process's lifecycle thread: heartbeats and cancel polls for the turns it runs, and,
    once ``reaping`` (a serving process), the periodic stale-turn check."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.turns: dict[int, TurnSignal] = {}
        self.lock = threading.Lock()
        self.reaping = False
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        # When the last beat and the last check were (monotonic); each is due its interval later,
        # as the settings say now.
        self._last_beat = float("-inf")
        self.last_reap = float("-inf")

    def watch(self, turn_id: int) -> TurnSignal:
        signal = TurnSignal(turn_id)
        with self.lock:
            # The next beat stays when it was due: turns starting all the time must not keep
            # postponing the heartbeat of those already running.
            self.turns[turn_id] = signal
        self.ensure_thread()
        return signal

    def unwatch(self, turn_id: int) -> None:
        with self.lock:
            self.turns.pop(turn_id, None)

    def signal(self, turn_id: int) -> TurnSignal | None:
        with self.lock:
            return self.turns.get(turn_id)

    def ensure_thread(self) -> None:
        with self.lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, args=(self._stopping,), name="turn-lifecycle", daemon=True
                )
                self._thread.start()

    def stop(self, timeout: float) -> None:
        """End the thread after its current pass (waiting up to ``timeout`` seconds for it); a
        later ``watch`` starts a new one."""
        with self.lock:
            thread, self._thread = self._thread, None
            stopping, self._stopping = self._stopping, threading.Event()
        stopping.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _loop(self, stopping: threading.Event) -> None:
        while not stopping.wait(settings.TURN_CANCEL_POLL_SECONDS):
            try:
                self.tick()
            except Exception:  # the thread must outlive a database outage
                logger.exception("the turn lifecycle check failed; retrying")
            finally:
                _release_connection()

    def tick(self) -> None:
        """One pass: beat, poll for cancels, and reap when due."""
        with self.lock:
            ids = list(self.turns)
        now = time.monotonic()
        if ids:
            if now >= self._last_beat + settings.TURN_HEARTBEAT_SECONDS:
                self._last_beat = now
                _beat(ids)
            self._poll(ids)
        if self.reaping and now >= self.last_reap + settings.TURN_REAP_SECONDS:
            self.last_reap = now
            _check_stale()

    def _poll(self, ids: list[int]) -> None:
        for pk, status, by in _stopping(ids):
            signal = self.signal(pk)
            if signal is None:
                continue
            if status == Turn.Status.RUNNING:
                signal.stop(kind=CANCEL, by=by, reason=f"cancelled by {by or 'a user'}")
            else:
                signal.stop(kind=LOST, reason=f"the turn was marked {status} by another process")


# The two statements the lifecycle thread runs every pass, for all the turns this process runs
# (a worker runs hundreds at once): plain SQL, so a pass costs the database round trip and not
# a query's compilation, which grows with the number of ids. On PostgreSQL the ids are one array
# parameter, so the statement's text is the same whatever their number (the driver keeps the
# texts it has parsed, a few hundred at most: one per count of ids would crowd out the rest).
def _ids_match(ids: list[int]) -> tuple[str, list[int | list[int] | str]]:
    if connection.vendor == "postgresql":
        return "id = ANY(%s)", [ids]
    return f"id IN ({', '.join(['%s'] * len(ids))})", list(ids)


def _beat(ids: list[int]) -> None:
    """Write the heartbeat of these turns (those still running).

    On PostgreSQL a turn whose row a write of its runner holds right now (the record store's
    fencing guard, until its commit) is skipped this beat — it is plainly alive — rather than
    waited for: two statements locking several turns in different orders could deadlock."""
    table = connection.ops.quote_name(Turn._meta.db_table)
    match, params = _ids_match(ids)
    if connection.vendor == "postgresql":
        match = f"id IN (SELECT id FROM {table} WHERE {match} AND status = %s FOR NO KEY UPDATE SKIP LOCKED)"
        params = [*params, str(Turn.Status.RUNNING)]
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET heartbeat_at = %s WHERE {match} AND status = %s",
            [connection.ops.adapt_datetimefield_value(timezone.now()), *params, Turn.Status.RUNNING],
        )


def _stopping(ids: list[int]) -> list[tuple[int, str, str]]:
    """``(id, status, cancel_requested_by)`` of those turns asked to stop or no longer running."""
    table = connection.ops.quote_name(Turn._meta.db_table)
    match, params = _ids_match(ids)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id, status, cancel_requested_by FROM {table} WHERE {match}"
            " AND (cancel_requested_at IS NOT NULL OR status <> %s)",
            [*params, Turn.Status.RUNNING],
        )
        return [(int(pk), str(status), str(by)) for pk, status, by in cursor.fetchall()]


_stale_checks: list[Callable[[], object]] = []


def stale_check_register(check: Callable[[], object]) -> None:
    """Run ``check`` on every stale-turn check of a serving process, after the turns are reaped
    (once, however often it is registered). A check that fails is logged and the others run."""
    if check not in _stale_checks:
        _stale_checks.append(check)


def _check_stale() -> None:
    turns_reap_stale()
    for check in list(_stale_checks):
        try:
            check()
        except Exception:  # one app's check must not stop the turns' (or fail a request)
            logger.exception("the stale check %s failed", getattr(check, "__qualname__", check))


_watcher: _Watcher | None = None
_watcher_lock = threading.Lock()


def _get_watcher() -> _Watcher:
    global _watcher
    with _watcher_lock:
        # A forked child (Celery prefork) starts its own: threads do not survive a fork.
        if _watcher is None or _watcher.pid != os.getpid():
            _watcher = _Watcher()
        return _watcher


def turn_watch(*, turn_id: int) -> TurnSignal:
    """Heart-beat ``turn_id`` from this process and tell its signal when it must stop."""
    return _get_watcher().watch(turn_id)


def turn_unwatch(*, turn_id: int) -> None:
    _get_watcher().unwatch(turn_id)


def turn_signal_local(*, turn_id: int, by: str) -> bool:
    """If this process runs ``turn_id``, stop it now (the cancel is also in the database, where
    any other process running it finds it); returns whether it runs here."""
    signal = _get_watcher().signal(turn_id)
    if signal is None:
        return False
    signal.stop(kind=CANCEL, by=by, reason=f"cancelled by {by or 'a user'}")
    return True


def lifecycle_stop(*, timeout: float = 10.0) -> None:
    """Stop this process's lifecycle thread (beats, cancel polls, stale checks) after its current
    pass: before its database goes away (a test run's end), where it would otherwise go on
    trying and logging every second. Turns still watched are no longer beaten."""
    with _watcher_lock:
        watcher = _watcher
    if watcher is not None:
        watcher.stop(timeout)


def lifecycle_start() -> bool:
    """Make this process a checker of stale turns (and of what ``stale_check_register`` added):
    check now, then every ``TURN_REAP_SECONDS``.

    Called by each serving process (the web process on its first request, a Celery worker when
    ready); returns True the first time, later calls do nothing. A database that cannot be
    reached now is tried again on the next check.
    """
    watcher = _get_watcher()
    with watcher.lock:
        if watcher.reaping:
            return False
        watcher.reaping = True
    try:
        _check_stale()
    except DatabaseError:
        logger.exception("the start-up check for interrupted turns failed; the periodic one will retry")
    finally:
        watcher.last_reap = time.monotonic()
    watcher.ensure_thread()
    return True


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def runner_gone(runner: str) -> bool:
    """Whether ``runner`` was a process of this host that is no longer there."""
    host, _, rest = runner.partition(":")
    pid_text, _, _boot = rest.partition(":")
    if host != socket.gethostname() or not pid_text.isdigit() or runner == runner_name():
        return False
    pid = int(pid_text)
    # Our own pid with another boot mark: we are that process's successor (a restart).
    return pid == os.getpid() or not _pid_alive(pid)


def turns_reap_stale(*, now: datetime | None = None, window: float | None = None) -> list[int]:
    """Mark interrupted every running turn whose runner is gone; return their ids.

    Gone: no heartbeat for ``window`` seconds (``TURN_HEARTBEAT_WINDOW_SECONDS``), or its runner
    was a process of this host that no longer exists. Each such turn keeps what it recorded and
    gets an error step saying why.
    """
    now = now or timezone.now()
    window = settings.TURN_HEARTBEAT_WINDOW_SECONDS if window is None else window
    cutoff = now - timedelta(seconds=window)
    silent = (
        Q(heartbeat_at__lt=cutoff)
        | Q(heartbeat_at__isnull=True, started_at__lt=cutoff)
        | Q(heartbeat_at__isnull=True, started_at__isnull=True, created_at__lt=cutoff)
    )
    running = Turn.objects.filter(status=Turn.Status.RUNNING)
    reaped: list[int] = []
    for pk, beat in running.filter(silent).values_list("pk", "heartbeat_at"):
        seen = (
            f"its last heartbeat was at {beat:%Y-%m-%d %H:%M:%S} UTC" if beat else "it never sent a heartbeat"
        )
        reason = (
            f"the process running this turn stopped: {seen}, and none came for {window:g} s. "
            "Everything it recorded until then is kept."
        )
        if _interrupt(pk, reason, silent):
            reaped.append(pk)
    host = socket.gethostname()
    for pk, runner in running.filter(runner__startswith=f"{host}:").values_list("pk", "runner"):
        if pk in reaped or not runner_gone(runner):
            continue
        pid = runner.split(":")[1]
        reason = (
            f"the process running this turn (pid {pid} on {host}) is gone: it was stopped or "
            "restarted before the turn finished. Everything it recorded until then is kept."
        )
        if _interrupt(pk, reason, Q(runner=runner)):
            reaped.append(pk)
    return reaped


# How long a turn may stay queued: handed to the runner once more after the first bound, failed
# after the second. Not in inspector/settings.py (yet): read with these defaults.
QUEUED_REDISPATCH_SECONDS = 120.0
QUEUED_FAIL_SECONDS = 3600.0


def queued_bounds() -> tuple[float, float]:
    """``(TURN_QUEUED_REDISPATCH_SECONDS, TURN_QUEUED_FAIL_SECONDS)``, as the settings say now."""
    return (
        float(getattr(settings, "TURN_QUEUED_REDISPATCH_SECONDS", QUEUED_REDISPATCH_SECONDS)),
        float(getattr(settings, "TURN_QUEUED_FAIL_SECONDS", QUEUED_FAIL_SECONDS)),
    )


@dataclass
class QueuedScan:
    """Where a process's next look for queued turns starts, so that a look every few seconds reads
    the newest turns by their primary key, not the whole table (no index has the status).

    ``floor``: ids below it were not queued at the last look, or were dealt with. ``top``: the
    highest id at the last look. The next floor is the lowest id still queued, or else the top of
    the look *before*: a turn whose creating transaction commits late (its id drawn before a look,
    visible only after it) is still read, unless that transaction outlived a whole interval.
    """

    floor: int = 0
    top: int = 0


@dataclass(frozen=True)
class QueuedRecovery:
    """What ``turns_recover_queued`` did: the turns it handed to the runner again, and those it failed."""

    redispatched: list[int]
    failed: list[int]


def turns_recover_queued(
    *, dispatch: Callable[[int], object], now: datetime | None = None, scan: QueuedScan | None = None
) -> QueuedRecovery:
    """Queued turns whose task may have been lost: hand each turn queued for
    ``TURN_QUEUED_REDISPATCH_SECONDS`` to ``dispatch`` once more — once: a conditional ``UPDATE``
    marks it (``heartbeat_at``, which only a claim sets otherwise), and of several processes
    checking at once only the one that marked it dispatches it — and mark failed each turn still
    queued after ``TURN_QUEUED_FAIL_SECONDS``, with an error step saying why.

    A task that was not lost after all runs the turn or finds it claimed (``turn_claim``): a turn
    runs once however many tasks it gets. ``scan``: read from where the last look of this process
    left off (``QueuedScan``); without, every queued turn is read.

    Raises:
        Exception: whatever ``dispatch`` raised (the broker cannot be reached): that turn is
            unmarked, so a later check hands it on again.
    """
    now = now or timezone.now()
    again_after, fail_after = queued_bounds()
    queued = Turn.objects.filter(status=Turn.Status.QUEUED)
    top = 0
    if scan is not None:
        top = Turn.objects.aggregate(top=Max("pk"))["top"] or 0
        queued = queued.filter(pk__gte=scan.floor)
    redispatched: list[int] = []
    failed: list[int] = []
    waiting: list[int] = []
    for pk, created, handed in queued.order_by("pk").values_list("pk", "created_at", "heartbeat_at"):
        age = (now - created).total_seconds()
        if age >= fail_after:
            if _fail_queued(pk, _never_started(age, handed is not None)):
                failed.append(pk)
            continue
        waiting.append(pk)
        if handed is None and age >= again_after and _redispatch(pk, now, age, dispatch):
            redispatched.append(pk)
    if scan is not None:
        scan.floor, scan.top = min([*waiting, scan.top + 1]), top
    return QueuedRecovery(redispatched=redispatched, failed=failed)


def _redispatch(turn_id: int, now: datetime, age: float, dispatch: Callable[[int], object]) -> bool:
    """Mark the queued turn handed on again, then hand it on, if no process has done so yet. The
    mark is ``heartbeat_at`` (``updated_at`` stays: browsers have nothing new to show)."""
    marked = Turn.objects.filter(pk=turn_id, status=Turn.Status.QUEUED, heartbeat_at__isnull=True)
    if not marked.update(heartbeat_at=now):
        return False
    try:
        dispatch(turn_id)
    except Exception:
        Turn.objects.filter(pk=turn_id, status=Turn.Status.QUEUED, heartbeat_at=now).update(heartbeat_at=None)
        raise
    logger.warning("turn %s was still queued after %.0f s: handed to the runner again", turn_id, age)
    return True


def _never_started(age: float, handed_again: bool) -> str:
    again = " (its task was sent again on the way)" if handed_again else ""
    return (
        f"the turn never started: no worker took it in the {age:.0f} s it was queued{again}. "
        "Its task may have been lost (the broker restarted without persistence) or no worker is "
        "running; ask again once a worker is up."
    )


def _fail_queued(turn_id: int, reason: str) -> bool:
    """Mark the turn failed if it is still queued, with an error step that says why."""
    now = timezone.now()
    # One transaction: nobody sees the turn failed without the step that says why.
    with transaction.atomic():
        marked = Turn.objects.filter(pk=turn_id, status=Turn.Status.QUEUED).update(
            status=Turn.Status.FAILED, error=reason, finished_at=now, updated_at=now
        )
        if not marked:
            return False
        turn_step_record(turn_id=turn_id, title="the turn never started", error=reason)
    logger.warning("turn %s failed: %s", turn_id, reason)
    return True


# What a step the dead runner left open says: it never got an answer (its duration is unknown).
UNFINISHED_STEP = "not finished: the turn was interrupted while this step was in progress"


def _interrupt(turn_id: int, reason: str, still: Q) -> bool:
    """Mark the turn interrupted if it is still running and ``still`` holds: steps it left open
    end as errors (no longer "waiting"), everything else it recorded stays as it is, and an error
    step says why."""
    now = timezone.now()
    # One transaction: nobody sees the turn interrupted without the step that says why.
    with transaction.atomic():
        marked = Turn.objects.filter(still, pk=turn_id, status=Turn.Status.RUNNING).update(
            status=Turn.Status.INTERRUPTED, error=reason, finished_at=now, updated_at=now
        )
        if not marked:
            return False
        Step.objects.filter(turn_id=turn_id, status=Step.Status.RUNNING).update(
            status=Step.Status.ERROR, error=UNFINISHED_STEP, updated_at=now
        )
        turn_step_record(turn_id=turn_id, title="the turn was interrupted", error=reason)
    logger.warning("turn %s interrupted: %s", turn_id, reason)
    return True


def turn_step_record(*, turn_id: int, title: str, error: str) -> None:
    """Add one closed error step to a turn that has ended without its runner saying so (an
    interruption, a cancel before it started), and ring the turn's doorbell."""
    with transaction.atomic():
        turn = Turn.objects.select_related("conversation").get(pk=turn_id)
        # Inside a transaction the recorder writes in this thread: the step, the index and the
        # seal commit together, with whatever the caller changed in the same transaction.
        recorder = TurnRecorder(turn)
        step = recorder.step_open(kind="error", title=title)
        recorder.step_close(step, status="error", error=error)
        recorder.drain()
        index_last_request_whole(turn_id)
        # The turn has ended: sealed like one its runner ended (conversations.record.integrity).
        recorder.seal()
        transaction.on_commit(recorder.turn_changed)


def _release_connection() -> None:
    """The lifecycle thread holds no database connection between its passes."""
    if connection.in_atomic_block:
        return
    connection.close()
