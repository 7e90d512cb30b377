from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("servers", "0003_server_access")]

    operations = [
        migrations.AddField(
            model_name="mcpserver",
            name="log_level",
            field=models.CharField(
                blank=True,
                choices=[
                    ("debug", "debug"),
                    ("info", "info"),
                    ("notice", "notice"),
                    ("warning", "warning"),
                    ("error", "error"),
                    ("critical", "critical"),
                    ("alert", "alert"),
                    ("emergency", "emergency"),
                ],
                help_text="Sent as logging/setLevel on each new session (none: the server's own default).",
                max_length=9,
            ),
        ),
        migrations.AddField(
            model_name="operation",
            name="sampling",
            field=models.JSONField(blank=True, default=list),
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
                    ("prompts/list", "Prompts List"),
                    ("prompts/get", "Prompt Get"),
                    ("completion/complete", "Complete"),
                    ("logging/setLevel", "Log Level"),
                ],
                max_length=32,
            ),
        ),
    ]
