"""Data migrations on the real database: what they fill in for rows recorded before them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from conversations.models import Conversation, Exchange
from conversations.record import integrity, verification

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


def test_0015_keeps_records_made_before_keyed_sealing_verifiable_under_their_old_rule() -> None:
    before = [("conversations", "0014_turn_lifecycle")]
    old = _migrate(before).loader.project_state(before).apps
    owner = old.get_model("auth", "User").objects.create(username="alice")
    profile = old.get_model("conversations", "ModelProfile").objects.create(
        name="p", model="demo", is_demo=True
    )
    conversation = old.get_model("conversations", "Conversation").objects.create(
        owner=owner, title="old", model_profile=profile
    )
    turn = old.get_model("conversations", "Turn").objects.create(
        conversation=conversation,
        seq=1,
        question="?",
        answer="!",
        status="done",
        paradigm="native",
        tool_choice="auto",
    )
    OldExchange = old.get_model("conversations", "Exchange")
    previous = integrity.GENESIS
    for seq, label in enumerate(("POST /chat/completions", "tools/call"), start=1):
        row = OldExchange(turn=turn, conversation_id=conversation.pk, seq=seq, channel="llm", label=label)
        # The rule the previous version wrote: unkeyed SHA-256 over the content and the link.
        legacy = Exchange(
            **{field: getattr(row, field) for field in ("seq", "channel", "label", "started_at")}
        )
        legacy.chain_version = integrity.LEGACY
        row.prev_hash, row.hash = previous, integrity.exchange_digest(legacy, turn_seq=1, previous=previous)
        previous = row.hash
        row.save()

    _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
    stored = Conversation.objects.get(pk=conversation.pk)
    report = verification.conversation_verify(conversation=stored)

    assert set(Exchange.objects.filter(turn_id=turn.pk).values_list("chain_version", flat=True)) == {1}
    assert report.intact and report.legacy and report.checked == 2
    Exchange.objects.filter(turn_id=turn.pk, seq=2).update(label="tools/list")
    assert not verification.conversation_verify(conversation=stored).intact


@pytest.mark.postgres
def test_0026_compresses_the_records_long_columns_with_lz4_and_reads_what_pglz_wrote() -> None:
    """A long body written before the migration (pglz) reads back whole after it; one written
    after it is compressed with LZ4 (this project's PostgreSQL has it: the migration checks)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT enumvals FROM pg_settings WHERE name = 'default_toast_compression'")
        assert "lz4" in cursor.fetchone()[0]
    old = _migrate([("conversations", "0025_step_turn_updated")]).loader.project_state(
        [("conversations", "0025_step_turn_updated")]
    )
    body = "".join(f'data: {{"piece": {n}, "text": "lorem ipsum dolor"}}\n\n' for n in range(20_000))
    Exchange = old.apps.get_model("conversations", "Exchange")
    before = Exchange.objects.create(turn=None, channel="llm", label="before", response_body=body)

    _migrate([("conversations", "0026_lz4_compression")])
    after = Exchange.objects.create(turn=None, channel="llm", label="after", response_body=body)

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, pg_column_compression(response_body), response_body = %s FROM conversations_exchange "
            "WHERE id IN (%s, %s) ORDER BY id",
            [body, before.pk, after.pk],
        )
        assert cursor.fetchall() == [(before.pk, "pglz", True), (after.pk, "lz4", True)]


def test_0038_names_the_proxy_placeholder_profiles_model_without_brackets() -> None:
    before = [("conversations", "0037_modelprofile_host_preset")]
    after = [("conversations", "0038_proxy_placeholder_model_unbracketed")]
    old = _migrate(before).loader.project_state(before).apps
    Profile = old.get_model("conversations", "ModelProfile")
    Profile.objects.create(name="recorded by proxy: openai_chat · 1", model="(as the host sent it)")
    Profile.objects.create(name="mine", model="(as the host sent it)")

    new = _migrate(after).loader.project_state(after).apps
    models = dict(new.get_model("conversations", "ModelProfile").objects.values_list("name", "model"))

    assert models["recorded by proxy: openai_chat · 1"] == "as the host sent it"
    assert models["mine"] == "(as the host sent it)"  # a profile of a user's own is left as it is
