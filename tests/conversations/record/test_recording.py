"""The recorder against the real database: what the loop saw goes out before it waits again, in
one transaction per step, with the exchanges in hash-chain order; on PostgreSQL the process's
record writer commits it while the loop goes on, and rings each row's doorbell only after."""

from __future__ import annotations

import gc
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from django.contrib.auth.models import User
from django.db import DataError, connection, transaction
from pytest_django.fixtures import Settings

from conversations.loop.wire import WireExchange
from conversations.models import Conversation, Exchange, ModelProfile, Step, Turn
from conversations.record import recording
from conversations.record.connections import BIG_RECORD_CHARS
from conversations.record.exchanges import exchange_rows, server_records_store
from conversations.record.recording import TurnRecorder
from conversations.record.store import FenceRefused
from conversations.record.verification import conversation_verify
from conversations.record.writer import RecordWriter, process_writer, writes_flush
from conversations.secret_sources import active_redactor
from inspector import live
from tests.support import other_connection, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def turn() -> Iterator[Turn]:
    alice = User.objects.create_user("alice")
    profile = ModelProfile.objects.create(name="p-alice", model="demo", is_demo=True)
    conversation = Conversation.objects.create(owner=alice, title="weather", model_profile=profile)
    yield Turn.objects.create(
        conversation=conversation, seq=1, question="Weather?", paradigm="native", tool_choice="auto"
    )
    # What a test handed the writer is committed before the test database is flushed: a commit
    # (its deferred checks, the fence's row lock) racing the flush's TRUNCATE deadlocks.
    writes_flush()


def _exchange(label: str) -> WireExchange:
    return WireExchange(
        channel="mcp", label=label, started_at=datetime.now(UTC), request_body="{}", response_body="{}"
    )


def test_a_steps_updates_go_out_with_the_next_step_and_are_committed_by_drain(turn: Turn) -> None:
    recorder = TurnRecorder(turn)
    decide = recorder.step_open(kind="decide", title="model call 1")
    recorder.step_save(decide, text="I will call the weather tool", exchanges=[_exchange("llm")])
    recorder.step_save(decide, title="calls get_weather_forecast", calls=[{"name": "get_weather_forecast"}])

    tool = recorder.step_open(kind="tool", title="demo/get_weather_forecast", parent=decide)
    recorder.drain()

    written = Step.objects.get(pk=decide)
    assert written.text == "I will call the weather tool"
    assert written.title == "calls get_weather_forecast"
    assert written.calls == [{"name": "get_weather_forecast"}]
    assert list(Exchange.objects.filter(step_id=decide).values_list("label", flat=True)) == ["llm"]
    assert Step.objects.get(pk=tool).parent_id == decide


def test_flushing_writes_the_last_close_and_keeps_the_hash_chain_intact(turn: Turn) -> None:
    recorder = TurnRecorder(turn)
    decide = recorder.step_open(kind="decide", title="model call 1")
    recorder.step_save(decide, exchanges=[_exchange("first"), _exchange("second")])
    tool = recorder.step_open(kind="tool", title="demo/calculate", parent=decide)
    recorder.step_close(tool, status="ok", result={"content": []}, exchanges=[_exchange("tools/call")])
    recorder.step_close(decide, status="ok")
    recorder.turn_save("answer")

    recorder.drain()

    assert Step.objects.get(pk=tool).status == "ok"
    assert Step.objects.get(pk=decide).finished_at is not None
    labels = list(Exchange.objects.filter(turn=turn).order_by("seq").values_list("label", flat=True))
    assert labels == ["first", "second", "tools/call"]
    assert conversation_verify(conversation=turn.conversation).intact


def test_a_flush_with_nothing_pending_writes_nothing(turn: Turn, django_assert_num_queries: object) -> None:
    recorder = TurnRecorder(turn)

    with django_assert_num_queries(0):  # type: ignore[operator]
        recorder.flush()


