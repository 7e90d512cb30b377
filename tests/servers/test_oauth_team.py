"""OAuth grants are per user: in alice's conversation shared with her team, bob's turn reaches
the protected server with bob's own grant, or stops with "needs authorization" and a Connect
link; alice's grant serves him only once she shares it, an audited choice of hers
(``tests.fixtures.oauth_server`` on localhost)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from conversations.models import AuditEvent, Conversation, Exchange, Team, Turn
from conversations.runner import turn_run
from conversations.services import turn_start
from servers import gateway
from servers.grants import grant_ensure, grant_get, grant_settings, grant_share
from servers.models import McpServer
from tests.factories import ConversationFactory
from tests.fixtures.oauth_server import FakeAuthorization, Knobs, Served
from tests.servers.test_oauth_turns import authorize, turn_problems

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def served() -> Iterator[FakeAuthorization]:
    with Served() as fake:
        yield fake


@pytest.fixture
def guarded(served: FakeAuthorization, workbench: None) -> Iterator[McpServer]:
    served.knobs = Knobs()
    served.seen.clear()
    yield McpServer.objects.create(name="guarded", transport="http", url=served.mcp_url)
    gateway.close_all()


@pytest.fixture
def shared_conversation(guarded: McpServer, alice: User, bob: User) -> Conversation:
    team = Team.objects.create(name="class")
    team.members.add(alice, bob)
    conversation: Conversation = ConversationFactory(owner=alice, servers=[guarded], tool_choice="required")
    return conversation


def ask(conversation: Conversation, user: User) -> Turn:
    turn = turn_start(conversation=conversation, question="whoami", dispatch=False, asked_by=user)
    turn_run(turn_id=turn.pk)
    turn.refresh_from_db()
    return turn


def whoami(turn: Turn) -> str:
    """The client id the server saw the call authorized with (its result names it)."""
    bodies = [e.response_body for e in Exchange.objects.filter(turn=turn, label__startswith="tools/call")]
    return " ".join(bodies)


def client_id(server: McpServer, user: User) -> str:
    grant = grant_get(server=server, user=user)
    assert grant is not None
    return grant_settings(grant=grant).store.client_info.client_id  # type: ignore[union-attr]


def test_a_team_mates_turn_without_a_grant_of_his_own_needs_authorization_with_a_connect_link(
    guarded: McpServer, shared_conversation: Conversation, alice: User, bob: User
) -> None:
    authorize(guarded, alice)
    assert ask(shared_conversation, alice).status == Turn.Status.DONE

    turn = ask(shared_conversation, bob)

    problems = turn_problems(turn)
    assert "guarded needs authorization" in problems
    assert f"Connect: {reverse('servers-detail', args=['guarded'])}" in problems
    assert not Exchange.objects.filter(turn=turn, label__startswith="tools/call").exists()
    assert turn.asked_by == bob


def test_a_team_mates_turn_uses_his_own_grant(
    guarded: McpServer, shared_conversation: Conversation, alice: User, bob: User
) -> None:
    authorize(guarded, alice)
    authorize(guarded, bob)

    alices = ask(shared_conversation, alice)
    bobs = ask(shared_conversation, bob)

    assert alices.status == bobs.status == Turn.Status.DONE
    assert client_id(guarded, alice) in whoami(alices) and client_id(guarded, alice) not in whoami(bobs)
    assert client_id(guarded, bob) in whoami(bobs)


def test_a_grant_its_owner_shared_with_the_team_serves_a_team_mate_and_the_choice_is_audited(
    guarded: McpServer, shared_conversation: Conversation, alice: User, bob: User
) -> None:
    authorize(guarded, alice)
    web = Client()
    web.force_login(alice)

    shared = web.post(reverse("servers-oauth-share", args=["guarded"]), {"shared": "1"})
    bobs = ask(shared_conversation, bob)
    web.post(reverse("servers-oauth-share", args=["guarded"]), {"shared": "0"})
    after = ask(shared_conversation, bob)

    assert shared.status_code == 302
    assert bobs.status == Turn.Status.DONE, turn_problems(bobs)
    assert client_id(guarded, alice) in whoami(bobs)
    assert "guarded needs authorization" in turn_problems(after)
    events = list(
        AuditEvent.objects.filter(subject="guarded").order_by("id").values_list("action", "actor_name")
    )
    assert events[-2:] == [
        (AuditEvent.Action.GRANT_SHARED, "alice"),
        (AuditEvent.Action.GRANT_UNSHARED, "alice"),
    ]


def test_only_the_grants_owner_can_share_it(guarded: McpServer, alice: User, bob: User) -> None:
    authorize(guarded, alice)
    web = Client()
    web.force_login(bob)

    response = web.post(reverse("servers-oauth-share", args=["guarded"]), {"shared": "1"})

    assert response.status_code == 404  # bob has no grant of his own to share
    assert not grant_get(server=guarded, user=alice).shared_with_team  # type: ignore[union-attr]
    assert not AuditEvent.objects.filter(action=AuditEvent.Action.GRANT_SHARED).exists()


def test_the_oauth_page_offers_sharing_to_the_grants_owner(guarded: McpServer, alice: User) -> None:
    authorize(guarded, alice)
    web = Client()
    web.force_login(alice)

    page = web.get(reverse("servers-oauth", args=["guarded"])).content.decode()

    assert "Share with my team" in page and "yours alone" in page


def test_a_team_mates_unfinished_sign_in_does_not_hide_the_owners_shared_grant(
    guarded: McpServer, shared_conversation: Conversation, alice: User, bob: User
) -> None:
    authorize(guarded, alice)
    grant_share(grant=grant_get(server=guarded, user=alice), shared=True, actor=alice)  # type: ignore[arg-type]
    grant_ensure(server=guarded, user=bob)  # Connect pressed, never signed in: no token

    turn = ask(shared_conversation, bob)

    assert turn.status == Turn.Status.DONE, turn_problems(turn)
    assert client_id(guarded, alice) in whoami(turn)
