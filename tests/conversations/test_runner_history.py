"""What a follow-up turn is told of the turns before it (``runner._history_before``), however
many of them never finished."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User

from conversations import runner
from conversations.loop.llm import Message
from conversations.models import Conversation, Turn
from tests.factories import ConversationFactory, TurnFactory

pytestmark = pytest.mark.django_db


def _history_recursive(conversation_id: int, seq: int) -> list[Message]:
    """The history as it was read before (one query and one level of recursion per turn that
    never finished): the reference the bounded read must equal."""
    if seq <= 1:
        return []
    previous = (
        Turn.objects.filter(conversation_id=conversation_id, seq__lt=seq)
        .order_by("-seq")
        .values_list("seq", "transcript", "question", "answer")
        .first()
    )
    if previous is None:
        return []
    previous_seq, transcript, question, answer = previous
    if transcript:
        return [Message.from_json(m) for m in transcript]
    history = _history_recursive(conversation_id, previous_seq)
    history.append(Message(role="user", content=question))
    if answer:
        history.append(Message(role="assistant", content=answer))
    return history


def _said(history: list[Message]) -> list[tuple[str, str]]:
    return [(message.role, message.content) for message in history]


def _transcript(n: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"asked {n}"}, {"role": "assistant", "content": f"told {n}"}]


@pytest.fixture
def conversation() -> Conversation:
    return ConversationFactory(owner=User.objects.create_user("alice"))


def _unfinished(conversation: Conversation, seqs: range) -> None:
    """Turns that never finished (no transcript), made in one insert."""
    Turn.objects.bulk_create(
        Turn(
            conversation=conversation,
            seq=seq,
            question=f"question {seq}?",
            answer=f"half an answer {seq}" if seq % 3 else "",
            status=Turn.Status.INTERRUPTED,
            paradigm=conversation.paradigm,
            tool_choice=conversation.tool_choice,
        )
        for seq in seqs
    )


def test_a_follow_up_after_two_thousand_unfinished_turns_reads_them_all_in_three_queries(
    conversation: Conversation, django_assert_num_queries: Any
) -> None:
    TurnFactory(conversation=conversation, seq=1, question="first?", transcript=_transcript(1))
    _unfinished(conversation, range(2, 2002))

    with django_assert_num_queries(3):
        history = runner._history_before(conversation.pk, 2002)

    said = _said(history)
    assert said[:2] == [("user", "asked 1"), ("assistant", "told 1")]
    expected = []
    for seq in range(2, 2002):
        expected.append(("user", f"question {seq}?"))
        if seq % 3:
            expected.append(("assistant", f"half an answer {seq}"))
    assert said[2:] == expected


def test_two_thousand_unfinished_turns_with_no_transcript_before_them_are_all_told(
    conversation: Conversation, django_assert_num_queries: Any
) -> None:
    _unfinished(conversation, range(1, 2001))

    with django_assert_num_queries(3):
        history = runner._history_before(conversation.pk, 2001)

    assert len(history) == 2000 + sum(1 for seq in range(1, 2001) if seq % 3)
    assert _said(history)[0] == ("user", "question 1?")
    assert _said(history)[-2:] == [("user", "question 2000?"), ("assistant", "half an answer 2000")]


# Each case: the turns before the follow-up, in seq order (gaps allowed), each "T" (finished, with
# a transcript), "u" (never finished, with an answer so far) or "e" (never finished, nothing
# answered); None: no turn of that seq.
CASES = [
    "",
    "T",
    "u",
    "e",
    "TT",
    "Tu",
    "uT",
    "ue",
    "TuTe",
    "TTuue",
    "uuT",
    "TueuTeu",
    "T_u_e",
    "u__T__u",
    "__e",
]


@pytest.mark.parametrize("case", CASES)
def test_the_history_equals_the_one_read_turn_by_turn(
    conversation: Conversation, case: str, django_assert_max_num_queries: Any
) -> None:
    for seq, kind in enumerate(case, start=1):
        if kind == "_":
            continue
        TurnFactory(
            conversation=conversation,
            seq=seq,
            question=f"question {seq}?",
            answer="" if kind == "e" else f"answer {seq}",
            transcript=_transcript(seq) if kind == "T" else [],
            status=Turn.Status.DONE if kind == "T" else Turn.Status.INTERRUPTED,
        )
    for seq in range(1, len(case) + 2):
        expected = _said(_history_recursive(conversation.pk, seq))
        with django_assert_max_num_queries(3):
            history = runner._history_before(conversation.pk, seq)
        assert _said(history) == expected, (case, seq)


def test_a_turn_whose_transcript_is_empty_but_not_a_list_counts_as_unfinished(
    conversation: Conversation,
) -> None:
    """An imported turn may hold any JSON as its transcript; an empty one (``{}``, ``""``) is no
    transcript, as ``[]`` is."""
    TurnFactory(conversation=conversation, seq=1, question="first?", transcript=_transcript(1))
    TurnFactory(conversation=conversation, seq=2, question="second?", answer="two", transcript={})
    TurnFactory(conversation=conversation, seq=3, question="third?", answer="", transcript="")
    TurnFactory(conversation=conversation, seq=4, question="fourth?", answer="four", transcript=[])

    said = _said(runner._history_before(conversation.pk, 5))

    assert said == _said(_history_recursive(conversation.pk, 5))
    assert said == [
        ("user", "asked 1"),
        ("assistant", "told 1"),
        ("user", "second?"),
        ("assistant", "two"),
        ("user", "third?"),
        ("user", "fourth?"),
        ("assistant", "four"),
    ]
