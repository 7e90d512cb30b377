"""The database's watch on the tables secrets are read from (``secret_sources.watch_sql``).

SQLite drops a table's triggers whenever a migration rebuilds the table (adding a column with a
default, altering one, removing one: forwards or backwards), and a watch gone missing is silent:
changed secrets are no longer masked until something still watched changes. So every table the
watch covers is checked, after all migrations and around the migrations that rebuild one, against
the watch's own definition (``watched_tables``), not a list kept here."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from conversations.secret_sources import watch_sql, watched_tables

pytestmark = pytest.mark.django_db(transaction=True)


def _watch_triggers() -> dict[str, dict[str, str]]:
    """Per table, the secrets-watch triggers on it: name → definition (as the database gives it)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(oid) FROM pg_trigger "
                "WHERE NOT tgisinternal AND tgname LIKE '%%\\_secrets\\_%%'"
            )
        else:
            cursor.execute(
                "SELECT tbl_name, name, sql FROM sqlite_master WHERE type = 'trigger' AND name LIKE '%\\_secrets\\_%' ESCAPE '\\'"
            )
        rows = cursor.fetchall()
    triggers: dict[str, dict[str, str]] = {}
    for table, name, definition in rows:
        triggers.setdefault(table.strip('"'), {})[name] = definition
    return triggers


def _unwatched() -> list[str]:
    """What is missing or different in the watch of each watched table (empty: all watched)."""
    found = _watch_triggers()
    problems = []
    for table, columns in watched_tables().items():
        have = found.get(table, {})
        expected = watch_sql(connection.vendor, table, columns)
        if connection.vendor == "sqlite":
            # SQLite keeps each trigger's CREATE statement as it was given.
            missing = sorted(set(expected) - set(have.values()))
        else:
            named = [statement.split()[2] for statement in expected if statement.startswith("CREATE TRIGGER")]
            missing = sorted(set(named) - set(have))
            updated = have.get(f"{table}_secrets_updated", "").lower()
            # PostgreSQL gives the condition back normalised (``(old.name)::text IS DISTINCT ...``).
            missing += [
                f"{table}.{column} unwatched"
                for column in columns
                if not re.search(rf"\bold\.{column}\b", updated)
            ]
        problems += [f"{table}: {item}" for item in missing]
    return problems


def _migrate(app: str, name: str) -> None:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate([(app, name)])


@pytest.fixture
def _latest_schema_after() -> Iterator[None]:
    """Whatever a test migrated back to, the database ends at the latest migrations again."""
    yield
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())


def test_the_watch_covers_every_table_secrets_are_read_from_and_each_column() -> None:
    from conversations.models import ModelProfile, RedactionRule
    from servers.models import McpServer

    watched = watched_tables()

    assert watched[RedactionRule._meta.db_table] == ("name", "pattern", "enabled")
    assert watched[ModelProfile._meta.db_table] == ("api_key_env",)
    # Registered by the servers app with its source of secrets.
    assert watched[McpServer._meta.db_table] == ("env", "headers")


def test_every_watched_table_has_its_whole_watch_after_all_migrations() -> None:
    assert _unwatched() == []


@pytest.mark.usefixtures("_latest_schema_after")
@pytest.mark.parametrize(
    ("app", "before", "rebuilding"),
    [
        ("conversations", "0036_userpreference_class_view", "0037_modelprofile_host_preset"),
        ("servers", "0012_operation_kind_ping", "0013_sampling_review_send_anyway"),
    ],
)
def test_a_migration_that_rebuilds_a_watched_table_leaves_it_watched_both_ways(
    app: str, before: str, rebuilding: str
) -> None:
    _migrate(app, before)
    assert _unwatched() == [], f"after unapplying {rebuilding}"

    _migrate(app, rebuilding)
    assert _unwatched() == [], f"after applying {rebuilding}"