def test_unknown_step_fields_are_refused_before_anything_is_written(turn: Turn) -> None:
    recorder = TurnRecorder(turn)
    step = recorder.step_open(kind="decide", title="model call 1")

    with pytest.raises(TypeError, match="not Step fields: colour"):
        recorder.step_save(step, colour="blue")


@pytest.mark.postgres
def test_between_writes_the_recorder_holds_no_pooled_connection(turn: Turn) -> None:
    if not connection.settings_dict["OPTIONS"].get("pool"):
        pytest.fail("the Postgres pass runs with the connection pool configured")
    recorder = TurnRecorder(turn)

    step = recorder.step_open(kind="decide", title="model call 1")

    assert connection.connection is None
    recorder.step_close(step, status="ok")
    recorder.drain()
    assert connection.connection is None
    assert Step.objects.get(pk=step).status == "ok"


@contextmanager
def _turn_row_locked(turn: Turn) -> Iterator[None]:
    """Hold the turn's row lock from another connection: a write that updates the turn waits."""
    with other_connection() as other:
        other.execute("SELECT 1 FROM conversations_turn WHERE id = %s FOR UPDATE", [turn.pk])
        yield
        other.rollback()


@pytest.mark.postgres
def test_the_loop_goes_on_while_the_writer_waits_for_the_database(turn: Turn) -> None:
    recorder = TurnRecorder(turn)
    assert recorder.deferred

    with _turn_row_locked(turn):
        recorder.turn_save("status")
        step = recorder.step_open(kind="decide", title="model call 1")
        recorder.step_close(step, status="ok", text="four")
        tool = recorder.step_open(kind="tool", title="demo/calculate", parent=step)
        # Both calls returned while the first write is still blocked on the lock.
        assert not Step.objects.filter(pk__in=[step, tool]).exists()

    recorder.drain()
    assert Step.objects.get(pk=step).text == "four"
    assert Step.objects.get(pk=tool).parent_id == step


@pytest.fixture
def preparations(monkeypatch: pytest.MonkeyPatch) -> list[tuple[recording._Batch, str]]:
    """Each batch the writer prepares from now on, with the name of the thread that prepared it."""
    made: list[tuple[recording._Batch, str]] = []
    real = recording._Batch.prepare

    def noting(batch: recording._Batch) -> None:
        first = not batch.prepared
        real(batch)
        if first:
            made.append((batch, threading.current_thread().name))

    monkeypatch.setattr(recording._Batch, "prepare", noting)
    return made


@pytest.mark.postgres
def test_the_next_batches_are_prepared_while_the_database_works_on_a_write(
    turn: Turn, preparations: list[tuple[recording._Batch, str]]
) -> None:
    def opened() -> list[int]:
        return [batch.step.pk for batch, _ in preparations if batch.step is not None]

    recorder = TurnRecorder(turn)
    with _turn_row_locked(turn):
        recorder.turn_save("status")
        first = recorder.step_open(kind="decide", title="model call 1")
        # The first write waits on the lock; the steps after it are made ready meanwhile.
        assert wait_until(lambda: first in opened(), DUE)
        second = recorder.step_open(kind="decide", title="model call 2")
        recorder.step_save(second, exchanges=[_exchange("llm")])
        third = recorder.step_open(kind="decide", title="model call 3")
        assert wait_until(lambda: opened() == [first, second, third], DUE)
        assert not Step.objects.filter(pk__in=[first, second, third]).exists()

    recorder.drain()
    assert Step.objects.filter(pk__in=[first, second, third]).count() == 3
    assert Exchange.objects.get(turn=turn).step_id == second
    assert conversation_verify(conversation=turn.conversation).intact
    # A batch that finds the writer idle is made by the writer itself (no hand-over between
    # threads on its way to the page); those queued behind a write, by the preparer.
    threads = [thread for batch, thread in preparations if batch.step is not None]
    assert threads == ["record-writer", "record-preparer", "record-preparer"]


