"""A read compiled once (``conversations.compiled_reads``) gives what its queryset gives: the same
rows in the same order, the same related rows and deferred fields, for each set of ids; its SQL is
built once per shape; it runs on the calling thread's connection; and a read it cannot bind
faithfully is refused when it is compiled."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.db import connection
from django.db.models import Count, Q, QuerySet
from django.db.models.sql.compiler import SQLCompiler
from django.utils import timezone

from conversations import compiled_reads
from conversations.compiled_reads import CompiledRead
from conversations.models import Conversation, Exchange, Step
from tests.factories import ConversationFactory, ExchangeFactory, McpServerFactory, StepFactory, TurnFactory

pytestmark = pytest.mark.django_db(transaction=True)


def _row_with_tool_calls(step_id: int, conversation_id: int) -> QuerySet[Step]:
    return (
        Step.objects.filter(
            Q(pk=step_id, parent__isnull=True) | Q(parent_id=step_id), turn__conversation_id=conversation_id
        )
        .select_related("server", "turn")
        .defer("turn__transcript", "turn__seal_steps")
        .order_by("seq")
    )


def _exchanges(step_ids: list[int]) -> QuerySet[Exchange]:
    return Exchange.objects.filter(step_id__in=step_ids).select_related("server").order_by("-seq", "id")


def _state(rows: list[Any]) -> list[dict[str, Any]]:
    """Everything a row read gives: each field loaded, what is deferred, and the related rows
    held (by their own loaded fields)."""

    def fields(row: Any) -> dict[str, Any]:
        deferred = row.get_deferred_fields()
        loaded = {
            f.attname: getattr(row, f.attname) for f in row._meta.concrete_fields if f.attname not in deferred
        }
        return {"model": type(row).__name__, "deferred": sorted(deferred), **loaded}

    return [
        {
            **fields(row),
            "related": {
                name: None if value is None else fields(value)
                for name, value in sorted(row._state.fields_cache.items())
            },
            "saved": (row._state.adding, row._state.db),
        }
        for row in rows
    ]


def _turn_with_a_tool_call() -> tuple[Step, Step, Step]:
    turn = TurnFactory(transcript=[{"role": "user", "content": "hi"}])
    server = McpServerFactory()
    decide = StepFactory(turn=turn, kind=Step.Kind.DECIDE, seq=2)
    tool = StepFactory(turn=turn, parent=decide, kind=Step.Kind.TOOL, seq=3, server=server)
    other = StepFactory(turn=turn, kind=Step.Kind.ANSWER, seq=4)
    for step, seq in [(decide, 1), (tool, 2), (tool, 3), (other, 4)]:
        ExchangeFactory(turn=turn, step=step, seq=seq, server=server if step is tool else None)
    return decide, tool, other


def test_a_compiled_read_gives_what_its_queryset_gives_for_every_set_of_ids() -> None:
    decide, tool, other = _turn_with_a_tool_call()
    elsewhere = StepFactory(kind=Step.Kind.DECIDE)
    read = CompiledRead(_row_with_tool_calls)
    conversation_id = decide.turn.conversation_id

    for step_id, owner in [
        (decide.pk, conversation_id),
        (other.pk, conversation_id),
        (tool.pk, conversation_id),  # a tool call is no row of its own: nothing
        (elsewhere.pk, conversation_id),  # another conversation's row: nothing
        (elsewhere.pk, elsewhere.turn.conversation_id),
        (10**9, conversation_id),
    ]:
        expected = list(_row_with_tool_calls(step_id, owner))
        assert _state(read(step_id=step_id, conversation_id=owner)) == _state(expected)
    rows = read(step_id=decide.pk, conversation_id=conversation_id)
    assert [row.pk for row in rows] == [decide.pk, tool.pk]
    assert rows[1].server is not None and rows[0].turn.seq == decide.turn.seq
    assert {"transcript", "seal_steps"} <= rows[0].turn.get_deferred_fields()


def test_lists_of_ids_are_compiled_per_length_and_an_empty_list_reads_nothing(
    django_assert_num_queries: Any,
) -> None:
    decide, tool, other = _turn_with_a_tool_call()
    read = CompiledRead(_exchanges)

    for ids in [[decide.pk], [tool.pk, decide.pk], [tool.pk, tool.pk, other.pk], [other.pk, decide.pk]]:
        assert _state(read(step_ids=ids)) == _state(list(_exchanges(ids)))
    with django_assert_num_queries(0):
        assert read(step_ids=[]) == []


def test_the_sql_is_built_once_per_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    decide, tool, _ = _turn_with_a_tool_call()
    built: list[int] = []
    compiled = SQLCompiler.as_sql

    def counting(self: SQLCompiler, *args: Any, **kwargs: Any) -> Any:
        built.append(1)
        return compiled(self, *args, **kwargs)

    monkeypatch.setattr(SQLCompiler, "as_sql", counting)
    read = CompiledRead(_exchanges)

    for _ in range(3):
        read(step_ids=[decide.pk])
        read(step_ids=[decide.pk, tool.pk])

    assert len(built) == 4  # each shape built twice when first compiled (the same query both times)


def test_long_lists_are_read_uncompiled_and_the_shapes_kept_are_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    decide, tool, other = _turn_with_a_tool_call()
    read = CompiledRead(_exchanges)
    monkeypatch.setattr(compiled_reads, "MOST_SHAPES", 3)

    long = [decide.pk, tool.pk, *range(10**9, 10**9 + compiled_reads.MOST_LISTED_IDS)]
    assert _state(read(step_ids=long)) == _state(list(_exchanges(long)))
    assert read._shapes == {}
    for count in range(1, 6):
        ids = [other.pk] * count
        assert _state(read(step_ids=ids)) == _state(list(_exchanges(ids)))
    assert list(read._shapes) == [(("step_ids", 3),), (("step_ids", 4),), (("step_ids", 5),)]


def test_each_thread_reads_on_its_own_connection() -> None:
    decide, tool, _ = _turn_with_a_tool_call()
    read = CompiledRead(_row_with_tool_calls)
    conversation_id = decide.turn.conversation_id
    read(step_id=decide.pk, conversation_id=conversation_id)  # compiled on this thread

    def other_thread() -> list[int]:
        try:
            return [row.pk for row in read(step_id=decide.pk, conversation_id=conversation_id)]
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=4) as pool:
        found = [done.result() for done in [pool.submit(other_thread) for _ in range(4)]]

    assert found == [[decide.pk, tool.pk]] * 4


def test_only_ids_are_bound() -> None:
    decide, _, _ = _turn_with_a_tool_call()
    read = CompiledRead(_row_with_tool_calls)

    for wrong in [str(decide.pk), True, float(decide.pk), [str(decide.pk)], None, [uuid.uuid4()]]:
        with pytest.raises(TypeError, match="step_id must be an int id, a list of them or a UUID"):
            read(step_id=wrong, conversation_id=decide.turn.conversation_id)  # type: ignore[arg-type]


def _by_public_id(public_id: uuid.UUID, owner_id: int) -> QuerySet[Conversation]:
    return (
        Conversation.objects.filter(Q(public_id=public_id) | Q(public_id=public_id, owner_id=owner_id))
        .filter(owner_id=owner_id)
        .select_related("model_profile", "owner")
    )


def test_a_uuid_is_bound_in_the_form_the_database_takes_it() -> None:
    """PostgreSQL takes a UUID as it is, SQLite as its hex digits: either way, bound twice beside
    an int id, the compiled read finds what the queryset finds, and nothing for a UUID or an
    owner that does not match."""
    conversations = [ConversationFactory() for _ in range(3)]
    read = CompiledRead(_by_public_id)

    for conversation in conversations:
        found = read(public_id=conversation.public_id, owner_id=conversation.owner_id)
        assert found == list(_by_public_id(conversation.public_id, conversation.owner_id))
        assert found == [conversation] and found[0].owner == conversation.owner
        assert read(public_id=conversation.public_id, owner_id=conversation.owner_id + 1000) == []
    assert read(public_id=uuid.uuid4(), owner_id=conversations[0].owner_id) == []
    assert len(read._shapes) == 1


def test_a_read_that_does_not_bind_an_id_as_given_is_refused_when_compiled() -> None:
    # An id the built query changes (here: one added to it) would be bound in the wrong place.
    shifted = CompiledRead(lambda step_id: Step.objects.filter(seq=step_id + 1))
    unused = CompiledRead(lambda step_id: Step.objects.all())
    # A stand-in no column of this kind could hold (Django answers it with no rows, unasked).
    refused = CompiledRead(lambda step_id: Step.objects.filter(seq=-step_id))
    # A UUID the built query changes, or does not use.
    changed = CompiledRead(
        lambda public_id: Conversation.objects.filter(public_id=uuid.UUID(int=public_id.int + 1))
    )
    ignored = CompiledRead(lambda public_id: Conversation.objects.all())

    with pytest.raises(ValueError, match="does not bind"):
        shifted(step_id=3)
    with pytest.raises(ValueError, match="does not bind"):
        unused(step_id=3)
    with pytest.raises(ValueError, match="reads nothing for the stand-in ids"):
        refused(step_id=3)
    for read in (changed, ignored):
        with pytest.raises(ValueError, match=r"does not bind \['public_id'\]"):
            read(public_id=uuid.uuid4())


def test_a_read_that_depends_on_more_than_its_ids_is_refused_when_compiled() -> None:
    clocked = CompiledRead(
        lambda step_id: Step.objects.filter(turn_id=step_id, updated_at__lte=timezone.now())
    )

    with pytest.raises(ValueError, match="depends on more than its ids"):
        clocked(step_id=3)


def test_a_values_list_read_gives_what_its_queryset_gives() -> None:
    decide, tool, other = _turn_with_a_tool_call()
    ExchangeFactory(turn=decide.turn, step=None, seq=9, request_headers={"x": ["1", "2"]})

    def pairs(turn_id: int) -> QuerySet[Exchange, tuple[int | None, str, dict[str, Any], Any]]:
        return (
            Exchange.objects.filter(turn_id=turn_id)
            .order_by("seq", "id")
            .values_list("step_id", "label", "request_headers", "started_at")
        )

    def hashes(turn_id: int) -> QuerySet[Exchange, str]:
        return Exchange.objects.filter(turn_id=turn_id).order_by("-seq").values_list("hash", flat=True)

    for turn_id in [decide.turn_id, 10**9]:
        assert CompiledRead(pairs)(turn_id=turn_id) == list(pairs(turn_id))
        assert CompiledRead(hashes)(turn_id=turn_id) == list(hashes(turn_id))
    read = CompiledRead(pairs)(turn_id=decide.turn_id)
    assert read[-1][2] == {"x": ["1", "2"]} and read[0][3] is not None  # JSON and dates converted


def test_a_read_with_prefetches_dicts_or_annotations_is_refused() -> None:
    refused = [
        CompiledRead(lambda step_id: Step.objects.filter(pk=step_id).prefetch_related("exchanges")),
        CompiledRead(lambda step_id: Step.objects.filter(pk=step_id).values("seq")),
        CompiledRead(
            lambda step_id: Step.objects.filter(pk=step_id).annotate(n=Count("exchanges")).values_list("n")
        ),
    ]

    for read in refused:
        with pytest.raises(TypeError, match="model instances or a values_list of fields"):
            read(step_id=1)
