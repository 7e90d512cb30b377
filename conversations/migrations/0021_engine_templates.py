from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("conversations", "0020_turn_seal_rule")]

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
        migrations.AddField(
            model_name="modelprofile",
            name="tokenizer",
            field=models.CharField(
                blank=True,
                choices=[
                    ("", "automatic"),
                    ("o200k_base", "o200k_base"),
                    ("o200k_harmony", "o200k_harmony"),
                    ("cl100k_base", "cl100k_base"),
                    ("llama3", "llama3"),
                    ("llama3.1", "llama3.1"),
                    ("qwen3", "qwen3"),
                ],
                help_text="The encoding token counts use. Empty: chosen from the chat template's family, "
                "else from the model name.",
                max_length=20,
            ),
        ),
    ]
