"""The record writer sends each value as the model field would prepare it: the shorter ways
(``record_writer._preparing``) give, for every field of the record's tables and every kind of
value they hold, what the field's own ``get_db_prep_save`` gives; a naive datetime still goes
through the field (which makes it aware and warns)."""

from __future__ import annotations

import sys
import threading
import warnings
from datetime import UTC, datetime
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.db.models import Field, Model

from conversations import record_writer
from conversations.models import AuditEvent, Conversation, Exchange, Step, Turn
from conversations.record_writer import _preparing, _row_values, _value, new_row
from tests.factories import StepFactory

AT = datetime(2026, 12, 3, 14, 0, 0, 123456, tzinfo=UTC)
SAMPLES: list[Any] = [
    "text",
    "",
    0,
    7,
    12.5,
    True,
    None,
    AT,
    {"a": [1, "é", {"b": None}]},
    {},
    [1, {"x": "y"}],
    [],
    Exchange.Channel.LLM,
]
MODELS: list[type[Model]] = [Exchange, Step, Turn, Conversation, AuditEvent]


def _comparable(prepared: Any) -> Any:
    """A prepared value as compared: a JSON wrapper by its class, value and encoder; an integer
    as an int (Django wraps one for PostgreSQL in psycopg's ``Int4``, an int subclass naming the
    column's type; the writer has always sent the int itself, which stores the same value)."""
    if hasattr(prepared, "obj") and hasattr(prepared, "dumps"):
        return (type(prepared), prepared.obj, prepared.dumps)
    if isinstance(prepared, int) and not isinstance(prepared, bool):
        return (int, int(prepared))
    return (type(prepared), prepared)


def _fields() -> list[Field[Any, Any]]:
    return [field for model in MODELS for field in model._meta.concrete_fields]


def _expected(field: Field[Any, Any], value: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a value the field would warn about is not a sample here
        return field.get_db_prep_save(value, connection)


@pytest.mark.django_db
@pytest.mark.parametrize("value", SAMPLES, ids=repr)
def test_every_field_of_the_record_sends_each_value_as_the_field_prepares_it(value: Any) -> None:
    compared = 0
    for field in _fields():
        try:
            expected = _expected(field, value)
        except (TypeError, ValueError, ValidationError, Warning, AttributeError):
            continue  # not a value this field holds
        preparing = _preparing(field, connection.alias)
        assert _comparable(_value(field, preparing, value, connection)) == _comparable(expected), field
        row = field.model()
        setattr(row, field.attname, value)
        if not (getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False)):
            assert _comparable(_row_values([row], (field,), connection)[0]) == _comparable(expected), field
        compared += 1
    assert compared


@pytest.mark.django_db
def test_a_naive_datetime_goes_through_the_field_and_is_made_aware() -> None:
    field = Exchange._meta.get_field("started_at")
    naive = AT.replace(tzinfo=None)

    with pytest.warns(RuntimeWarning, match="naive datetime"):
        prepared = _value(field, _preparing(field, connection.alias), naive, connection)
    with pytest.warns(RuntimeWarning, match="naive datetime"):
        expected = field.get_db_prep_save(naive, connection)

    assert prepared == expected
    if connection.vendor == "postgresql":
        assert prepared.utcoffset() is not None


@pytest.mark.postgres
@pytest.mark.django_db
def test_on_postgresql_json_and_datetime_values_take_the_short_way() -> None:
    """Where the short ways are meant to apply they do (else the comparisons above would hold
    of the field's own path alone)."""
    body = _preparing(Exchange._meta.get_field("request_headers"), connection.alias)
    started = _preparing(Exchange._meta.get_field("started_at"), connection.alias)
    saved = _preparing(Turn._meta.get_field("updated_at"), connection.alias)  # auto_now

    assert set(body.quick) == {dict, list}
    assert set(started.quick) == {datetime}
    assert not saved.plain and not saved.quick


def test_placeholders_are_numbered_in_order_whichever_threads_ask_for_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The numbered placeholders a write binds (``$1``, ``$2``, …) are made once and shared by
    the threads that write; however they ask at once, each number is at its place. (Without
    the lock around their extension, 2 of 3 runs of one round failed here: five rounds.)"""
    # Threads switch as often as the interpreter allows, so an unguarded extension would race.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(5):
            _placeholders_asked_at_once(monkeypatch)
    finally:
        sys.setswitchinterval(interval)


def _placeholders_asked_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(record_writer, "_MARKS", [])
    start = threading.Barrier(8)
    wrong: list[tuple[int, str]] = []

    def ask(seed: int) -> None:
        start.wait()
        for count in range(seed, 20_000, 97 + seed):
            mark = record_writer._marks(count)[count - 1]
            if mark != f"${count}":
                wrong.append((count, mark))

    threads = [threading.Thread(target=ask, args=(seed,)) for seed in range(1, 9)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    marks = record_writer._MARKS
    assert not wrong
    assert marks == [f"${number}" for number in range(1, len(marks) + 1)]
    assert len(marks) >= 19_000


@pytest.mark.django_db
def test_a_writes_values_come_row_after_row_and_a_deferred_one_is_loaded() -> None:
    fields = (Step._meta.get_field("seq"), Step._meta.get_field("title"), Step._meta.get_field("turn"))
    rows = [
        new_row(Step, {"seq": 1, "title": "first", "turn_id": 7}),
        new_row(Step, {"seq": 2, "title": "second", "turn_id": 8}),
    ]

    assert _row_values(rows, fields, connection) == [1, "first", 7, 2, "second", 8]

    stored = StepFactory(title="kept")
    loaded = Step.objects.only("id").get(pk=stored.pk)  # its title deferred: not in __dict__
    assert "title" not in loaded.__dict__
    assert _row_values([loaded], (Step._meta.get_field("title"),), connection) == ["kept"]
