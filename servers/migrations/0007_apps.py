import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    # conversations.Step exists since before 0002_workbench, which depends on conversations.
    dependencies = [("servers", "0006_protocol")]

    operations = [
        migrations.AddField(
            model_name="operation",
            name="step",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="conversations.step",
            ),
        ),
        migrations.AlterField(
            model_name="operation",
            name="kind",
            field=models.CharField(
                choices=[
                    ("connect", "Connect"),
                    ("tools/list", "Tools List"),
                    ("tools/call", "Tools Call"),
                    ("resources/list", "Resources List"),
                    ("resources/templates/list", "Templates List"),
                    ("resources/read", "Resource Read"),
                    ("resources/subscribe", "Resource Subscribe"),
                    ("prompts/list", "Prompts List"),
                    ("prompts/get", "Prompt Get"),
                    ("completion/complete", "Complete"),
                    ("logging/setLevel", "Log Level"),
                    ("ui/app", "app of a turn's tool call"),
                ],
                max_length=32,
            ),
        ),
    ]
