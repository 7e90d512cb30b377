"""Data migrations on the real database: what they fill in for rows recorded before them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("conversations", "0011_covering_indexes")]
AFTER = [("conversations", "0012_exchange_conversation")]


def _migrate(targets: list[tuple[str, str]]) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return MigrationExecutor(connection)


@pytest.fixture(autouse=True)
def _latest_schema_after() -> Iterator[None]:
    """Whatever a test migrated back to, the database ends at the latest migrations again."""
    yield
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())


def test_0012_names_the_conversation_of_every_exchange_recorded_before_it() -> None:
    old = _migrate(BEFORE).loader.project_state(BEFORE).apps
    User = old.get_model("auth", "User")
    Profile = old.get_model("conversations", "ModelProfile")
    Conversation = old.get_model("conversations", "Conversation")
    Turn = old.get_model("conversations", "Turn")
    Exchange = old.get_model("conversations", "Exchange")
    owner = User.objects.create(username="alice")
    profile = Profile.objects.create(name="p", model="demo", is_demo=True)
    first, second = (
        Conversation.objects.create(owner=owner, title=title, model_profile=profile) for title in ("a", "b")
    )
    turns = [
        Turn.objects.create(
            conversation=conversation, seq=seq, question="?", paradigm="native", tool_choice="auto"
        )
        for conversation, seq in ((first, 1), (first, 2), (second, 1))
    ]
    for turn in turns:
        Exchange.objects.create(turn=turn, channel="llm", label="POST /chat/completions")
    Exchange.objects.create(turn=None, channel="mcp", label="notifications/message")

    new = _migrate(AFTER).loader.project_state(AFTER).apps
    rows = new.get_model("conversations", "Exchange").objects.order_by("id")

    assert list(rows.values_list("turn__conversation_id", "conversation_id")) == [
        (first.pk, first.pk),
        (first.pk, first.pk),
        (second.pk, second.pk),
        (None, None),
    ]
