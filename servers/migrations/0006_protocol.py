from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("servers", "0005_oauth")]

    operations = [
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
                ],
                max_length=32,
            ),
        ),
    ]
