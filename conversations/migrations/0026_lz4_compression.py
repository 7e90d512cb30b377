"""The record's long columns compressed with LZ4 on PostgreSQL, where the server has it.

PostgreSQL compresses a long value before it stores it out of line, with pglz unless a column
says otherwise. A streamed reply's raw body of 7 MB took about 65 ms to compress that way and
30 with LZ4 (measured on this project's write path); a 20-step turn's request bodies and spliced
prompts, each a few kB to tens of kB, are compressed at every step. Only the compression of new
values changes: stored ones are read as they are, whichever method wrote them. A server built
without LZ4 keeps pglz (its ``default_toast_compression`` then offers no ``lz4``). SQLite has no
such setting.
"""

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

# (table, columns): the bodies, prompts, texts and transcripts that grow with a conversation.
LONG_COLUMNS = (
    ("conversations_exchange", ("request_body", "response_body")),
    ("conversations_step", ("prompt", "text", "arguments", "result")),
    ("conversations_turn", ("answer", "tools", "transcript")),
)


def _has_lz4(schema_editor: BaseDatabaseSchemaEditor) -> bool:
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT enumvals FROM pg_settings WHERE name = 'default_toast_compression'")
        row = cursor.fetchone()
    return row is not None and "lz4" in (row[0] or [])


def _compress_with(method: str, schema_editor: BaseDatabaseSchemaEditor) -> None:
    quote = schema_editor.quote_name
    for table, columns in LONG_COLUMNS:
        changes = ", ".join(f"ALTER COLUMN {quote(column)} SET COMPRESSION {method}" for column in columns)
        schema_editor.execute(f"ALTER TABLE {quote(table)} {changes}")


def to_lz4(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql" and _has_lz4(schema_editor):
        _compress_with("lz4", schema_editor)


def to_default(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        _compress_with("DEFAULT", schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("conversations", "0025_step_turn_updated"),
    ]

    operations = [
        migrations.RunPython(to_lz4, to_default, elidable=False),
    ]
