"""A runner's turn end: one conditional write of the turn, and a seal made from what was written
without reading the row back, unless a value would not come back as it was written; every seal
verifies as one made from the row read back."""

from __future__ import annotations

from collections.abc import Iterator
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from conversations.models import Conversation, ModelProfile, Turn
from conversations.record import integrity
from conversations.record.recording import TurnRecorder
from conversations.record.verification import conversation_verify
from conversations.record.writer import writes_flush
from conversations.runner import turn_run
from conversations.services import conversation_start, demo_profile_ensure, turn_start
from servers import gateway
from servers.services import demo_server_ensure

pytestmark = pytest.mark.django_db(transaction=True)

TURN_TABLE = connection.ops.quote_name(Turn._meta.db_table)
# How the whole row of a turn is read (``Turn.objects...get``): its id column first.
WHOLE_ROW_READ = f"SELECT {TURN_TABLE}.{connection.ops.quote_name('id')}"


@pytest.fixture
def turn() -> Iterator[Turn]:
    alice = User.objects.create_user("alice")
    profile = ModelProfile.objects.create(name="p-alice", model="demo", is_demo=True)
    conversation = Conversation.objects.create(owner=alice, title="weather", model_profile=profile)
    yield Turn.objects.create(
        conversation=conversation,
        seq=1,
        question="Weather?",
        paradigm="native",
        tool_choice="auto",
        status=Turn.Status.RUNNING,
        claim=7,
    )
    writes_flush()


def _ended(turn: Turn, transcript: list[object]) -> tuple[str | None, list[str]]:
    """The runner's end of ``turn`` (done, with ``transcript``): what it returned, and the SQL it
    ran through Django's connection."""
    mine = Turn.objects.select_related("conversation").get(pk=turn.pk)
    recorder = TurnRecorder(mine, claim=7)
    step = recorder.step_open(kind="answer", title="the answer")
    recorder.step_close(step, status="ok", text="Sunny.")
    recorder.drain()
    mine.transcript = transcript
    mine.mark_done("Sunny.")
    with CaptureQueriesContext(connection) as queries:
        ended = recorder.turn_end()
    return ended, [query["sql"] for query in queries.captured_queries]


def _verified(conversation: Conversation) -> bool:
    return conversation_verify(conversation=Conversation.objects.get(pk=conversation.pk)).intact


def test_a_runners_end_writes_the_turn_once_and_seals_it_without_reading_it_back(turn: Turn) -> None:
    transcript = [{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": "Sunny."}]

    ended, sql = _ended(turn, transcript)

    assert ended is None
    assert not [text for text in sql if text.startswith(WHOLE_ROW_READ)]
    assert len([text for text in sql if text.startswith(f"UPDATE {TURN_TABLE}")]) >= 1
    stored = Turn.objects.get(pk=turn.pk)
    assert (stored.status, stored.answer, stored.transcript) == (Turn.Status.DONE, "Sunny.", transcript)
    assert stored.seal and stored.seal_steps
    assert _verified(turn.conversation)


# Python writes these floats one way; PostgreSQL's jsonb gives them back another (10000000000000000,
# 0.0), which is what verification reads.
AWKWARD_NUMBERS = [1e16, -0.0, 1.5e300]


def test_a_turn_whose_json_would_not_come_back_as_written_is_sealed_as_read_back(turn: Turn) -> None:
    transcript = [{"role": "tool", "content": "numbers", "numbers": AWKWARD_NUMBERS}]

    ended, sql = _ended(turn, transcript)

    assert ended is None
    assert len([text for text in sql if text.startswith(WHOLE_ROW_READ)]) == 1
    assert _verified(turn.conversation)


@pytest.mark.postgres
def test_sealing_such_a_turn_as_written_would_not_verify_on_postgresql(
    turn: Turn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Why the read-back is kept for those numbers: the seal would not match the stored row."""
    monkeypatch.setattr(integrity, "_as_stored", lambda text: True)
    transcript = [{"role": "tool", "content": "numbers", "numbers": AWKWARD_NUMBERS}]

    ended, _ = _ended(turn, transcript)

    assert ended is None
    assert Turn.objects.get(pk=turn.pk).transcript[0]["numbers"] == [10**16, 0.0, 15 * 10**299]
    assert not _verified(turn.conversation)


def test_a_text_that_only_looks_like_such_a_number_is_read_back_and_verifies(turn: Turn) -> None:
    transcript = [{"role": "assistant", "content": "about 1e+16 stars, and -0.0 degrees"}]

    ended, sql = _ended(turn, transcript)

    assert ended is None
    assert len([text for text in sql if text.startswith(WHOLE_ROW_READ)]) == 1
    assert _verified(turn.conversation)


def test_follow_up_turns_run_through_the_runner_verify_with_manage_py_verify() -> None:
    alice = User.objects.create_user("alice")
    conversation, first = conversation_start(
        owner=alice,
        model_profile=demo_profile_ensure(),
        question="What will the weather be like in Beijing tomorrow?",
        servers=[demo_server_ensure()],
        dispatch=False,
    )
    try:
        assert turn_run(turn_id=first.pk) == Turn.Status.DONE
        for question in ("What is 12 * (3 + 4)?", "And in Paris?"):
            conversation.refresh_from_db()
            follow_up = turn_start(conversation=conversation, question=question, dispatch=False)
            assert turn_run(turn_id=follow_up.pk) == Turn.Status.DONE
    finally:
        gateway.close_all()

    out = StringIO()
    call_command("verify", str(conversation.public_id), stdout=out)
    assert "3 sealed turn(s) verified" in out.getvalue()
