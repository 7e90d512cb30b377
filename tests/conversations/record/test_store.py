"""The record store's contract, held by both stores (``conversations.record``): the ORM
reference on every database, PostgreSQL's fast path (COPY, pipelined executemany) on PostgreSQL.
A batch is written whole and in order or not at all, each value as its model field prepares it,
and its commit callbacks run only once it is committed."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from django.db import DataError, IntegrityError, connection, models, transaction
from pytest_django.fixtures import Settings

from conversations.escaping import storable_text
from conversations.models import SEARCH_SPAN_MOST, AuditEvent, Exchange, Step, Turn
from conversations.record.orm import OrmStore
from conversations.record.postgres import COPY_FROM_ROWS, PostgresStore
from conversations.record.store import Batch, FenceRefused, Insert, RecordStore, model_row, record_store
from tests.factories import StepFactory, TurnFactory

pytestmark = pytest.mark.django_db(transaction=True)

STORES = [
    pytest.param(OrmStore, id="orm"),
    pytest.param(PostgresStore, id="postgres", marks=pytest.mark.postgres),
]


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest) -> RecordStore:
    made: RecordStore = request.param()
    return made


@pytest.fixture
def turn() -> Turn:
    return TurnFactory(status=Turn.Status.RUNNING, answer="")


def _next_step_ids(count: int) -> list[int]:
    """Ids no step has (a step with its id is how the recorder hands new steps over)."""
    top = Step.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    return [top + 1000 + n for n in range(count)]


def _step(turn: Turn, pk: int | None, seq: int, **values: Any) -> Step:
    return Step(pk=pk, turn_id=turn.pk, seq=seq, kind=Step.Kind.DECIDE, **{"title": f"step {seq}", **values})


def _exchange(turn: Turn, step: Step | None, seq: int = 0, **values: Any) -> Exchange:
    return Exchange(
        turn_id=turn.pk,
        conversation_id=turn.conversation_id,
        step_id=step.pk if step is not None else None,
        seq=seq,
        **{
            "channel": Exchange.Channel.LLM,
            "label": "POST /chat/completions",
            "started_at": datetime.now(UTC),
            **values,
        },
    )


def test_new_and_changed_rows_are_written_in_order(store: RecordStore, turn: Turn) -> None:
    first_id, second_id = _next_step_ids(2)
    first, second = _step(turn, first_id, 1), _step(turn, second_id, 2, parent_id=first_id)
    batch = Batch()
    batch.insert([first, second])
    batch.insert([_exchange(turn, first, 1), _exchange(turn, second, 2)])
    batch.update(Step, first_id, {"text": "so far"})
    batch.update(Step, second_id, {"text": "second"})
    batch.update(Step, first_id, {"text": "at last", "status": Step.Status.OK})
    batch.update(Turn, turn.pk, {"answer": "done"})

    store.write(batch)

    steps = {step.pk: step for step in Step.objects.filter(turn=turn)}
    assert (steps[first_id].text, steps[first_id].status) == ("at last", Step.Status.OK)
    assert (steps[second_id].text, steps[second_id].parent_id) == ("second", first_id)
    exchanges = list(Exchange.objects.filter(turn=turn).order_by("seq").values_list("step_id", flat=True))
    assert exchanges == [first_id, second_id]
    turn.refresh_from_db()
    assert turn.answer == "done"
    assert not first._state.adding and first._state.db == "default"


def test_changes_of_the_same_fields_named_in_another_order_each_go_to_their_own_field(
    store: RecordStore, turn: Turn
) -> None:
    first, second = StepFactory(turn=turn, seq=1), StepFactory(turn=turn, seq=2)
    batch = Batch()
    batch.update(Step, first.pk, {"text": "first", "status": Step.Status.OK})
    batch.update(Step, second.pk, {"status": Step.Status.ERROR, "text": "second"})

    store.write(batch)

    stored = dict(Step.objects.filter(turn=turn).values_list("pk", "text"))
    assert stored == {first.pk: "first", second.pk: "second"}
    assert Step.objects.get(pk=second.pk).status == Step.Status.ERROR


def test_new_rows_without_ids_are_given_theirs(store: RecordStore, turn: Turn) -> None:
    events = [
        AuditEvent(actor_name="system", action=AuditEvent.Action.SEALED, detail={"n": n}) for n in range(3)
    ]
    batch = Batch()
    batch.insert(events)

    store.write(batch)

    assert all(event.pk is not None and not event._state.adding for event in events)
    stored = dict(
        AuditEvent.objects.filter(pk__in=[event.pk for event in events]).values_list("pk", "detail")
    )
    assert stored == {event.pk: event.detail for event in events}


class _Lowered(models.CharField):  # type: ignore[type-arg]
    """A custom field whose preparation changes the value (what the ORM stores is lowered)."""

    def get_prep_value(self, value: Any) -> Any:
        value = super().get_prep_value(value)
        return value.lower() if isinstance(value, str) else value


@pytest.fixture
def lowered_label(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``Exchange.label`` as a ``_Lowered`` field for the test (the column is the same)."""
    monkeypatch.setattr(Exchange._meta.get_field("label"), "__class__", _Lowered)
    monkeypatch.setattr(Step._meta.get_field("title"), "__class__", _Lowered)
    yield