@pytest.mark.postgres
def test_many_turns_recording_at_once_keep_every_record_and_every_chain_whole(
    turn: Turn, preparations: list[tuple[recording._Batch, str]]
) -> None:
    def turns_prepared_by_the_preparer() -> set[int]:
        return {batch.owner.turn.pk for batch, thread in preparations if thread == "record-preparer"}

    turns = [turn]
    for n in range(1, 8):
        conversation = Conversation.objects.create(
            owner=turn.conversation.owner, title=f"c{n}", model_profile=turn.conversation.model_profile
        )
        turns.append(
            Turn.objects.create(
                conversation=conversation, seq=1, question="Weather?", paradigm="native", tool_choice="auto"
            )
        )
    steps_per_turn = 25
    errors: list[BaseException] = []

    def run(this: Turn) -> None:
        try:
            recorder = TurnRecorder(this)
            recorder.turn_save("question")
            for n in range(steps_per_turn):
                decide = recorder.step_open(kind="decide", title=f"model call {n}")
                recorder.step_save(decide, text=f"call {n}", exchanges=[_exchange(f"llm {n}")])
                tool = recorder.step_open(kind="tool", title="demo/calculate", parent=decide)
                recorder.step_close(tool, status="ok", exchanges=[_exchange(f"tools/call {n}")])
                recorder.step_close(decide, status="ok")
            recorder.drain()
        except BaseException as exc:  # noqa: BLE001 — reported below
            errors.append(exc)
        finally:
            connection.close()  # this thread's own

    threads = [threading.Thread(target=run, args=(this,)) for this in turns]
    # The first turn's first write waits on its row's lock while every turn hands batches over:
    # the preparer makes them ready meanwhile, the rest is written as it comes.
    with _turn_row_locked(turn):
        for thread in threads:
            thread.start()
        assert wait_until(lambda: len(turns_prepared_by_the_preparer()) > 1, DUE)
    for thread in threads:
        thread.join(60)

    assert not errors
    for this in turns:
        labels = list(Exchange.objects.filter(turn=this).order_by("seq").values_list("label", flat=True))
        assert labels == [label for n in range(steps_per_turn) for label in (f"llm {n}", f"tools/call {n}")]
        assert Step.objects.filter(turn=this, status="ok").count() == 2 * steps_per_turn
        assert conversation_verify(conversation=this.conversation).intact


