"""A change to a server's env or headers (where its secrets are) is logged for the redactor.

The same triggers as ``conversations`` puts on its own tables (``conversations.secret_sources``):
a process reads the servers' secrets again only after one of them changed, by any route.
"""

from typing import Any

from django.db import migrations

from conversations.secret_sources import unwatch_sql, watch_sql

TABLE = "servers_mcpserver"


def watch(apps: Any, schema_editor: Any) -> None:
    for statement in watch_sql(schema_editor.connection.vendor, TABLE, ("env", "headers")):
        schema_editor.execute(statement)


def unwatch(apps: Any, schema_editor: Any) -> None:
    for statement in unwatch_sql(schema_editor.connection.vendor, TABLE):
        schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [
        ("conversations", "0029_secrets_change"),
        ("servers", "0009_one_grant_per_server_and_user"),
    ]

    operations = [migrations.RunPython(watch, unwatch)]
