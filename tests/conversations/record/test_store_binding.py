"""PostgreSQL's record store binds each row's values on the server: its statements go out with
their values as parameters, never quoted into the statement's text by a client-binding cursor
(Django's default cursor binds client-side, which cost a fifth to a third of a pipelined
write's CPU: decision 0510). The rows it stores are held to the ORM's by ``test_store.py``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from conversations.models import Exchange, RedactionRule, Step, Turn
from conversations.record.postgres import COPY_FROM_ROWS, PostgresStore
from conversations.record.store import Batch
from tests.factories import TurnFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


@contextmanager
def _cursors(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[psycopg.Cursor[Any]]]:
    """Every psycopg cursor that runs a statement or a batch of them meanwhile (a
    ``psycopg.ClientCursor`` is one too: it binds client-side)."""
    seen: list[psycopg.Cursor[Any]] = []
    execute, executemany = psycopg.Cursor.execute, psycopg.Cursor.executemany

    def spied_execute(self: psycopg.Cursor[Any], *args: Any, **kwargs: Any) -> Any:
        seen.append(self)
        return execute(self, *args, **kwargs)

    def spied_executemany(self: psycopg.Cursor[Any], *args: Any, **kwargs: Any) -> Any:
        seen.append(self)
        return executemany(self, *args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(psycopg.Cursor, "execute", spied_execute)
        patched.setattr(psycopg.Cursor, "executemany", spied_executemany)
        yield seen


@pytest.mark.parametrize("rows", [3, COPY_FROM_ROWS], ids=["pipelined", "copied"])
def test_the_fast_path_binds_every_rows_values_on_the_server(
    monkeypatch: pytest.MonkeyPatch, rows: int
) -> None:
    turn = TurnFactory(status=Turn.Status.RUNNING, answer="")
    claim = 7
    Turn.objects.filter(pk=turn.pk).update(claim=claim)
    steps = [Step(turn_id=turn.pk, seq=n, kind=Step.Kind.TOOL, title=f"it's step {n}") for n in range(1, 4)]
    exchanges = [
        Exchange(
            turn_id=turn.pk,
            conversation_id=turn.conversation_id,
            seq=n,
            channel=Exchange.Channel.MCP,
            label="tools/call",
            request_body='{"quote": "\'"}',
            started_at=datetime.now(UTC),
        )
        for n in range(rows)
    ]
    batch = Batch(relaxed=True)
    batch.fence(turn_id=turn.pk, claim=claim)
    batch.insert(steps)
    batch.insert(exchanges)
    batch.update(Step, steps[0].pk, {"title": "renamed"})  # no id yet: changes nothing
    with _cursors(monkeypatch) as cursors:
        PostgresStore().write(batch)

    assert cursors, "the store ran no statement through a psycopg cursor"
    client = [type(cursor).__name__ for cursor in cursors if isinstance(cursor, psycopg.ClientCursor)]
    assert client == []
    assert list(Step.objects.filter(turn=turn).order_by("seq").values_list("title", flat=True)) == [
        "it's step 1",
        "it's step 2",
        "it's step 3",
    ]
    assert Exchange.objects.filter(turn=turn, request_body='{"quote": "\'"}').count() == rows


@pytest.mark.parametrize("rows", [3, COPY_FROM_ROWS], ids=["pipelined", "copied"])
def test_a_field_that_sets_its_value_before_saving_still_does(rows: int) -> None:
    """Each value is the field's ``pre_save`` of the new row, as the ORM's own insert asks: a
    field that sets its own (``auto_now_add``) does."""
    before = datetime.now(UTC)
    rules = [RedactionRule(name=f"rule-{n}", pattern="x") for n in range(rows)]
    assert all(rule.created_at is None for rule in rules)
    batch = Batch()
    batch.insert(rules)
    PostgresStore().write(batch)

    assert all(rule.created_at is not None and rule.created_at >= before for rule in rules)
    stored = dict(RedactionRule.objects.values_list("name", "created_at"))
    assert stored == {rule.name: rule.created_at for rule in rules}
