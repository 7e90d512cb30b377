"""A turn's starting points (``conversations.record.starting``): the statement compiled once and
bound again for each read answers as the queryset that defines it, for every shape, on turns
with and without steps, exchanges and later turns; the ids it reserves are fresh ones of the
table's own sequence."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from conversations.models import Exchange, Step, Turn
from conversations.record.starting import Shape, starting_points, starting_query
from tests.factories import ConversationFactory, ExchangeFactory, StepFactory, TurnFactory

pytestmark = pytest.mark.django_db

SHAPES = [
    Shape(head_up_to_turn=up_to, later=later, step_ids=False, exchange_ids=False)
    for up_to in (False, True)
    for later in (False, True)
]


def _turns() -> list[Turn]:
    """A conversation of four turns: one with steps and exchanges, one with a step and none,
    one with neither, and a last one with exchanges (hashes set in chain order)."""
    conversation = ConversationFactory()
    turns = [TurnFactory(conversation=conversation) for _ in range(4)]
    n = 0
    for turn, steps, exchanges in zip(turns, (2, 1, 0, 1), (3, 0, 0, 2), strict=True):
        made = [StepFactory(turn=turn) for _ in range(steps)]
        for seq in range(1, exchanges + 1):
            n += 1
            ExchangeFactory(step=made[-1], turn=turn, seq=seq, hash=f"{n:064x}")
    # Another conversation's exchanges never count.
    ExchangeFactory(hash="f" * 64)
    return turns


def _by_queryset(turn: Turn, shape: Shape) -> dict[str, Any]:
    values = {"turn": turn.pk, "conversation": turn.conversation_id, "seq": turn.seq}
    row = dict(starting_query(shape, values).get())
    row["last_step"] = row["last_step"] or 0
    row["last_exchange"] = row["last_exchange"] or 0
    row["later"] = bool(row.get("later", False))
    return row


@pytest.mark.parametrize("shape", SHAPES, ids=lambda shape: f"up_to={shape[0]},later={shape[1]}")
def test_the_compiled_read_answers_as_the_queryset(shape: Shape) -> None:
    for turn in _turns():
        read = starting_points(turn, head_up_to_turn=shape.head_up_to_turn, later=shape.later)
        expected = _by_queryset(turn, shape)
        assert {name: read[name] for name in expected} == expected, turn.seq
        assert read["step_ids"] == read["exchange_ids"] == []


def test_the_values_read_are_the_turns() -> None:
    first, second, third, last = _turns()
    assert starting_points(first, head_up_to_turn=True, later=True) | {
        "step_ids": [],
        "exchange_ids": [],
    } == {
        "last_step": 2,
        "last_exchange": 3,
        "head": f"{3:064x}",
        "later": True,
        "step_ids": [],
        "exchange_ids": [],
    }
    # A turn without exchanges chains on from the last turn before it that has some.
    assert starting_points(third, head_up_to_turn=True)["head"] == f"{3:064x}"
    assert starting_points(second, later=True)["last_exchange"] == 0
    # Without the bound, the conversation's latest exchange.
    assert starting_points(first)["head"] == f"{5:064x}"
    assert starting_points(last, later=True)["later"] is False


def test_a_turn_that_is_gone_is_said_to_be() -> None:
    turn = _turns()[0]
    Turn.objects.filter(pk=turn.pk).delete()
    with pytest.raises(Turn.DoesNotExist):
        starting_points(turn)


@pytest.mark.postgres
def test_reserved_ids_are_fresh_ids_of_each_tables_sequence() -> None:
    turn = _turns()[0]
    read = starting_points(turn, step_ids=3, exchange_ids=5)
    assert len(read["step_ids"]) == 3 and len(read["exchange_ids"]) == 5
    assert read["step_ids"] == sorted(read["step_ids"]) and read["exchange_ids"] == sorted(
        read["exchange_ids"]
    )
    # The database's next ids come after them: no row ever collides with a reserved id.
    assert StepFactory(turn=turn).pk > max(read["step_ids"])
    assert ExchangeFactory(step=None, turn=turn, seq=99).pk > max(read["exchange_ids"])
    assert connection.vendor == "postgresql"
    assert Step.objects.filter(pk__in=read["step_ids"]).count() == 0
    assert Exchange.objects.filter(pk__in=read["exchange_ids"]).count() == 0
