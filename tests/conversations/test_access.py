"""The one access rule, with personas: alice and bob share a team, carol is alone, dave is staff."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser, User
from django.test import Client

from conversations.models import AuditEvent, Conversation, Team
from conversations.selectors import (
    ConversationFilters,
    conversation_get,
    conversation_list,
    conversation_search,
)
from tests.factories import ConversationFactory, StepFactory, TurnFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def people() -> dict[str, User]:
    users = {name: User.objects.create_user(name, password="pw") for name in ("alice", "bob", "carol")}
    users["dave"] = User.objects.create_user("dave", password="pw", is_staff=True)
    Team.objects.create(name="platform").members.add(users["alice"], users["bob"])
    return users


@pytest.fixture
def alices(people: dict[str, User]) -> Conversation:
    return ConversationFactory(owner=people["alice"])


def test_the_owner_her_team_and_staff_see_a_conversation_and_no_one_else(
    people: dict[str, User], alices: Conversation
) -> None:
    seen = {name: conversation_list(user=user).filter(pk=alices.pk).exists() for name, user in people.items()}

    assert seen == {"alice": True, "bob": True, "carol": False, "dave": True}


def test_membership_in_several_teams_does_not_duplicate_rows(
    people: dict[str, User], alices: Conversation
) -> None:
    Team.objects.create(name="second").members.add(people["alice"], people["bob"])

    assert list(conversation_list(user=people["bob"])) == [alices]


def test_the_filtered_list_keeps_the_rule_for_every_persona(people: dict[str, User]) -> None:
    """Text and tool filters search only what the user may see (owner, team mates; staff all)."""
    found = {}
    for owner in ("alice", "carol"):
        turn = TurnFactory(
            conversation=ConversationFactory(owner=people[owner], title=f"{owner}'s"),
            question="Oslo weather?",
        )
        StepFactory(turn=turn, parent=StepFactory(turn=turn), kind="tool", tool_name="get_weather_forecast")
    for name, user in people.items():
        for filters in (ConversationFilters(q="Oslo"), ConversationFilters(tool="get_weather_forecast")):
            titles = sorted(c.title for c in conversation_search(user=user, filters=filters))
            found.setdefault(name, titles)
            assert titles == found[name], (name, filters)

    assert found == {
        "alice": ["alice's"],
        "bob": ["alice's"],
        "carol": ["carol's"],
        "dave": ["alice's", "carol's"],
    }


def _opens(user: User | AnonymousUser, conversation: Conversation, public_id: object = None) -> bool:
    try:
        found = conversation_get(user=user, public_id=public_id or conversation.public_id)  # type: ignore[arg-type]
    except Conversation.DoesNotExist:
        return False
    assert found == conversation and found.owner_id == conversation.owner_id
    return True


def test_one_conversation_opens_for_exactly_whom_the_list_shows_it(people: dict[str, User]) -> None:
    """The lookup every page, API call and socket starts from (the row, then the rule decided on
    its owner) agrees with the list's rule for every persona and every owner: the user's own,
    a team mate's and an outsider's, by its UUID or as text."""
    conversations = [ConversationFactory(owner=people[name]) for name in ("alice", "bob", "carol")]
    viewers: dict[str, User | AnonymousUser] = {**people, "anonymous": AnonymousUser()}
    for name, user in viewers.items():
        for conversation in conversations:
            listed = conversation_list(user=user).filter(pk=conversation.pk).exists()
            assert _opens(user, conversation) == listed, (name, conversation.owner_id)
            assert _opens(user, conversation, str(conversation.public_id)) == listed, (name, "as text")

    assert [_opens(people["bob"], c) for c in conversations] == [True, True, False]
    assert [_opens(people["carol"], c) for c in conversations] == [False, False, True]
    assert [_opens(people["dave"], c) for c in conversations] == [True, True, True]


def test_a_team_joined_or_left_is_seen_by_the_next_lookup(
    people: dict[str, User], alices: Conversation
) -> None:
    assert not _opens(people["carol"], alices)

    Team.objects.get(name="platform").members.add(people["carol"])
    assert _opens(people["carol"], alices)

    Team.objects.get(name="platform").members.remove(people["carol"], people["bob"])
    assert not _opens(people["carol"], alices) and not _opens(people["bob"], alices)
    assert _opens(people["alice"], alices)


def test_a_user_who_leaves_the_team_no_longer_sees_its_conversations(
    people: dict[str, User], alices: Conversation
) -> None:
    Team.objects.get(name="platform").members.remove(people["bob"])

    assert not conversation_list(user=people["bob"]).filter(pk=alices.pk).exists()


@pytest.mark.parametrize(
    "path", ["/c/{id}/", "/api/conversations/{id}", "/c/{id}/rows?since=2020-01-01T00:00:00"]
)
def test_an_outsider_gets_404_on_every_surface(
    people: dict[str, User], alices: Conversation, path: str
) -> None:
    client = Client()
    client.force_login(people["carol"])

    assert client.get(path.format(id=alices.public_id)).status_code == 404


@pytest.mark.parametrize("who", ["bob", "dave"])
def test_a_team_mate_and_staff_can_open_it_and_the_read_is_audited(
    people: dict[str, User], alices: Conversation, who: str
) -> None:
    client = Client()
    client.force_login(people[who])

    assert client.get(f"/c/{alices.public_id}/").status_code == 200
    assert client.get(f"/api/conversations/{alices.public_id}").status_code == 200

    events = AuditEvent.objects.filter(
        actor_name=who, conversation_public_id=alices.public_id, action="opened"
    )
    assert sorted(e.detail["via"] for e in events) == ["api", "page"]


def test_an_imported_conversation_refuses_follow_up_questions(people: dict[str, User]) -> None:
    imported = ConversationFactory(owner=people["alice"], imported_meta={"owner": "someone"})
    client = Client()
    client.force_login(people["alice"])

    response = client.post(f"/c/{imported.public_id}/ask", {"question": "more?"})

    assert response.status_code == 409
    assert not imported.turns.exists()
