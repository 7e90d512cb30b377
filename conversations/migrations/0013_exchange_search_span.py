"""Full-text search indexes only what a model request adds to its turn's previous request.

Each model request carries the whole history so far, so indexing every request body whole
re-indexed the history at every step: on PostgreSQL that was most of what recording cost the
database per step. Now ``search_start`` / ``search_length`` say which part of ``request_body``
is indexed (all of it when NULL: every exchange recorded before this migration, the first
request of a turn, and its last request once the turn has ended). The GIN expression index is
rebuilt on exactly the SQL ``selectors.exchange_search_document()`` compiles to (the planner
uses an expression index only for the very same expression); on a large history the rebuild
takes minutes.
"""

from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

EXCHANGE_INDEX = "conversations_exchange_search_gin"
OLD_DOCUMENT = (
    """to_tsvector('english'::regconfig, COALESCE(LEFT("request_body", 200000), '') || ' ' """
    """|| COALESCE(LEFT("response_body", 200000), ''))"""
)
DOCUMENT = (
    """to_tsvector('english'::regconfig, COALESCE(CASE WHEN ("search_start" IS NULL) """
    """THEN LEFT("request_body", 200000) """
    """ELSE SUBSTRING("request_body", ("search_start" + 1), LEAST("search_length", 200000)) END, '') """
    """|| ' ' || COALESCE(LEFT("response_body", 200000), ''))"""
)


def _rebuild(schema_editor: BaseDatabaseSchemaEditor, document: str) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("SET LOCAL maintenance_work_mem = '256MB'")
    schema_editor.execute(f'DROP INDEX IF EXISTS "{EXCHANGE_INDEX}"')
    schema_editor.execute(
        f'CREATE INDEX "{EXCHANGE_INDEX}" ON "conversations_exchange" USING gin (({document}))'
    )


def index_spans(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    _rebuild(schema_editor, DOCUMENT)


def index_whole_bodies(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    _rebuild(schema_editor, OLD_DOCUMENT)


class Migration(migrations.Migration):

    dependencies = [
        ("conversations", "0012_exchange_conversation"),
    ]

    operations = [
        migrations.AddField(
            model_name="exchange",
            name="search_length",
            field=models.PositiveIntegerField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="exchange",
            name="search_start",
            field=models.PositiveIntegerField(blank=True, editable=False, null=True),
        ),
        migrations.RunPython(index_spans, index_whole_bodies, elidable=False),
    ]