@pytest.mark.postgres
def test_a_batch_that_cannot_be_made_ready_fails_its_turn_alone_and_the_writer_goes_on(
    turn: Turn, monkeypatch: pytest.MonkeyPatch
) -> None:
    other_turn = Turn.objects.create(
        conversation=turn.conversation, seq=2, question="And tomorrow?", paradigm="native", tool_choice="auto"
    )
    bad, good = TurnRecorder(turn), TurnRecorder(other_turn)
    real = exchange_rows

    def broken(records: list[WireExchange], **kwargs: object) -> list[Exchange]:
        if any(record.label == "poison" for record in records):
            raise ValueError("this record could not be made a row")
        return real(records, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(recording, "exchange_rows", broken)
    failed = bad.step_open(kind="decide", title="model call 1")
    bad.step_save(failed, exchanges=[_exchange("poison")])
    after = bad.step_open(kind="decide", title="model call 2")
    kept = good.step_open(kind="decide", title="model call 1")
    good.step_save(kept, exchanges=[_exchange("llm")])

    with pytest.raises(ValueError, match="could not be made a row"):
        bad.drain()
    good.drain()
    assert Exchange.objects.get(turn=other_turn).step_id == kept
    # The first step's batch was written; the one that failed (the first step's update, its
    # exchange and the step it opened) was not written half-way.
    assert Step.objects.filter(pk=failed).exists()
    assert not Step.objects.filter(pk=after).exists()
    assert not Exchange.objects.filter(turn=turn).exists()
    # Both threads live on: once the loop has heard of the error, its turn records again.
    error_step = bad.step_open(kind="error", title="internal error")
    bad.drain()
    assert Step.objects.filter(pk=error_step).exists()


@pytest.mark.postgres
def test_a_doorbell_rings_only_after_its_row_is_committed(
    turn: Turn, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[int, str | None]] = []

    def ring(*, conversation_id: object, turn_id: int, step_id: int) -> None:
        # Read from a fresh connection: only committed rows are visible there.
        with other_connection() as other:
            row = other.execute("SELECT status FROM conversations_step WHERE id = %s", [step_id]).fetchone()
        seen.append((step_id, row[0] if row else None))

    monkeypatch.setattr(live, "publish_step_changed", ring)
    recorder = TurnRecorder(turn)
    step = recorder.step_open(kind="decide", title="model call 1")
    recorder.step_close(step, status="ok")
    recorder.drain()

    # Two batches, written apart or together: every ring finds its row, the last one closed.
    assert seen and all(ring_step == step and status is not None for ring_step, status in seen)
    assert seen[-1] == (step, "ok")


@pytest.mark.postgres
def test_ids_come_from_the_tables_sequence_so_other_writers_never_collide(turn: Turn) -> None:
    recorder = TurnRecorder(turn)
    opened = [recorder.step_open(kind="decide", title=f"model call {n}") for n in range(1, 4)]
    # A row written the ordinary way meanwhile (another process, the admin) gets a later id.
    other = Step.objects.create(turn=turn, seq=99, kind="error", title="elsewhere")
    later = recorder.step_open(kind="decide", title="model call 4")
    recorder.drain()

    assert opened == sorted(opened) and other.pk > max(opened)
    assert later not in {*opened, other.pk}
    assert Step.objects.filter(turn=turn).count() == 5


@pytest.mark.postgres
def test_a_turns_first_steps_take_ids_reserved_with_its_starting_points(
    turn: Turn, django_assert_num_queries: object
) -> None:
    """The recorder's one starting query reserves the first block of step ids: the loop's
    first steps open without a round trip of their own; the next block is reserved when it runs out."""
    recorder = TurnRecorder(turn)
    with django_assert_num_queries(0):  # type: ignore[operator]
        first = [
            recorder.step_open(kind="decide", title=f"model call {n}")
            for n in range(recording._ID_BLOCK_FIRST)
        ]
    with django_assert_num_queries(1):  # type: ignore[operator]
        more = recorder.step_open(kind="decide", title="one more")
    recorder.drain()

    assert first == sorted(first) and len(set(first)) == len(first) and more > max(first)
    assert set(Step.objects.filter(turn=turn).values_list("pk", flat=True)) == {*first, more}


def _discarded_by_the_pool() -> int:
    """How many connections the pool has been given back closed (``conversations.record.connections``)."""
    return int(connection.pool.get_stats().get("returns_bad", 0))  # type: ignore[attr-defined]


@pytest.mark.postgres
@pytest.mark.parametrize("chars", [BIG_RECORD_CHARS - 1, BIG_RECORD_CHARS])
def test_the_writers_connection_is_not_pooled_again_after_carrying_a_big_record(
    turn: Turn, chars: int, caplog: pytest.LogCaptureFixture
) -> None:
    """libpq keeps a connection's buffers at the biggest message it carried: the writer closes
    a connection that wrote a big record instead of giving it back, and the pool says nothing
    of it (it warns of other closed connections)."""
    before = _discarded_by_the_pool()
    recorder = TurnRecorder(turn)
    step = recorder.step_open(kind="tool", title="a result")
    big = WireExchange(
        channel="mcp",
        label="tools/call",
        started_at=datetime.now(UTC),
        request_body="{}",
        response_body="x" * chars,
    )
    recorder.step_close(step, status="ok", exchanges=[big])
    recorder.drain()

    assert recorder.carried_big is (chars >= BIG_RECORD_CHARS)
    assert Exchange.objects.get(turn=turn).response_body == "x" * chars
    if chars >= BIG_RECORD_CHARS:
        assert wait_until(lambda: _discarded_by_the_pool() > before, DUE)
    else:
        time.sleep(0.2)  # what the writer does after its write (it is given back at once)
        assert _discarded_by_the_pool() == before
    assert "discarding closed connection" not in caplog.text


@pytest.mark.postgres
def test_once_written_nothing_of_a_batch_is_kept_while_the_writer_waits(turn: Turn) -> None:
    """A batch holds its records' bodies (a 10 MB tool result): the writer must not keep the
    last one it wrote alive until the next write comes."""
    recorder = TurnRecorder(turn)
    step = recorder.step_open(kind="tool", title="a result")
    record = _exchange("tools/call")
    kept = weakref.ref(record)
    recorder.step_close(step, status="ok", exchanges=[record])
    del record
    recorder.drain()

    assert wait_until(lambda: gc.collect() >= 0 and kept() is None, DUE)


# Long enough that a write made before it ends was made for another reason than its end.
LONG_LINGER = 60.0


# How long a write that is due may take to show.
DUE = 15.0


@pytest.fixture
def counted_writes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of batches in each write the process's writer makes from now on."""
    writes: list[int] = []
    writer = process_writer(recording._write)
    real = writer._write

    def counting(batches: Sequence[recording._Batch]) -> None:
        real(batches)
        writes.append(len(batches))

    monkeypatch.setattr(writer, "_write", counting)
    return writes


def _right_after_a_write(turn: Turn, settings: Settings) -> TurnRecorder:
    """A recorder of ``turn`` whose first step the writer (lingering ``LONG_LINGER``) has just
    written: at once, since it came after a quiet spell."""
    settings.RECORD_WRITE_LINGER_SECONDS = LONG_LINGER
    process_writer(recording._write)._last_write = -float("inf")  # its last write long ago
    recorder = TurnRecorder(turn)
    first = recorder.step_open(kind="decide", title="model call 1")
    assert wait_until(lambda: Step.objects.filter(pk=first).exists(), DUE)
    return recorder


@pytest.mark.postgres
def test_while_batches_keep_coming_the_writer_waits_for_more_and_a_drain_ends_the_wait(
    turn: Turn, settings: Settings, counted_writes: list[int]
) -> None:
    recorder = _right_after_a_write(turn, settings)
    # Right after that write, the next batches wait for more.
    steps = [recorder.step_open(kind="decide", title=f"model call {n}") for n in range(2, 5)]
    time.sleep(0.2)
    assert not Step.objects.filter(pk__in=steps).exists()

    started = time.monotonic()
    recorder.drain()

    assert time.monotonic() - started < LONG_LINGER / 4  # the drain did not wait the linger out
    assert Step.objects.filter(pk__in=steps).count() == 3
    assert counted_writes == [1, 3]


@pytest.mark.postgres
def test_a_long_queue_is_written_at_once_without_a_drain(
    turn: Turn, settings: Settings, counted_writes: list[int]
) -> None:
    recorder = _right_after_a_write(turn, settings)
    steps = [
        recorder.step_open(kind="decide", title=f"model call {n}")
        for n in range(2, 2 + RecordWriter.LINGER_MOST)
    ]

    assert wait_until(lambda: Step.objects.filter(pk__in=steps).count() == len(steps), LONG_LINGER / 4)
    recorder.drain()
    assert counted_writes[0] == 1 and sum(counted_writes) == 1 + len(steps)


@pytest.mark.postgres
def test_with_no_linger_each_batch_is_written_as_it_comes(
    turn: Turn, settings: Settings, counted_writes: list[int]
) -> None:
    settings.RECORD_WRITE_LINGER_SECONDS = 0
    recorder = TurnRecorder(turn)
    steps = []
    for n in range(1, 4):
        steps.append(recorder.step_open(kind="decide", title=f"model call {n}"))
        assert wait_until(lambda: Step.objects.filter(pk__in=steps).count() == len(steps), DUE)
    recorder.drain()

    assert counted_writes == [1, 1, 1]


@pytest.mark.postgres
def test_a_write_that_fails_is_raised_to_the_loop_and_costs_other_turns_nothing(turn: Turn) -> None:
    other_turn = Turn.objects.create(
        conversation=turn.conversation, seq=2, question="And tomorrow?", paradigm="native", tool_choice="auto"
    )
    bad, good = TurnRecorder(turn), TurnRecorder(other_turn)

    with _turn_row_locked(turn):
        # Both turns' batches queue behind the lock and are written together.
        bad.turn_save("question")
        first = bad.step_open(kind="decide", title="model call 1")
        bad.step_close(first, status="x" * 40)  # longer than the column: the database refuses it
        after_bad = bad.step_open(kind="decide", title="model call 2")
        kept = good.step_open(kind="decide", title="model call 1")
        good.step_close(kept, status="ok")
        good.flush()

    with pytest.raises(DataError, match="too long"):
        bad.drain()
    good.drain()

    assert Step.objects.get(pk=kept).status == "ok"
    assert Step.objects.filter(pk=first).exists()
    # The batch after the failed one was dropped, not written half-way.
    assert not Step.objects.filter(pk=after_bad).exists()
    # Once the loop has heard of the error, the recorder records again (the runner's error step).
    error_step = bad.step_open(kind="error", title="internal error")
    bad.drain()
    assert Step.objects.filter(pk=error_step).exists()


@pytest.mark.postgres
def test_a_write_with_more_values_than_one_statement_can_bind_is_still_written_whole(turn: Turn) -> None:
    # A chatty server: thousands of notifications during one call (17 values per exchange).
    recorder = TurnRecorder(turn)
    tool = recorder.step_open(kind="tool", title="demo/long_running")
    many = [_exchange(f"notifications/progress {n}") for n in range(4000)]
    recorder.step_close(tool, status="ok", exchanges=many)
    after = recorder.step_open(kind="decide", title="model call 2")
    recorder.drain()

    labels = list(Exchange.objects.filter(step_id=tool).order_by("seq").values_list("label", flat=True))
    assert labels == [f"notifications/progress {n}" for n in range(4000)]
    assert Step.objects.get(pk=tool).status == "ok"
    assert Step.objects.filter(pk=after).exists()
    assert conversation_verify(conversation=turn.conversation).intact


@pytest.mark.postgres
def test_inside_a_callers_transaction_the_rows_are_written_inline(turn: Turn) -> None:
    with transaction.atomic():
        recorder = TurnRecorder(turn)
        step = recorder.step_open(kind="decide", title="model call 1")

        assert not recorder.deferred
        assert Step.objects.filter(pk=step).exists()


def _running(turn: Turn) -> Turn:
    Turn.objects.filter(pk=turn.pk).update(status=Turn.Status.RUNNING, runner="this-process")
    turn.refresh_from_db()
    return turn


def test_a_runners_end_keeps_what_other_processes_wrote_meanwhile_and_seals(turn: Turn) -> None:
    mine = _running(turn)
    later = datetime.now(UTC)
    Turn.objects.filter(pk=turn.pk).update(heartbeat_at=later, cancel_requested_by="alice")
    mine.mark_done("Sunny.")

    assert TurnRecorder(mine).turn_end() is None

    stored = Turn.objects.get(pk=turn.pk)
    assert (stored.status, stored.answer) == (Turn.Status.DONE, "Sunny.")
    assert (stored.heartbeat_at, stored.cancel_requested_by) == (later, "alice")
    assert stored.seal and conversation_verify(conversation=turn.conversation).intact


@pytest.mark.parametrize("ending", [Turn.Status.INTERRUPTED, "missing"])
def test_a_runners_end_writes_nothing_over_a_turn_ended_elsewhere(turn: Turn, ending: str) -> None:
    mine = _running(turn)
    if ending == "missing":
        Turn.objects.filter(pk=turn.pk).delete()
    else:
        Turn.objects.filter(pk=turn.pk).update(status=ending, error="the heartbeat was lost")
    mine.mark_done("Sunny.")

    assert TurnRecorder(mine).turn_end() == ending

    stored = Turn.objects.filter(pk=turn.pk).values("status", "answer", "seal").first()
    assert stored is None if ending == "missing" else stored == {"status": ending, "answer": "", "seal": ""}


def test_a_runners_end_writes_nothing_over_a_turn_claimed_again(turn: Turn) -> None:
    mine = _running(turn)
    Turn.objects.filter(pk=turn.pk).update(claim=2)
    mine.mark_done("Sunny.")

    assert TurnRecorder(mine, claim=1).turn_end() == "reclaimed"

    assert Turn.objects.values_list("status", "answer", "seal").get(pk=turn.pk) == (
        Turn.Status.RUNNING,
        "",
        "",
    )


def test_a_fenced_recorder_whose_turn_ended_elsewhere_writes_nothing_and_says_so(turn: Turn) -> None:
    Turn.objects.filter(pk=turn.pk).update(status=Turn.Status.RUNNING, claim=7)
    recorder = TurnRecorder(Turn.objects.get(pk=turn.pk), claim=7)
    kept = recorder.step_open(kind="decide", title="model call 1")
    recorder.drain()
    Turn.objects.filter(pk=turn.pk).update(status=Turn.Status.INTERRUPTED)

    # Inline (SQLite) the refusal comes at once; through the writer thread, at the drain.
    with pytest.raises(FenceRefused):
        recorder.step_close(kept, status="error", error="from a stale runner")
        recorder.step_open(kind="decide", title="model call 2")
        recorder.drain()
    with pytest.raises(FenceRefused):  # and from then on every write is refused
        recorder.step_open(kind="error", title="the database failed")

    assert list(Step.objects.filter(turn=turn).values_list("pk", "status", "error")) == [
        (kept, "running", "")
    ]


@pytest.mark.parametrize("thread", ["_thread", "_preparer"])
def test_waiting_on_a_writer_whose_thread_is_gone_fails_instead_of_hanging(thread: str) -> None:
    writer = RecordWriter(recording._write)
    dead = threading.Thread(target=lambda: None)
    dead.start()
    dead.join()
    setattr(writer, thread, dead)
    owner = SimpleNamespace(_outstanding=1, _drained=threading.Event())  # one batch not written

    with pytest.raises(RuntimeError, match="record writer stopped"):
        writer.wait(owner)  # type: ignore[arg-type]


def test_every_exchange_names_its_turns_conversation_and_a_server_record_none(turn: Turn) -> None:
    recorder = TurnRecorder(turn)
    decide = recorder.step_open(kind="decide", title="model call 1")
    recorder.step_save(decide, exchanges=[_exchange("llm")])
    recorder.step_close(decide, status="ok", exchanges=[_exchange("tools/call")])
    recorder.turn_save("answer")
    recorder.drain()
    server_records_store([_exchange("notifications/message")])

    rows = Exchange.objects.order_by("seq", "id").values_list("label", "conversation_id")
    assert sorted(rows) == sorted(
        [("llm", turn.conversation_id), ("tools/call", turn.conversation_id), ("notifications/message", None)]
    )


def test_an_exchange_of_a_turn_is_not_made_without_its_conversation(turn: Turn) -> None:
    redact = active_redactor()
    with pytest.raises(ValueError, match="conversation_id"):
        exchange_rows([_exchange("llm")], turn_id=turn.pk, step_id=None, redact=redact)


def test_exchanges_saved_or_bulk_created_through_the_orm_get_their_turns_conversation(turn: Turn) -> None:
    saved = Exchange.objects.create(turn=turn, channel="llm", label="saved")
    bulk = Exchange.objects.bulk_create(
        [Exchange(turn=turn, channel="llm", label="bulk"), Exchange(channel="mcp", label="loose")]
    )

    assert Exchange.objects.get(pk=saved.pk).conversation_id == turn.conversation_id
    assert [Exchange.objects.get(pk=row.pk).conversation_id for row in bulk] == [turn.conversation_id, None]
