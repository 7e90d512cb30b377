"""The servers app's data migrations on the real database: what they do to rows made before them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("servers", "0008_operation_runner")]
AFTER = [("servers", "0009_one_grant_per_server_and_user")]


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


def test_0009_keeps_the_newest_grant_of_each_server_and_user_the_one_that_was_read() -> None:
    old = _migrate(BEFORE).loader.project_state(BEFORE).apps
    User = old.get_model("auth", "User")
    Server = old.get_model("servers", "McpServer")
    Grant = old.get_model("servers", "OAuthGrant")
    alice = User.objects.create(username="alice")
    bob = User.objects.create(username="bob")
    server = Server.objects.create(name="guarded", transport="http", url="http://127.0.0.1:9/mcp")
    other = Server.objects.create(name="other", transport="http", url="http://127.0.0.1:9/other")
    rows = [
        Grant.objects.create(server=server, user=user, scope=scope)
        for user, scope in (
            (alice, "old"),
            (None, "old cli"),
            (alice, "newest"),
            (bob, "bob's"),
            (None, "newest cli"),
        )
    ]
    Grant.objects.create(server=other, user=alice, scope="other server")

    new = _migrate(AFTER).loader.project_state(AFTER).apps
    kept = new.get_model("servers", "OAuthGrant").objects.order_by("id")

    assert list(kept.values_list("server__name", "user__username", "scope")) == [
        ("guarded", "alice", "newest"),
        ("guarded", "bob", "bob's"),
        ("guarded", None, "newest cli"),
        ("other", "alice", "other server"),
    ]
    assert rows[2].pk in set(kept.values_list("id", flat=True))
