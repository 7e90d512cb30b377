"""Indexes for the audit list at scale: the tool filter, and PostgreSQL full-text search.

The two GIN indexes are expression indexes on exactly the SQL that
``selectors.turn_search_document()`` / ``selectors.exchange_search_document()`` compile to: the
planner uses an expression index only for the very same expression, so the two must change
together (the text is frozen here, as a migration must be). They exist on PostgreSQL only;
SQLite searches with ``LIKE`` and gets none.
"""

from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

TURN_INDEX = "conversations_turn_search_gin"
EXCHANGE_INDEX = "conversations_exchange_search_gin"
TURN_DOCUMENT = """to_tsvector('english'::regconfig, COALESCE("question", '') || ' ' || COALESCE("answer", ''))"""
EXCHANGE_DOCUMENT = (
    """to_tsvector('english'::regconfig, COALESCE(LEFT("request_body", 200000), '') || ' ' """
    """|| COALESCE(LEFT("response_body", 200000), ''))"""
)


def create_search_indexes(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    # Building over a large history: a bigger work area makes the GIN build much faster.
    schema_editor.execute("SET LOCAL maintenance_work_mem = '256MB'")
    schema_editor.execute(
        f'CREATE INDEX IF NOT EXISTS "{TURN_INDEX}" ON "conversations_turn" USING gin (({TURN_DOCUMENT}))'
    )
    schema_editor.execute(
        f'CREATE INDEX IF NOT EXISTS "{EXCHANGE_INDEX}" ON "conversations_exchange" '
        f"USING gin (({EXCHANGE_DOCUMENT}))"
    )


def drop_search_indexes(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f'DROP INDEX IF EXISTS "{TURN_INDEX}"')
    schema_editor.execute(f'DROP INDEX IF EXISTS "{EXCHANGE_INDEX}"')


class Migration(migrations.Migration):

    dependencies = [
        ("conversations", "0009_provider_choices"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="step",
            index=models.Index(condition=models.Q(kind="tool"), fields=["tool_name"], name="step_tool_name_idx"),
        ),
        migrations.AddIndex(
            model_name="step",
            index=models.Index(condition=models.Q(kind="tool"), fields=["title"], name="step_tool_title_idx"),
        ),
        migrations.RunPython(create_search_indexes, drop_search_indexes, elidable=False),
    ]