@pytest.mark.usefixtures("lowered_label")
def test_a_custom_fields_preparation_is_applied_as_the_orm_applies_it(store: RecordStore, turn: Turn) -> None:
    by_orm = _exchange(turn, None, 1, label="MiXeD")
    by_orm.save()
    (step_id,) = _next_step_ids(1)
    by_store = _exchange(turn, None, 2, label="MiXeD")
    batch = Batch()
    batch.insert([by_store])
    batch.insert([_step(turn, step_id, 1)])
    batch.update(Step, step_id, {"title": "ChAnGeD"})

    store.write(batch)

    labels = dict(Exchange.objects.filter(turn=turn).values_list("seq", "label"))
    assert labels == {1: "mixed", 2: "mixed"}
    assert Step.objects.get(pk=step_id).title == "changed"


def test_json_datetimes_and_big_text_come_back_as_they_were_given(store: RecordStore, turn: Turn) -> None:
    headers = {"x-list": ["é", 1, 2.5, None, True, {"deep": {"er": []}}], "quote": "\"'\\\n\t"}
    started = datetime(2026, 12, 5, 9, 30, 1, 123456, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    body = "δ" * 3_000_000 + "\\N\t\r\n end"  # COPY's own markers among the characters
    row = _exchange(turn, None, 1, request_headers=headers, request_body=body, duration_ms=0.125)
    row.started_at = started
    (step_id,) = _next_step_ids(1)
    batch = Batch()
    batch.insert([row])
    batch.insert([_step(turn, step_id, 1)])
    batch.update(
        Step, step_id, {"calls": [{"name": "x", "arguments": {"a": [1, "b"]}}], "finished_at": started}
    )

    store.write(batch)

    stored = Exchange.objects.get(pk=row.pk) if row.pk else Exchange.objects.get(turn=turn)
    assert stored.request_headers == headers
    assert stored.started_at == started
    assert stored.request_body == body
    assert stored.duration_ms == 0.125
    step = Step.objects.get(pk=step_id)
    assert (step.calls, step.finished_at) == ([{"name": "x", "arguments": {"a": [1, "b"]}}], started)


def test_many_new_rows_at_once_are_written_whole_with_their_ids(store: RecordStore, turn: Turn) -> None:
    """Enough rows that PostgreSQL's store takes ``COPY``: its own markers in the values too."""
    count = COPY_FROM_ROWS + 3
    texts = [f"row {n}\\N\t\\.\r\n{{}}" for n in range(count)]
    rows = [
        _exchange(turn, None, n, response_body=text, request_headers={"n": [n, None]})
        for n, text in enumerate(texts)
    ]
    (step_id,) = _next_step_ids(1)
    batch = Batch()
    batch.insert([_step(turn, step_id, 1)])
    batch.insert(rows)
    batch.update(Step, step_id, {"text": "after the rows"})

    store.write(batch)

    stored = list(
        Exchange.objects.filter(turn=turn)
        .order_by("seq")
        .values_list("pk", "response_body", "request_headers")
    )
    assert stored == [
        (row.pk, text, {"n": [n, None]}) for n, (row, text) in enumerate(zip(rows, texts, strict=True))
    ]
    assert Step.objects.get(pk=step_id).text == "after the rows"


@pytest.mark.parametrize("rows", [1, COPY_FROM_ROWS], ids=["pipelined", "copied"])
def test_every_column_types_edge_values_come_back_as_they_were_given(
    store: RecordStore, turn: Turn, rows: int
) -> None:
    """Each column type's extremes, also by ``COPY``: the largest integers, a float's extremes,
    times at the calendar's ends and with odd offsets, ``COPY``'s own markers, empty texts and
    JSON beside NULLs."""
    values: list[dict[str, Any]] = [
        {
            "seq": 2**31 - 1 - n,
            "chain_version": 32767,
            "duration_ms": [1e308, -0.0, 5e-324, None][n % 4],
            "started_at": [
                datetime(1, 1, 1, 0, 0, tzinfo=UTC),
                datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
                datetime(2026, 3, 29, 2, 30, 0, 1, tzinfo=timezone(timedelta(hours=-9, minutes=-30))),
            ][n % 3],
            # The search index reads from ``search_start + 1``: its last integer is one less.
            "search_start": [None, 0, SEARCH_SPAN_MOST][n % 3],
            "request_headers": [{}, {"big": 2**63 - 1, "small": -(2**63)}, {"f": 0.1}][n % 3],
            "response_body": ["", "\\x00 \\N \\. not NULs", "\u202e\u200b bidi"][n % 3],
            "jsonrpc_id": "",
        }
        for n in range(rows)
    ]
    batch = Batch()
    batch.insert([_exchange(turn, None, **row) for row in values])

    store.write(batch)

    fields = list(values[0])
    stored = list(Exchange.objects.filter(turn=turn).order_by("-seq").values(*fields))
    assert stored == values


@pytest.mark.postgres
@pytest.mark.parametrize("store_class", [OrmStore, PostgresStore], ids=["orm", "postgres"])
@pytest.mark.parametrize("rows", [1, COPY_FROM_ROWS], ids=["pipelined", "copied"])
def test_a_value_too_long_for_its_column_fails_the_whole_batch(
    store_class: type[RecordStore], turn: Turn, rows: int
) -> None:
    """PostgreSQL checks a column's declared length however a value arrives (bound, or in a
    ``COPY``): the batch fails whole and its rows keep no id."""
    fresh = [_exchange(turn, None, n, status="x" * (33 if n == rows - 1 else 3)) for n in range(rows)]
    batch = Batch()
    batch.insert(fresh)

    with pytest.raises(DataError):
        store_class().write(batch)

    assert not Exchange.objects.filter(turn=turn).exists()
    assert {row.pk for row in fresh} == {None}


class _RefusesMarked(models.CharField):  # type: ignore[type-arg]
    """A custom field whose preparation refuses one value (raised while the rows are prepared)."""

    def get_prep_value(self, value: Any) -> Any:
        if value == "refused":
            raise ValueError("this field refuses the value")
        return super().get_prep_value(value)


@pytest.mark.parametrize("rows", [1, COPY_FROM_ROWS + 3], ids=["pipelined", "copied"])
def test_a_value_its_field_refuses_to_prepare_fails_the_whole_batch(
    store: RecordStore, turn: Turn, rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The field's error is raised as it is, also when the rows before it were already on their
    way to the database (the fast path's ``COPY`` prepares each row as it sends it)."""
    monkeypatch.setattr(Exchange._meta.get_field("label"), "__class__", _RefusesMarked)
    # A body big enough that the rows before the refused one fill psycopg's send buffer.
    fresh = [
        _exchange(turn, None, n, label="refused" if n == rows - 1 else "fine", response_body="x" * 4000)
        for n in range(rows)
    ]
    existing = StepFactory(turn=turn, seq=1, text="before")
    batch = Batch()
    batch.update(Step, existing.pk, {"text": "changed"})
    batch.insert(fresh)

    with pytest.raises(ValueError, match="refuses the value"):
        store.write(batch)

    assert not Exchange.objects.filter(turn=turn).exists()
    assert Step.objects.get(pk=existing.pk).text == "before"
    assert {row.pk for row in fresh} == {None}
    # The connection is usable after it.
    assert Step.objects.filter(turn=turn).count() == 1


def test_texts_the_record_made_storable_from_nul_and_lone_surrogates_are_stored_as_given(
    store: RecordStore, turn: Turn
) -> None:
    made = [storable_text(text)[0] for text in ("a\x00b", "lone \udc80 half", "bidi \u202e and zero\u200b")]
    rows = [_exchange(turn, None, n, response_body=text) for n, text in enumerate(made)]
    batch = Batch()
    batch.insert(rows)

    store.write(batch)

    assert (
        list(Exchange.objects.filter(turn=turn).order_by("seq").values_list("response_body", flat=True))
        == made
    )


def test_a_failed_batch_is_raised_and_nothing_of_it_is_written(store: RecordStore, turn: Turn) -> None:
    existing = StepFactory(turn=turn, seq=1, text="before")
    called: list[str] = []
    batch = Batch(on_commit=[lambda: called.append("committed")])
    batch.update(Step, existing.pk, {"text": "changed"})
    batch.insert([_exchange(turn, None, 1)])
    batch.insert([_step(turn, existing.pk, 2)])  # its id is taken

    with pytest.raises(IntegrityError):
        store.write(batch)

    assert Step.objects.get(pk=existing.pk).text == "before"
    assert not Exchange.objects.filter(turn=turn).exists()
    assert called == []
    # The connection is usable after it.
    assert Step.objects.filter(turn=turn).count() == 1


@pytest.mark.parametrize("outer_commits", [True, False], ids=["committed", "rolled-back"])
def test_commit_is_reported_only_after_the_callers_transaction_commits(
    store: RecordStore, turn: Turn, outer_commits: bool
) -> None:
    called: list[str] = []
    batch = Batch(relaxed=True, on_commit=[lambda: called.append("committed")])
    batch.update(Turn, turn.pk, {"answer": "written"})

    class Rollback(Exception):
        pass

    try:
        with transaction.atomic():
            store.write(batch)
            assert called == []
            if not outer_commits:
                raise Rollback
    except Rollback:
        pass

    turn.refresh_from_db()
    assert called == (["committed"] if outer_commits else [])
    assert turn.answer == ("written" if outer_commits else "")


def test_a_batch_on_its_own_reports_its_commit_as_it_returns(store: RecordStore, turn: Turn) -> None:
    seen: list[str] = []

    def note() -> None:
        seen.append(Turn.objects.get(pk=turn.pk).answer)

    batch = Batch(relaxed=True, on_commit=[note])
    batch.update(Turn, turn.pk, {"answer": "written"})

    store.write(batch)

    assert seen == ["written"]


def test_an_insert_holds_rows_of_one_model_all_with_ids_or_all_without(turn: Turn) -> None:
    with pytest.raises(TypeError):
        Insert([_step(turn, 1, 1), _step(turn, None, 2)])
    with pytest.raises(TypeError):
        Insert([_step(turn, 1, 1), _exchange(turn, None, 1)])


def _attributes(row: models.Model) -> dict[str, Any]:
    return {str(field.attname): getattr(row, str(field.attname)) for field in type(row)._meta.concrete_fields}


@pytest.mark.django_db(transaction=False)
def test_a_row_made_by_position_is_the_row_the_keyword_constructor_makes() -> None:
    """``model_row`` (the recorder's rows: by position, for speed) gives every field the value
    ``Model(**values)`` gives it, defaults (fresh ones) included, and refuses an unknown name."""
    started = datetime(2026, 12, 5, 21, 0, tzinfo=UTC)
    step_values: dict[str, Any] = {
        "id": 7, "turn_id": 3, "parent_id": None, "seq": 2, "kind": Step.Kind.TOOL, "title": "MiXeD",
        "started_at": started, "updated_at": started, "arguments": {"x": [1, "ü"]}, "server_name": "demo",
    }  # fmt: skip
    exchange_values: dict[str, Any] = {
        "turn_id": 3, "conversation_id": 4, "step_id": 7, "seq": 1, "channel": Exchange.Channel.MCP,
        "label": "tools/call", "request_headers": {"a": "b"}, "request_body": "{}", "started_at": started,
    }  # fmt: skip

    for model, values in ((Step, step_values), (Exchange, exchange_values)):
        by_position, by_keyword = model_row(model, values), model(**values)
        assert _attributes(by_position) == _attributes(by_keyword)
        assert by_position._state.adding and by_position._state.db is None
    first, second = model_row(Step, step_values), model_row(Step, step_values)
    assert first.calls == [] and first.calls is not second.calls  # a default made for each row
    with pytest.raises(TypeError, match="no field turn$"):
        model_row(Exchange, {**exchange_values, "turn": None})


def test_postgresql_takes_the_fast_path_unless_the_orm_is_asked_for(settings: Settings) -> None:
    fast = connection.vendor == "postgresql"
    assert isinstance(record_store(), PostgresStore if fast else OrmStore)
    settings.RECORD_STORE = "orm"
    assert isinstance(record_store(), OrmStore)


@pytest.mark.postgres
def test_the_fast_paths_statements_made_once_are_the_text_psycopg_makes_for_the_connection() -> None:
    from psycopg import sql

    from conversations.record import postgres

    connection.ensure_connection()
    raw = connection.connection
    for model in (Step, Exchange, Turn, AuditEvent):
        for with_ids in (True, False):
            for copy in (True, False):
                made, fields = postgres._insert_statement(model, with_ids=with_ids, copy=copy)
                columns = sql.SQL(", ").join(sql.Identifier(str(field.column)) for field in fields)
                table = sql.Identifier(model._meta.db_table)
                if copy:
                    expected = sql.SQL("COPY {} ({}) FROM STDIN").format(table, columns)
                else:
                    expected = sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
                        table, columns, sql.SQL(", ").join(sql.Placeholder() * len(fields))
                    )
                    if not with_ids:
                        expected += sql.SQL(" RETURNING {}").format(
                            sql.Identifier(str(model._meta.pk.column))
                        )
                assert made == expected.as_bytes(raw)
    made, _ = postgres._update_statement(Step, ("status", "finished_at"))
    assert made == b'UPDATE "conversations_step" SET "status" = %s, "finished_at" = %s WHERE "id" = %s'
    assert postgres._guard_statement() == (
        b'UPDATE "conversations_turn" SET "claim" = CASE WHEN "claim" = %s AND "status" = %s'
        b' THEN "claim" ELSE -1 END WHERE "id" = %s'
    )


@pytest.mark.postgres
def test_the_fast_path_refuses_a_database_that_is_not_postgresql(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connection, "vendor", "sqlite")
    with pytest.raises(RuntimeError):
        PostgresStore().write(Batch())


def test_rows_of_a_failed_batch_get_their_ids_taken_back_and_a_retry_writes_them(
    store: RecordStore, turn: Turn
) -> None:
    # The writer retries a failed write's batches one by one with the same rows: ids the failed
    # write gave them (its rolled-back inserts) must not stay on them.
    existing = StepFactory(turn=turn, seq=1)
    fresh = [_exchange(turn, None, seq) for seq in (1, 2)]
    failing = Batch()
    failing.insert(fresh)
    failing.insert([_step(turn, existing.pk, 2)])  # its id is taken

    with pytest.raises(IntegrityError):
        store.write(failing)

    assert [row.pk for row in fresh] == [None, None]
    retry = Batch()
    retry.insert(fresh)
    store.write(retry)
    assert sorted(Exchange.objects.filter(turn=turn).values_list("seq", flat=True)) == [1, 2]


def _same_batch(turn: Turn, step_ids: list[int], rows: int) -> Batch:
    """One batch of the record's shapes: values that repeat down a column (a turn's id, a
    channel, ``None``, ``True``, short texts) and values that do not (bodies, times, JSON), a
    custom field's preparation, non-ASCII, texts made storable from NUL and lone surrogates."""
    started = datetime(2026, 12, 5, 9, 30, 1, 123456, tzinfo=timezone(timedelta(hours=-3)))
    made = [storable_text(text)[0] for text in ("a\x00b", "lone \udc80", "ünïcødé ✓ 🙂")]
    steps = [
        _step(
            turn,
            pk,
            n + 1,
            parent_id=step_ids[0] if n else None,
            title=["MiXeD", "Tool Call", made[n % 3]][n % 3],
            text=made[n % 3] if n % 2 else "",
            prompt_exact=bool(n % 2),
            arguments={"x": n, "é": [None, True, 1.5]} if n % 3 else None,
            result=None if n % 2 else "1",
            started_at=started + timedelta(microseconds=n),
            finished_at=None if n % 2 else started,
        )
        for n, pk in enumerate(step_ids)
    ]
    exchanges = [
        _exchange(
            turn,
            steps[n % len(steps)],
            n + 1,
            label=["POST /Chat", "tools/call"][n % 2],
            channel=[Exchange.Channel.LLM, Exchange.Channel.MCP][n % 2],
            jsonrpc_id=str(n % 3) if n % 2 else "",
            request_headers={"n": n, "h": "ç"} if n % 4 else {},
            request_body=made[n % 3] + "\\N\t" * (n % 2),
            response_body="x" * (n % 70) + "ü" * 80,
            error=made[0] if n == 3 else "",
            duration_ms=[None, 0.25, 12.0][n % 3],
            search_start=None if n % 2 else n,
            started_at=started + timedelta(seconds=n),
        )
        for n in range(rows)
    ]
    batch = Batch()
    batch.insert(steps)
    batch.insert(exchanges)
    batch.update(Step, step_ids[0], {"title": "ChAnGeD", "status": Step.Status.OK, "finished_at": started})
    batch.update(Turn, turn.pk, {"answer": made[2]})
    return batch


def _stored(turn: Turn) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str]:
    """The turn's rows as stored, its ids made relative (first step 0, …) so two turns compare."""
    steps = list(Step.objects.filter(turn=turn).order_by("seq").values())
    first = steps[0]["id"]
    for step in steps:
        step.pop("turn_id")
        assert step.pop("updated_at") is not None  # ``auto_now``: the time of each store's write
        step["id"] -= first
        step["parent_id"] = None if step["parent_id"] is None else step["parent_id"] - first
    exchanges = list(Exchange.objects.filter(turn=turn).order_by("seq").values())
    for exchange in exchanges:
        for name in ("id", "turn_id", "conversation_id"):
            exchange.pop(name)
        exchange["step_id"] -= first
    turn.refresh_from_db()
    return steps, exchanges, turn.answer


@pytest.mark.postgres
@pytest.mark.usefixtures("lowered_label")
@pytest.mark.parametrize("rows", [5, COPY_FROM_ROWS + 6], ids=["pipelined", "copied"])
def test_the_fast_path_stores_the_very_rows_the_orm_stores(rows: int) -> None:
    """The same batches through both stores: every column of every row the same (the fast path
    prepares a column's repeated values once; the ORM prepares each)."""
    by_orm, by_fast = TurnFactory(answer=""), TurnFactory(answer="")
    ids = _next_step_ids(8)

    OrmStore().write(_same_batch(by_orm, ids[:4], rows))
    PostgresStore().write(_same_batch(by_fast, ids[4:], rows))

    orm_rows, fast_rows = _stored(by_orm), _stored(by_fast)
    assert fast_rows == orm_rows
    steps, exchanges, answer = fast_rows
    assert len(exchanges) == rows and answer == "ünïcødé ✓ 🙂"
    assert [step["title"] for step in steps[:2]] == ["changed", "tool call"]  # the custom field's
    assert {exchange["label"] for exchange in exchanges} == {"post /chat", "tools/call"}


# Fencing: a batch carries the claim its turn's runner holds; the store's own guard statement
# refuses it once the turn no longer runs under that claim.
CLAIM = 4242


@pytest.fixture
def claimed() -> Turn:
    return TurnFactory(status=Turn.Status.RUNNING, answer="", claim=CLAIM)


def _fenced_batch(turn: Turn, step: Step, rows: int = 2, claim: int = CLAIM) -> tuple[Batch, list[Exchange]]:
    """A batch of everything a runner writes: a new step, new exchanges, a step's and the
    turn's changes."""
    (new_id,) = _next_step_ids(1)
    fresh = [_exchange(turn, None, seq) for seq in range(1, rows + 1)]
    batch = Batch(relaxed=True)
    batch.fence(turn_id=turn.pk, claim=claim)
    batch.insert([_step(turn, new_id, 2)])
    batch.insert(fresh)
    batch.update(Step, step.pk, {"text": "after", "status": Step.Status.ERROR})
    batch.update(Turn, turn.pk, {"answer": "from the stale runner"})
    return batch, fresh


def test_a_batch_under_the_claim_its_turn_runs_under_is_written(store: RecordStore, claimed: Turn) -> None:
    step = StepFactory(turn=claimed, seq=1, text="before")
    batch, fresh = _fenced_batch(claimed, step)

    store.write(batch)

    assert Step.objects.filter(turn=claimed).count() == 2
    assert Step.objects.get(pk=step.pk).text == "after"
    assert all(row.pk is not None for row in fresh)
    assert Turn.objects.values_list("answer", "claim", "status").get(pk=claimed.pk) == (
        "from the stale runner",
        CLAIM,
        Turn.Status.RUNNING,
    )


def _end(turn: Turn, how: str) -> None:
    if how == "claimed again":
        Turn.objects.filter(pk=turn.pk).update(claim=CLAIM + 1)
    else:
        Turn.objects.filter(pk=turn.pk).update(status=how)


@pytest.mark.parametrize("rows", [2, COPY_FROM_ROWS], ids=["pipelined", "copied"])
@pytest.mark.parametrize("how", [Turn.Status.INTERRUPTED, Turn.Status.CANCELLED, "claimed again"])
def test_a_batch_whose_claim_no_longer_holds_is_refused_whole(
    store: RecordStore, claimed: Turn, how: str, rows: int
) -> None:
    step = StepFactory(turn=claimed, seq=1, text="before")
    _end(claimed, how)
    before = Turn.objects.filter(pk=claimed.pk).values().get()
    batch, fresh = _fenced_batch(claimed, step, rows=rows)

    with pytest.raises(FenceRefused) as refused:
        store.write(batch)

    assert refused.value.turns == (claimed.pk,)
    assert list(Step.objects.filter(turn=claimed).values_list("pk", "text")) == [(step.pk, "before")]
    assert not Exchange.objects.filter(turn=claimed).exists()
    assert Turn.objects.filter(pk=claimed.pk).values().get() == before
    assert [row.pk for row in fresh] == [None] * rows
    # The connection is usable after it.
    assert Step.objects.filter(turn=claimed).count() == 1


def test_a_batch_for_two_turns_is_refused_whole_when_one_has_ended(store: RecordStore, claimed: Turn) -> None:
    other = TurnFactory(status=Turn.Status.RUNNING, answer="", claim=CLAIM + 7)
    step = StepFactory(turn=claimed, seq=1, text="before")
    batch, _ = _fenced_batch(claimed, step)
    batch.fence(turn_id=other.pk, claim=CLAIM + 7)
    batch.update(Turn, other.pk, {"answer": "the live one's"})
    Turn.objects.filter(pk=claimed.pk).update(status=Turn.Status.INTERRUPTED)

    with pytest.raises(FenceRefused) as refused:
        store.write(batch)

    assert set(refused.value.turns) == {claimed.pk, other.pk}
    assert Turn.objects.get(pk=other.pk).answer == ""
    assert Step.objects.filter(turn=claimed).count() == 1


def test_an_unfenced_batch_writes_into_an_ended_turn(store: RecordStore, claimed: Turn) -> None:
    # The process that ends a turn elsewhere (the stale-turn check) writes its last step unfenced.
    Turn.objects.filter(pk=claimed.pk).update(status=Turn.Status.INTERRUPTED)
    batch = Batch()
    batch.insert([_step(claimed, None, 1, status=Step.Status.ERROR)])

    store.write(batch)

    assert Step.objects.filter(turn=claimed).count() == 1
