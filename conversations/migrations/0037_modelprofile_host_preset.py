from django.db import migrations, models

from conversations.secret_sources import kept_watched

# SQLite rebuilds the table to add a NOT NULL column, and a rebuild drops its triggers: the
# profiles' key variables are watched again after it (0029's triggers; PostgreSQL keeps its own).


class Migration(migrations.Migration):
    dependencies = [
        ("conversations", "0036_userpreference_class_view"),
    ]

    operations = kept_watched(
        "conversations_modelprofile",
        ("api_key_env",),
        migrations.AddField(
            model_name="modelprofile",
            name="host_preset",
            field=models.CharField(
                blank=True,
                choices=[
                    ("openai", "OpenAI function calling (Chat Completions, non-strict)"),
                    ("openai-strict", "OpenAI function calling, strict (Chat Completions, strict: true)"),
                    ("openai-responses", "OpenAI Responses API (a function without 'strict' is strict)"),
                    ("anthropic", "Anthropic Messages API"),
                    ("gemini", "Gemini function calling, 'parameters' (OpenAPI subset)"),
                    ("gemini-json", "Gemini function calling, 'parametersJsonSchema' (JSON Schema)"),
                    ("claude", "Claude Desktop / Claude Code"),
                    ("cursor", "Cursor"),
                    ("vscode", "VS Code (GitHub Copilot agent mode)"),
                ],
                help_text="Run as this host: offer the servers' tools as it would (its names, schema rewriting "
                "and limits; docs/hosts.md). Empty: as this inspector offers them.",
                max_length=24,
            ),
        ),
    )
