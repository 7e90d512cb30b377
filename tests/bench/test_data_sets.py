"""The data sets P5 and P6 build: which curve points fit on disk, and turns copied in SQL."""

from __future__ import annotations

import pytest

from bench import audit_data
from bench.p5_audit_scale import size_label
from bench.p6_big_conversation import copy_turns
from conversations.models import Exchange, Step, Turn
from tests.factories import ConversationFactory, ExchangeFactory, StepFactory, TurnFactory

GB = 1024**3


def test_the_curve_points_are_named_as_the_report_names_them() -> None:
    assert [size_label(size) for size in audit_data.SIZES] == ["100k", "1M", "10M"]


def test_a_point_is_grown_to_only_when_the_disk_keeps_its_reserve_after_it() -> None:
    reserve = audit_data.KEEP_FREE_BYTES
    # 10 kB per exchange: 1M more exchanges take 10 GB (15 GB with the margin).
    fits = audit_data.sizes_within(reserve + 16 * GB, 10 * 1024, 100_000)
    assert fits == [100_000, 1_000_000]
    # The points already held always count; nothing more fits without room beyond the reserve.
    assert audit_data.sizes_within(reserve, 10 * 1024, 1_000_000) == [100_000, 1_000_000]
    assert audit_data.sizes_within(reserve - GB, 10 * 1024, 0) == []


# The copy is PostgreSQL's SQL, as the bench's data sets are made only there.
@pytest.mark.postgres
@pytest.mark.django_db
def test_copied_turns_repeat_the_real_ones_in_order_with_their_own_steps_and_exchanges() -> None:
    conversation = ConversationFactory()
    for question in ("first", "second"):
        turn = TurnFactory(conversation=conversation, question=question)
        decide = StepFactory(turn=turn)
        tool = StepFactory(turn=turn, parent=decide, kind=Step.Kind.TOOL)
        ExchangeFactory(step=tool, turn=turn, conversation=conversation)

    copy_turns(conversation, 2, 5)

    turns = list(Turn.objects.filter(conversation=conversation).order_by("seq"))
    assert [t.seq for t in turns] == [1, 2, 3, 4, 5]
    assert [t.question for t in turns] == ["first", "second", "first", "second", "first"]
    assert [t.created_at for t in turns] == sorted(t.created_at for t in turns)
    for turn in turns:
        steps = list(Step.objects.filter(turn=turn))
        assert len(steps) == 2
        tool = next(s for s in steps if s.kind == Step.Kind.TOOL)
        assert tool.parent is not None and tool.parent.turn_id == turn.pk
        exchange = Exchange.objects.get(turn=turn)
        assert exchange.step_id == tool.pk
        assert exchange.conversation_id == conversation.pk
