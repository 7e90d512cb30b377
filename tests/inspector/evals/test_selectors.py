"""What the evals app reads on every turn's path (``conversation_overrides``, the overrides
source the runner asks as each turn's connect step is written: P2)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from inspector.evals.selectors import conversation_overrides
from tests.factories import ConversationFactory

pytestmark = pytest.mark.django_db


def test_an_ordinary_conversations_overrides_are_one_unordered_query_of_the_case_results() -> None:
    conversation = ConversationFactory()

    with CaptureQueriesContext(connection) as queries:
        assert conversation_overrides(conversation) == {}

    (sql,) = [query["sql"] for query in queries.captured_queries]
    # By the conversation's id alone: no conversation joined, and no order built for one row.
    assert "ORDER BY" not in sql and '"conversations_conversation"' not in sql
    assert sql.count("JOIN") == 1  # the case's cell, for its overrides
