"""The configured secrets get a version: a log of changes the database writes itself.

The redactor is built from the staff rules, the model profiles' key variables and (watched by
the ``servers`` app's own migration) the servers' env and headers. Triggers on those tables log
every change in ``conversations_secretschange``; a process reads the rules and secrets again
only when that log has changed (``conversations.secret_sources``).
"""

from typing import Any

from django.db import migrations, models

from conversations.secret_sources import unwatch_sql, watch_sql

WATCHED = [("conversations_redactionrule", ("name", "pattern", "enabled")), ("conversations_modelprofile", ("api_key_env",))]


def watch(apps: Any, schema_editor: Any) -> None:
    vendor = schema_editor.connection.vendor
    for table, columns in WATCHED:
        for statement in watch_sql(vendor, table, columns):
            schema_editor.execute(statement)


def unwatch(apps: Any, schema_editor: Any) -> None:
    vendor = schema_editor.connection.vendor
    for table, _ in WATCHED:
        for statement in unwatch_sql(vendor, table):
            schema_editor.execute(statement)
    if vendor == "postgresql":
        schema_editor.execute("DROP FUNCTION IF EXISTS conversations_secrets_changed()")


class Migration(migrations.Migration):
    dependencies = [
        ("conversations", "0028_exchange_response_search"),
    ]

    operations = [
        migrations.CreateModel(
            name="SecretsChange",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("token", models.CharField(max_length=36)),
            ],
        ),
        migrations.RunPython(watch, unwatch),
    ]
