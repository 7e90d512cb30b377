from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("conversations", "0021_engine_templates")]

    operations: list[migrations.operations.base.Operation] = [
        migrations.AddField(
            model_name="modelprofile",
            name="added_tokens",
            field=models.JSONField(
                blank=True,
                default=list,
                help_text="The tokenizer's added special tokens (from a pasted tokenizer_config.json): "
                "each counts as one token.",
            ),
        ),
        migrations.AddField(
            model_name="modelprofile",
            name="template_arguments",
            field=models.CharField(
                blank=True,
                choices=[
                    ("", "automatic: as the engine the template came from passes them"),
                    ("object", "an object, parsed from the wire's string (vLLM, SGLang)"),
                    ("string", "the wire's JSON string (transformers)"),
                    ("llama.cpp", "as llama.cpp's probe of the template decides"),
                ],
                help_text="How tool-call arguments reach the chat template (docs/chat-templates.md §3).",
                max_length=12,
            ),
        ),
    ]
