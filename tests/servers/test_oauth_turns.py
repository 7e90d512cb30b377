"""Agent turns reach an OAuth-protected HTTP server with the conversation owner's own grant
(``servers.toolhost``): the demo model's tool call succeeds once the owner authorized, and
another user's turn never rides on that grant (``tests.fixtures.oauth_server`` on localhost)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from conversations.models import Conversation, Exchange, Step, Turn
from conversations.runner import turn_run
from conversations.services import turn_start
from servers import gateway
from servers.grants import grant_ensure, grant_get
from servers.models import McpServer, OAuthGrant, Operation
from servers.services import operation_start
from tests.factories import ConversationFactory
from tests.fixtures.oauth_server import FakeAuthorization, Knobs, Served

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


def authorize(server: McpServer, user: User) -> None:
    """Connect in the browser, as ``user`` (the fixture's authorization server approves at once)."""
    grant_ensure(server=server, user=user)
    operation = operation_start(server=server, user=user, kind=Operation.Kind.CONNECT)
    assert operation.status == Operation.Status.OK, operation.error
    assert grant_get(server=server, user=user).has_token  # type: ignore[union-attr]


def ask(server: McpServer, user: User) -> Turn:
    conversation: Conversation = ConversationFactory(owner=user, servers=[server], tool_choice="required")
    turn = turn_start(conversation=conversation, question="whoami", dispatch=False)
    turn_run(turn_id=turn.pk)
    turn.refresh_from_db()
    return turn


def tool_results(turn: Turn) -> list[Step]:
    return list(Step.objects.filter(turn=turn, kind=Step.Kind.TOOL))


def everything_recorded() -> str:
    return "\n".join(
        f"{e.label} {e.request_headers} {e.request_body} {e.response_headers} {e.response_body}"
        for e in Exchange.objects.all()
    )


def test_a_turn_calls_the_protected_server_with_its_owners_grant(
    guarded: McpServer, served: FakeAuthorization, alice: User
) -> None:
    authorize(guarded, alice)

    turn = ask(guarded, alice)

    assert turn.status == Turn.Status.DONE, turn.error
    calls = Exchange.objects.filter(turn=turn, label__startswith="tools/call")
    assert calls.exists()
    assert any("whoami:" in call.response_body for call in calls)
    issued = list(served.tokens) + list(served.refresh_tokens)
    recorded = everything_recorded()
    assert issued and not any(token in recorded for token in issued)
    mcp_posts = [e for e in Exchange.objects.filter(turn=turn) if "authorization" in e.request_headers]
    assert mcp_posts and all(e.request_headers["authorization"] == "••••••" for e in mcp_posts)


def test_another_users_turn_gets_the_clear_error_even_with_the_first_users_grant_present(
    guarded: McpServer, alice: User, bob: User
) -> None:
    turn = ask(guarded, bob)
    assert "guarded needs authorization (HTTP 401" in turn_problems(turn)

    authorize(guarded, alice)
    assert ask(guarded, alice).status == Turn.Status.DONE  # alice's session is pooled now

    turn = ask(guarded, bob)
    assert "guarded needs authorization (HTTP 401" in turn_problems(turn)
    assert not Exchange.objects.filter(turn=turn, label__startswith="tools/call").exists()

    # Sessions are per server and user: bob's refusal did not replace alice's session.
    again = ask(guarded, alice)
    assert again.status == Turn.Status.DONE
    connect = Step.objects.get(turn=again, kind=Step.Kind.CONNECT)
    assert "reused pooled session" in connect.text


def turn_problems(turn: Turn) -> str:
    return " ".join(
        [
            turn.error,
            *(f"{step.title} {step.error} {step.diagnostics}" for step in Step.objects.filter(turn=turn)),
        ]
    )


def test_an_expired_token_is_refreshed_for_the_turn_and_kept(
    guarded: McpServer, served: FakeAuthorization, alice: User
) -> None:
    served.knobs = Knobs(token_lifetime=1)
    authorize(guarded, alice)
    before = grant_get(server=guarded, user=alice).sealed_tokens  # type: ignore[union-attr]
    gateway.close_all()

    time.sleep(1.5)

    turn = ask(guarded, alice)

    assert turn.status == Turn.Status.DONE, turn.error
    assert "refresh_token" in [entry["form"].get("grant_type") for entry in served.seen]
    assert grant_get(server=guarded, user=alice).sealed_tokens != before  # type: ignore[union-attr]


def test_a_server_echoing_the_owners_token_never_gets_it_into_the_record(
    guarded: McpServer, served: FakeAuthorization, alice: User
) -> None:
    authorize(guarded, alice)
    served.knobs = Knobs(echo_token=True)

    turn = ask(guarded, alice)

    assert turn.status == Turn.Status.DONE, turn.error
    issued = list(served.tokens) + list(served.refresh_tokens)
    stored = [
        *(str(v) for step in Step.objects.filter(turn=turn) for v in (step.result, step.text, step.prompt)),
        turn.answer,
        everything_recorded(),
    ]
    assert "you sent" in " ".join(stored)
    leaks = [
        text[max(0, text.find(t) - 300) : text.find(t) + 50] for t in issued for text in stored if t in text
    ]
    assert not leaks


def test_a_token_refreshed_during_the_turn_and_echoed_back_is_not_recorded(
    guarded: McpServer, served: FakeAuthorization, alice: User
) -> None:
    served.knobs = Knobs(token_lifetime=1)
    authorize(guarded, alice)
    gateway.close_all()
    time.sleep(1.5)
    served.knobs = Knobs(echo_token=True)

    turn = ask(guarded, alice)

    assert turn.status == Turn.Status.DONE, turn.error
    issued = list(served.tokens) + list(served.refresh_tokens)
    stored = [
        *(str(v) for step in Step.objects.filter(turn=turn) for v in (step.result, step.text, step.prompt)),
        turn.answer,
        everything_recorded(),
    ]
    assert "you sent" in " ".join(stored)
    leaks = [
        text[max(0, text.find(t) - 300) : text.find(t) + 50] for t in issued for text in stored if t in text
    ]
    assert not leaks


@pytest.mark.parametrize("echo", ["result", "everywhere"])
def test_a_token_refreshed_inside_the_tool_call_and_echoed_is_in_no_record_of_that_call(
    guarded: McpServer, served: FakeAuthorization, alice: User, echo: str
) -> None:
    """The stored token has expired and each new one is announced as expiring at once, so the
    client refreshes before every request: the token ``tools/call`` sends (and the server
    repeats) is obtained inside the call, after the turn's redactor was built."""
    authorize(guarded, alice)
    gateway.close_all()
    OAuthGrant.objects.filter(server=guarded, user=alice).update(
        expires_at=timezone.now() - timedelta(hours=1)
    )
    served.knobs = Knobs(
        echo_token=echo == "result", echo_everywhere=echo == "everywhere", announced_lifetime=0
    )
    before = len(served.tokens)

    turn = ask(guarded, alice)

    assert turn.status == Turn.Status.DONE, turn.error
    call = Exchange.objects.get(turn=turn, label__startswith="tools/call")
    assert "you sent [REDACTED:secret]" in call.response_body
    if echo == "everywhere":
        note = Exchange.objects.get(turn=turn, label__startswith="notifications/message")
        assert "authorized by [REDACTED:secret]" in note.response_body
    assert len(served.tokens) > before + 3  # refreshed at every request, the call's included
    issued = list(served.tokens) + list(served.refresh_tokens)
    stored = [
        *(str(v) for step in Step.objects.filter(turn=turn) for v in (step.result, step.text, step.prompt)),
        turn.answer,
        everything_recorded(),
    ]
    assert not [token for token in issued for text in stored if token in text]
