"""Full-text indexes for the list's search scopes (``conversations.selectors.scopes``): the question, the
answer, a tool call (name and arguments) and a tool result each searched on its own.

Each GIN index is an expression index on exactly the SQL the scope's document compiles to
(``question_document`` … ``result_document``); the planner uses an expression index only for
the very same expression, so the two change together (the text is frozen here, as a migration
must be). The tool steps' indexes are partial (``kind = 'tool'``), as their queries are. They
exist on PostgreSQL only; SQLite searches with ``LIKE`` and gets none.
"""

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

INDEXES = {
    "conversations_turn_question_gin": (
        "conversations_turn",
        """to_tsvector('english'::regconfig, COALESCE("question", ''))""",
        "",
    ),
    "conversations_turn_answer_gin": (
        "conversations_turn",
        """to_tsvector('english'::regconfig, COALESCE("answer", ''))""",
        "",
    ),
    "conversations_step_call_gin": (
        "conversations_step",
        """to_tsvector('english'::regconfig, COALESCE("tool_name", '') || ' ' """
        """|| COALESCE(LEFT(("arguments")::text, 200000), ''))""",
        """ WHERE "kind" = 'tool'""",
    ),
    "conversations_step_result_gin": (
        "conversations_step",
        """to_tsvector('english'::regconfig, COALESCE(LEFT(("result")::text, 200000), ''))""",
        """ WHERE "kind" = 'tool'""",
    ),
}


def create_scope_indexes(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("SET LOCAL maintenance_work_mem = '256MB'")
    for name, (table, document, where) in INDEXES.items():
        schema_editor.execute(
            f'CREATE INDEX IF NOT EXISTS "{name}" ON "{table}" USING gin (({document})){where}'
        )


def drop_scope_indexes(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for name in INDEXES:
        schema_editor.execute(f'DROP INDEX IF EXISTS "{name}"')


class Migration(migrations.Migration):
    dependencies = [
        ("conversations", "0031_turn_asked_by_alter_auditevent_action"),
    ]

    operations = [
        migrations.RunPython(create_scope_indexes, drop_scope_indexes, elidable=False),
    ]
