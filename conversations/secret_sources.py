"""The secret values the one redactor knows, and that redactor (``active_redactor``).

This app knows its own secrets (each model profile's key); an app that keeps others registers a
source of them here when Django starts (``servers`` does, for its servers' sealed and ``${VAR}``
env and header values: ``servers.apps``), so that nothing here imports it.

Every question asked and every turn started builds the redactor, and reading the rules and the
secrets took three queries and about 1.5 ms. They are read again only when they may have changed: the
tables that hold them are watched by the database's own triggers (``watch_sql``, installed by
the migrations of the app that owns each table), which log every change in ``SecretsChange``.
A process keeps what it read with the version it read first (that log's count, newest row and
its token; its own environment, built-in keys, sealing key and sources), and one query for the
version tells it whether that still holds: a change committed anywhere, by any route, is seen
by the next build.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NamedTuple

from django.conf import settings
from django.db import connection
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.operations.base import Operation
from django.db.migrations.state import ProjectState

from conversations.models import ModelProfile, RedactionRule, SecretsChange
from conversations.redaction import Redactor, redactor, remember

# A source gives every secret value it holds that can be resolved here (unresolvable ones left out).
SecretSource = Callable[[], Iterable[str]]

_sources: list[SecretSource] = []

# The tables secrets are read from, each with the columns they are read from: what the
# database's triggers watch (``watch_sql``, installed by the migrations of the app that owns
# each table). This app's own; a source registers the tables it reads.
_watched: dict[str, tuple[str, ...]] = {
    RedactionRule._meta.db_table: ("name", "pattern", "enabled"),
    ModelProfile._meta.db_table: ("api_key_env",),
}


def secret_source_register(source: SecretSource, *, watched: Mapping[str, Sequence[str]]) -> None:
    """Have ``configured_secrets`` ask ``source`` too (once, however often it is registered).
    ``watched`` names the tables ``source`` reads, each with the columns it reads: they must be
    watched (``watch_sql``, in their app's migrations), or a change to them is not seen until
    something watched changes; a test checks every one is, after all migrations."""
    if source not in _sources:
        _sources.append(source)
    _watched.update({table: tuple(columns) for table, columns in watched.items()})


def watched_tables() -> dict[str, tuple[str, ...]]:
    """Every table secrets are read from, with the columns its triggers must watch."""
    return dict(_watched)


def configured_secrets() -> list[str]:
    """Every secret value this installation is configured with: each model profile's key (from
    the environment variable it names, or one the app provides), then every registered source's
    values. Values that cannot be resolved here are left out."""
    secrets: list[str] = []
    names = ModelProfile.objects.exclude(api_key_env="").order_by().values_list("api_key_env", flat=True)
    for name in names.distinct():
        value = os.environ.get(name) or settings.BUILTIN_API_KEYS.get(name, "")
        if value:
            secrets.append(value)
    for source in _sources:
        secrets.extend(source())
    return secrets


def active_redactor(*, secrets: Sequence[str] = ()) -> Redactor:
    """The one redactor for what is written: the built-in patterns, the enabled staff rules,
    every configured secret value (``configured_secrets``) and ``secrets`` (values of this run).
    It also becomes the process's ``redaction.current()`` one, which the log filter applies.
    The rules and configured secrets are read again only when their version has changed."""
    configured = _configured_now()
    built = (
        configured.redactor
        if not secrets
        else redactor(rules=configured.rules, secrets=[*configured.secrets, *secrets])
    )
    remember(built)
    return built


class _Configured(NamedTuple):
    version: tuple[object, ...]
    rules: list[tuple[str, str]]
    secrets: list[str]
    redactor: Redactor


# What this process read last, with the version it was read at.
_configured: _Configured | None = None


def _version() -> tuple[object, ...]:
    """The version of what the redactor is built from: the database's log of changes to the
    watched tables (how many, the newest and its token: a log emptied and begun again is not
    taken for the old one), and what this process reads the values with (its environment, the
    built-in keys, the key sealed values open with, the sources registered), as hashes."""
    table = connection.ops.quote_name(SecretsChange._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT count(*), max(id), (SELECT token FROM {table} ORDER BY id DESC LIMIT 1) FROM {table}"
        )
        logged = cursor.fetchone()
    return (
        tuple(logged),
        hash(frozenset(os.environ.items())),
        hash(frozenset(settings.BUILTIN_API_KEYS.items())),
        hash(settings.SECRET_KEY),
        tuple(_sources),
    )


def _configured_now() -> _Configured:
    """The rules and configured secrets as they are now: those read last if their version still
    holds, else read again. The version is read first: what is read after it is at least as new,
    so a change committed meanwhile is kept under the older version and read again next time.
    Two threads reading at once may both read; either result is whole."""
    global _configured
    version = _version()
    found = _configured
    if found is not None and found.version == version:
        return found
    rules = list(RedactionRule.objects.filter(enabled=True).values_list("name", "pattern"))
    secrets = configured_secrets()
    found = _configured = _Configured(version, rules, secrets, redactor(rules=rules, secrets=secrets))
    return found


# --- the watch on the tables secrets are read from (for migrations) -------------------------------

_LOGGED = "INSERT INTO {log} (token) VALUES ({token})"
_TOKEN = {"postgresql": "gen_random_uuid()::text", "sqlite": "lower(hex(randomblob(16)))"}
_FUNCTION = "conversations_secrets_changed"


def watch_sql(vendor: str, table: str, columns: Sequence[str]) -> list[str]:
    """The SQL that has the database log a change to ``table`` in ``SecretsChange``: every row
    inserted or deleted, and every update of one of ``columns`` (the ones secrets are read from;
    an update that leaves them alone logs nothing). Only PostgreSQL and SQLite are supported.
    Used by migrations, so what it writes must stay as it is; a new form gets a new function.
    SQLite drops a table's triggers when a migration rebuilds the table (many schema changes
    do): such a migration changes it inside ``kept_watched`` (a test checks every watched
    table's triggers after all migrations)."""
    log = SecretsChange._meta.db_table
    logged = _LOGGED.format(log=log, token=_TOKEN[vendor])
    if vendor == "postgresql":
        changed = " OR ".join(f"OLD.{column} IS DISTINCT FROM NEW.{column}" for column in columns)
        return [
            f"CREATE OR REPLACE FUNCTION {_FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$ "
            f"BEGIN {logged}; RETURN NULL; END $$",
            f"CREATE TRIGGER {table}_secrets_written AFTER INSERT OR DELETE OR TRUNCATE ON {table} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION {_FUNCTION}()",
            f"CREATE TRIGGER {table}_secrets_updated AFTER UPDATE ON {table} FOR EACH ROW "
            f"WHEN ({changed}) EXECUTE FUNCTION {_FUNCTION}()",
        ]
    changed = " OR ".join(f"OLD.{column} IS NOT NEW.{column}" for column in columns)
    return [
        f"CREATE TRIGGER {table}_secrets_inserted AFTER INSERT ON {table} BEGIN {logged}; END",
        f"CREATE TRIGGER {table}_secrets_deleted AFTER DELETE ON {table} BEGIN {logged}; END",
        f"CREATE TRIGGER {table}_secrets_updated AFTER UPDATE ON {table} WHEN {changed} BEGIN {logged}; END",
    ]


def unwatch_sql(vendor: str, table: str) -> list[str]:
    """The SQL that removes ``watch_sql``'s triggers from ``table`` (not the shared function)."""
    names = ("written", "updated") if vendor == "postgresql" else ("inserted", "deleted", "updated")
    on = f" ON {table}" if vendor == "postgresql" else ""
    return [f"DROP TRIGGER IF EXISTS {table}_secrets_{name}{on}" for name in names]


class WatchAgain(Operation):
    """A migration operation that installs ``watch_sql``'s triggers on ``table`` again on SQLite,
    both ways (dropping any left first, so it may run where they survived); nothing elsewhere
    (PostgreSQL keeps a table's triggers through ``ALTER TABLE``). Use it through
    ``kept_watched``."""

    reduces_to_sql = False
    reversible = True

    def __init__(self, table: str, columns: Sequence[str]) -> None:
        self.table = table
        self.columns = tuple(columns)

    def state_forwards(self, app_label: str, state: ProjectState) -> None:
        pass

    def database_forwards(
        self,
        app_label: str,
        schema_editor: BaseDatabaseSchemaEditor,
        from_state: ProjectState,
        to_state: ProjectState,
    ) -> None:
        if schema_editor.connection.vendor == "sqlite":
            for statement in [
                *unwatch_sql("sqlite", self.table),
                *watch_sql("sqlite", self.table, self.columns),
            ]:
                schema_editor.execute(statement)

    def database_backwards(
        self,
        app_label: str,
        schema_editor: BaseDatabaseSchemaEditor,
        from_state: ProjectState,
        to_state: ProjectState,
    ) -> None:
        self.database_forwards(app_label, schema_editor, from_state, to_state)

    def describe(self) -> str:
        return f"Watch {self.table} for secrets again (SQLite)"


def kept_watched(table: str, columns: Sequence[str], *operations: Operation) -> list[Operation]:
    """``operations`` (schema changes to the watched ``table``) with ``table`` watched again
    after them, whichever way the migration runs: SQLite rebuilds a table for many schema
    changes, forwards and backwards, and the rebuild drops its triggers. ``columns`` are the
    ones watched at that point of the history (``watch_sql``)."""
    return [WatchAgain(table, columns), *operations, WatchAgain(table, columns)]
