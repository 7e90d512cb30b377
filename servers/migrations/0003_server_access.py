from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps


def allow_the_bundled_demo(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    # The bundled teaching server runs this installation's own code: everyone may start it.
    apps.get_model("servers", "McpServer").objects.filter(is_demo=True).update(allow_non_staff_spawn=True)


class Migration(migrations.Migration):
    dependencies = [("servers", "0002_workbench")]

    operations: list[migrations.operations.base.Operation] = [
        migrations.AddField(
            model_name="mcpserver",
            name="allow_non_staff_spawn",
            field=models.BooleanField(
                default=False,
                help_text="stdio: let users without staff rights start this server's process (workbench "
                "calls, conversations). Off: only staff may; everyone else is told so.",
                verbose_name="Allow non-staff to spawn",
            ),
        ),
        migrations.RunPython(allow_the_bundled_demo, migrations.RunPython.noop, elidable=False),
    ]
