"""The turns a long conversation's page asks for: the newest few, those before a turn, and the
row counts of only those turns."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User

from conversations import selectors
from conversations.models import Conversation, Team, Turn
from tests.factories import ConversationFactory, StepFactory, TurnFactory

pytestmark = pytest.mark.django_db


def test_the_newest_turns_come_in_order_and_before_a_turn_means_numbered_below_it() -> None:
    conversation = ConversationFactory()
    turns = [TurnFactory(conversation=conversation) for _ in range(5)]
    TurnFactory()  # another conversation's

    assert selectors.conversation_turns(conversation=conversation) == turns
    assert selectors.conversation_turns(conversation=conversation, newest=2) == turns[3:]
    assert selectors.conversation_turns(conversation=conversation, newest=2, before_seq=4) == turns[1:3]
    assert selectors.conversation_turns(conversation=conversation, newest=9, before_seq=3) == turns[:2]
    assert selectors.conversation_turns(conversation=conversation, before_seq=1) == []
    assert selectors.turn_count_before(conversation=conversation, seq=4) == 3
    assert selectors.turn_count_before(conversation=conversation, seq=1) == 0


def test_row_counts_can_be_asked_for_some_turns_only() -> None:
    conversation = ConversationFactory()
    first, second = TurnFactory(conversation=conversation), TurnFactory(conversation=conversation)
    for turn, rows in ((first, 2), (second, 3)):
        for _ in range(rows):
            StepFactory(parent=StepFactory(turn=turn), kind="tool")  # a row and its tool call

    assert selectors.turn_row_counts(conversation=conversation) == {first.pk: 2, second.pk: 3}
    assert selectors.turn_row_counts(conversation=conversation, turns=[second]) == {second.pk: 3}
    assert selectors.turn_row_counts(conversation=conversation, turns=[]) == {}
    assert isinstance(selectors.conversation_turns(conversation=conversation)[0], Turn)


def test_one_conversation_is_read_with_its_profile_and_owner_in_one_query_and_a_mates_in_two(
    django_assert_num_queries: Any,
) -> None:
    """Every page, API call and websocket of a conversation looks it up first: the conversation
    with its profile and owner in one query, nothing a list carries besides (its turn count); a
    team mate's access costs one small membership query more, staff's none."""
    owner, mate, stranger = (User.objects.create_user(name) for name in ("owner", "mate", "stranger"))
    staff = User.objects.create_user("staff", is_staff=True)
    Team.objects.create(name="class").members.add(owner, mate)
    conversation = ConversationFactory(owner=owner)

    for user, queries in ((owner, 1), (staff, 1), (mate, 2)):
        with django_assert_num_queries(queries):
            found = selectors.conversation_get(user=user, public_id=conversation.public_id)
            assert (found.model_profile.pk, found.owner.pk) == (conversation.model_profile_id, owner.pk)
    with pytest.raises(Conversation.DoesNotExist):
        selectors.conversation_get(user=stranger, public_id=conversation.public_id)


def test_a_lookup_without_the_owner_reads_the_profile_and_leaves_the_owner_to_a_later_query(
    django_assert_num_queries: Any,
) -> None:
    """The question's POST needs the owner's id, not the owner: ``with_owner=False`` joins the
    profile only, and the owner, if asked for, is read then."""
    owner, mate, stranger = (User.objects.create_user(name) for name in ("owner", "mate", "stranger"))
    Team.objects.create(name="class").members.add(owner, mate)
    conversation = ConversationFactory(owner=owner)

    for user, queries in ((owner, 1), (mate, 2)):
        with django_assert_num_queries(queries):
            found = selectors.conversation_get(user=user, public_id=conversation.public_id, with_owner=False)
            assert (found.model_profile.pk, found.owner_id) == (conversation.model_profile_id, owner.pk)
        with django_assert_num_queries(1):
            assert found.owner == owner
    with pytest.raises(Conversation.DoesNotExist):
        selectors.conversation_get(user=stranger, public_id=conversation.public_id, with_owner=False)
