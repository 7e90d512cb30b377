from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("conversations", "0019_teaching")]

    operations = [
        migrations.AddField(
            model_name="modelprofile",
            name="chat_templates",
            field=models.JSONField(
                blank=True,
                default=dict,
                help_text="The engine's other named templates (e.g. tool_use), by name: each request is "
                "rendered with the one the engine would choose.",
            ),
        ),
    ]
