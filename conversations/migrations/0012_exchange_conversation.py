"""Each exchange of a turn names its conversation (``Exchange.conversation``), filled in for the
exchanges already recorded.

The audit list's text filter then maps matching exchanges straight to conversations: before, every
match was joined to its turn, which on a large history meant reading the whole turn index.
The column has no constraint and no index, so recording pays nothing extra per insert. The
backfill is one UPDATE: on a large PostgreSQL history it rewrites every exchange row once.
"""

import django.db.models.deletion
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

POSTGRES_BACKFILL = """
UPDATE "conversations_exchange" AS e SET "conversation_id" = t."conversation_id"
FROM "conversations_turn" AS t
WHERE t."id" = e."turn_id" AND e."conversation_id" IS NULL
"""
PORTABLE_BACKFILL = """
UPDATE "conversations_exchange" SET "conversation_id" = (
    SELECT t."conversation_id" FROM "conversations_turn" AS t WHERE t."id" = "conversations_exchange"."turn_id"
)
WHERE "turn_id" IS NOT NULL AND "conversation_id" IS NULL
"""


def backfill(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    postgres = schema_editor.connection.vendor == "postgresql"
    schema_editor.execute(POSTGRES_BACKFILL if postgres else PORTABLE_BACKFILL)


class Migration(migrations.Migration):

    dependencies = [
        ("conversations", "0011_covering_indexes"),
    ]

    operations = [
        migrations.AddField(
            model_name="exchange",
            name="conversation",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                db_index=False,
                editable=False,
                null=True,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="conversations.conversation",
            ),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop, elidable=False),
    ]
