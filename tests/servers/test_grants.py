"""One OAuth grant per server and user: configuring again reuses the row, and the database
refuses a second one (for a user, and for the CLI's grant, which belongs to no user)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction

from servers.grants import grant_configure, grant_ensure, grant_get
from servers.models import McpServer, OAuthGrant

pytestmark = pytest.mark.django_db


@pytest.fixture
def server() -> McpServer:
    return McpServer.objects.create(name="guarded", transport="http", url="http://127.0.0.1:9/mcp")


def test_configuring_a_grant_again_resets_the_same_row(server: McpServer, alice: User) -> None:
    first = grant_configure(server=server, user=alice, grant="authorization_code", values={})
    second = grant_configure(
        server=server, user=alice, grant="client_credentials", values={"client_id": "c", "client_secret": "s"}
    )

    assert second.pk == first.pk
    assert OAuthGrant.objects.filter(server=server, user=alice).count() == 1
    assert grant_get(server=server, user=alice) == second


def test_the_database_refuses_a_second_grant_for_the_same_server_and_user(
    server: McpServer, alice: User
) -> None:
    OAuthGrant.objects.create(server=server, user=alice)

    with pytest.raises(IntegrityError), transaction.atomic():
        OAuthGrant.objects.create(server=server, user=alice)


def test_the_database_refuses_a_second_command_line_grant_for_a_server(server: McpServer) -> None:
    OAuthGrant.objects.create(server=server, user=None)

    with pytest.raises(IntegrityError), transaction.atomic():
        OAuthGrant.objects.create(server=server, user=None)


def test_each_user_and_the_command_line_keep_a_grant_of_their_own(
    server: McpServer, alice: User, bob: User
) -> None:
    grant_configure(server=server, user=None, grant="client_credentials", values={"client_id": "cli"})
    grant_ensure(server=server, user=alice)
    grant_ensure(server=server, user=bob)
    grant_ensure(server=server, user=bob)

    owners = sorted(str(owner) for owner in OAuthGrant.objects.values_list("user__username", flat=True))
    assert owners == ["None", "alice", "bob"]
