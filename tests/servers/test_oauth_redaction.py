"""An OAuth server that repeats the bearer token it was sent gets it into no record: workbench
operations take their secrets from the same place turns do (``servers.grants.grant_secrets``,
through ``servers.toolhost``'s and ``servers.operations``' one redactor), and a user's grant
credentials mask only the records of the runs they serve (docs/deployment-security.md)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User

from conversations.models import Exchange, Turn
from conversations.services import turn_start
from servers import gateway
from servers.models import McpServer, Operation
from servers.services import operation_start
from tests.factories import ConversationFactory
from tests.fixtures.oauth_server import FakeAuthorization, Knobs, Served
from tests.servers.test_oauth_turns import authorize

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


def _issued(served: FakeAuthorization) -> list[str]:
    return [*served.tokens, *served.refresh_tokens]


def _stored(operation: Operation) -> str:
    operation.refresh_from_db()
    rows = Exchange.objects.filter(server=operation.server_id)
    return " ".join(
        [
            str(operation.result),
            operation.error,
            str(operation.session),
            *(
                f"{e.request_headers} {e.request_body} {e.response_headers} {e.response_body} {e.error}"
                for e in rows
            ),
        ]
    )


def test_a_workbench_call_whose_result_repeats_the_token_stores_it_masked(
    guarded: McpServer, served: FakeAuthorization, alice: User
) -> None:
    authorize(guarded, alice)
    served.knobs = Knobs(echo_token=True)

    operation = operation_start(
        server=guarded, user=alice, kind=Operation.Kind.TOOLS_CALL, target="whoami", arguments={}
    )

    assert operation.status == Operation.Status.OK, operation.error
    stored = _stored(operation)
    assert "you sent [REDACTED:secret]" in stored
    assert not [token for token in _issued(served) if token in stored]


def test_a_token_refreshed_inside_a_workbench_call_and_repeated_is_stored_masked(
    guarded: McpServer, served: FakeAuthorization, alice: User
) -> None:
    served.knobs = Knobs(token_lifetime=1)
    authorize(guarded, alice)
    gateway.close_all()
    time.sleep(1.5)
    served.knobs = Knobs(echo_token=True)

    operation = operation_start(
        server=guarded, user=alice, kind=Operation.Kind.TOOLS_CALL, target="whoami", arguments={}
    )

    assert operation.status == Operation.Status.OK, operation.error
    assert "refresh_token" in [entry["form"].get("grant_type") for entry in served.seen]
    stored = _stored(operation)
    assert "you sent" in stored
    assert not [token for token in _issued(served) if token in stored]


def test_another_users_guess_of_a_grants_token_is_kept_as_typed_and_reveals_nothing(
    guarded: McpServer, served: FakeAuthorization, alice: User, bob: User
) -> None:
    """Redacting alice's token from bob's question would tell bob his guess was right; her
    grant's credentials are masked only in the records of the runs her grant serves."""
    authorize(guarded, alice)
    token = list(served.tokens)[-1]  # alice's, just issued
    wrong = "x" * len(token)

    right_guess = turn_start(
        conversation=ConversationFactory(owner=bob), question=f"is it {token}?", dispatch=False
    )
    wrong_guess = turn_start(
        conversation=ConversationFactory(owner=bob), question=f"is it {wrong}?", dispatch=False
    )

    assert right_guess.question == f"is it {token}?"
    assert wrong_guess.question == f"is it {wrong}?"
    assert Turn.objects.filter(question__contains="REDACTED").count() == 0
