"""The record's rows made by field position (``record_writer.new_row``) are the rows Django's
keyword form makes: every field's value, the defaults of the fields not given, a fresh default
for each row, and no name that is not a field accepted."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

import pytest
from django.db.models import Model
from django.db.models.signals import post_init

from conversations.models import AuditEvent, Exchange, Step, Turn
from conversations.record_writer import new_row, row_copy

AT = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)


def _values(row: Model) -> dict[str, object]:
    return {field.attname: getattr(row, field.attname) for field in type(row)._meta.concrete_fields}


def test_an_exchange_row_has_every_value_and_default_the_keyword_form_gives() -> None:
    values = {
        "turn_id": 7,
        "conversation_id": 3,
        "step_id": None,
        "seq": 2,
        "channel": Exchange.Channel.LLM,
        "label": "POST /v1/chat/completions",
        "request_headers": {"content-type": "application/json"},
        "request_body": '{"model": "m"}',
        "response_body": "{}",
        "started_at": AT,
        "duration_ms": 12.5,
    }

    made, reference = new_row(Exchange, values), Exchange(**values)

    assert _values(made) == _values(reference)
    assert made.pk is None and made._state.adding
    assert made.chain_version == reference.chain_version and made.response_headers == {}


def test_a_step_row_takes_ids_by_attribute_name_and_each_row_gets_its_own_default() -> None:
    values = {
        "id": 41,
        "turn_id": 7,
        "parent_id": 40,
        "seq": 5,
        "kind": "tool",
        "title": "calc",
        "started_at": AT,
        "updated_at": AT,
    }

    first, second = new_row(Step, values), new_row(Step, values)

    assert _values(first) == _values(Step(**values))
    # A JSON field's default is made anew for each row: changing one row's leaves the other's.
    first.calls.append({"name": "x"})
    assert second.calls == [] and first.tokens is not second.tokens


def test_a_name_that_is_not_a_fields_attribute_name_is_refused() -> None:
    with pytest.raises(TypeError, match=r"Step has no field \['turn'\]"):
        new_row(Step, {"turn": 7, "seq": 1})
    with pytest.raises(TypeError, match="nonsense"):
        new_row(Exchange, {"nonsense": 1})


def test_a_row_is_made_by_the_constructor_while_something_listens_to_its_signals() -> None:
    """A receiver of ``post_init`` sees the row made, as it would of one Django made."""
    seen: list[Model] = []

    def receiver(sender: type[Model], instance: Model, **kwargs: object) -> None:
        seen.append(instance)

    post_init.connect(receiver, sender=Step)
    try:
        made = new_row(Step, {"turn_id": 7, "seq": 1, "started_at": AT})
    finally:
        post_init.disconnect(receiver, sender=Step)

    assert seen == [made] and made.seq == 1 and made._state.adding
    assert _values(made) == _values(Step(turn_id=7, seq=1, started_at=AT, updated_at=made.updated_at))


def test_a_copy_has_the_rows_values_and_a_state_of_its_own() -> None:
    turn = Turn(pk=5)
    row = new_row(Step, {"id": 9, "turn_id": 5, "seq": 3, "kind": "decide", "title": "t", "started_at": AT})
    row.turn = turn  # a related row cached on the original
    row._state.adding, row._state.db = True, "default"

    clone, reference = row_copy(row), copy.copy(row)

    assert type(clone) is Step
    assert _values(clone) == _values(reference) == _values(row)
    assert (clone._state.adding, clone._state.db) == (reference._state.adding, reference._state.db)
    assert clone._state is not row._state
    assert clone._state.fields_cache == row._state.fields_cache
    assert clone._state.fields_cache is not row._state.fields_cache
    clone.title, clone._state.adding = "changed", False
    assert (row.title, row._state.adding) == ("t", True)


@pytest.mark.parametrize("model", [Exchange, Step, Turn, AuditEvent], ids=lambda model: model.__name__)
def test_a_row_given_nothing_has_every_default_the_constructor_gives(model: type[Model]) -> None:
    first, second, reference = new_row(model, {}), new_row(model, {}), model()

    for field in model._meta.concrete_fields:
        value, expected = getattr(first, field.attname), getattr(reference, field.attname)
        if callable(field.default):  # made afresh for each row (``dict``, ``timezone.now``)
            assert type(value) is type(expected), field
            if isinstance(value, dict | list):
                assert value == expected and getattr(second, field.attname) is not value, field
        else:
            assert (type(value), value) == (type(expected), expected), field
