"""What storing one MCP group asks the database for beside its rows: where the turn goes on (its
last seqs, the chain's head, whether later turns follow, the new rows' ids) in one read, and no
read of the steps it has just written to ring their doorbells (decision 0510)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext

from conversations.models import Exchange, Step
from conversations.proxy.keys import create_key
from conversations.proxy.models import ProxyKey, ProxySession
from conversations.proxy.recording import record_mcp
from conversations.record.verification import conversation_verify
from tests.conversations.proxy.wire import tools_call, tools_list

pytestmark = pytest.mark.django_db(transaction=True)
CALLS = 20


def _key() -> ProxyKey:
    return create_key(get_user_model().objects.create_user("alice"), name="laptop")[0]


@pytest.mark.postgres
def test_a_groups_steps_and_exchanges_take_ids_read_with_the_turns_starting_points() -> None:
    key = _key()
    record_mcp(key, session="s", server_name="time", records=[tools_list(["get_current_time"])])
    group = [tools_call("get_current_time", {"n": n}, rpc_id=n) for n in range(CALLS)]
    with CaptureQueriesContext(connection) as captured:
        ids = record_mcp(key, session="s", server_name="time", records=group)
    statements = [query["sql"] for query in captured.captured_queries]
    reserving = [sql for sql in statements if "nextval" in sql]
    assert len(reserving) == 1, reserving
    assert "generate_series" in reserving[0] and reserving[0].count("nextval") == 2
    # The doorbells' rows are known from the write: no read of the new steps' parents.
    table = connection.ops.quote_name(Step._meta.db_table)
    parents_read = f'SELECT {table}."id", {table}."parent_id" FROM'
    assert not [sql for sql in statements if sql.startswith(parents_read)]

    conversation = ProxySession.objects.get(key=key).conversation
    steps = Step.objects.filter(turn__conversation=conversation, kind=Step.Kind.TOOL).order_by("seq")
    exchanges = Exchange.objects.filter(pk__in=ids).order_by("seq")
    assert [exchange.step_id for exchange in exchanges] == [step.pk for step in steps]
    assert [exchange.jsonrpc_id for exchange in exchanges] == [str(n) for n in range(CALLS)]
    assert sorted(ids) == ids  # in the order of the records, as the sequence gave them
    report = conversation_verify(conversation=conversation)
    assert report.intact, report.reason


def test_groups_of_a_session_chain_on_and_verify_where_ids_come_as_rows_are_written() -> None:
    key = _key()
    for start in range(0, 3 * CALLS, CALLS):
        group = [tools_call("get_current_time", {"n": n}, rpc_id=n) for n in range(start, start + CALLS)]
        record_mcp(key, session="s", server_name="time", records=group)
    conversation = ProxySession.objects.get(key=key).conversation
    rows = list(Exchange.objects.filter(turn__conversation=conversation).order_by("seq"))
    assert [row.seq for row in rows] == list(range(1, 3 * CALLS + 1))
    assert all(row.prev_hash == before.hash for before, row in zip(rows, rows[1:], strict=False))
    report = conversation_verify(conversation=conversation)
    assert report.intact, report.reason
