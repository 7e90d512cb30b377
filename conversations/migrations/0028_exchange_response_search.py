"""A streamed reply is searched by the text it assembled to, not by its raw events.

A streamed response body is a sequence of events, each carrying a piece of the reply (OpenAI's
models send about 16 characters a piece): full-text search over the raw events found neither a
word cut between two pieces nor one a JSON escape split. ``Exchange.response_search``, when set,
is indexed in place of the response body: the reply as it assembled (its text, refusal and each
call's name and arguments), redacted and cut to the 200,000 characters the index reads. Rows
recorded before this migration have it empty and are indexed as before, by their body.

The GIN expression index is rebuilt on exactly the SQL ``selectors.exchange_search_document()``
compiles to (the planner uses an expression index only for the very same expression); on a
large history the rebuild takes minutes.
"""

from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

EXCHANGE_INDEX = "conversations_exchange_search_gin"
REQUEST = (
    """COALESCE(CASE WHEN ("search_start" IS NULL) THEN LEFT("request_body", 200000) """
    """ELSE SUBSTRING("request_body", ("search_start" + 1), LEAST("search_length", 200000)) END, '')"""
)
OLD_DOCUMENT = f"""to_tsvector('english'::regconfig, {REQUEST} || ' ' || COALESCE(LEFT("response_body", 200000), ''))"""
DOCUMENT = (
    f"""to_tsvector('english'::regconfig, {REQUEST} || ' ' || """
    """COALESCE(CASE WHEN ("response_search" = '') THEN LEFT("response_body", 200000) """
    """ELSE LEFT("response_search", 200000) END, ''))"""
)


def _rebuild(schema_editor: BaseDatabaseSchemaEditor, document: str) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("SET LOCAL maintenance_work_mem = '256MB'")
    schema_editor.execute(f'DROP INDEX IF EXISTS "{EXCHANGE_INDEX}"')
    schema_editor.execute(
        f'CREATE INDEX "{EXCHANGE_INDEX}" ON "conversations_exchange" USING gin (({document}))'
    )


def index_assembled_replies(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    _rebuild(schema_editor, DOCUMENT)


def index_raw_bodies(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    _rebuild(schema_editor, OLD_DOCUMENT)


class Migration(migrations.Migration):
    dependencies = [
        ("conversations", "0027_exchange_body_digests"),
    ]

    operations = [
        migrations.AddField(
            model_name="exchange",
            name="response_search",
            field=models.TextField(blank=True, default="", editable=False),
        ),
        migrations.RunPython(index_assembled_replies, index_raw_bodies, elidable=False),
    ]
