from django.db import migrations, models


class Migration(migrations.Migration):
    """An index on a step's turn and change time: the conversation page's catch-up mark."""

    dependencies = [
        ("conversations", "0024_audit_actions"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="step",
            index=models.Index(fields=["turn", "updated_at"], name="step_turn_updated_idx"),
        ),
    ]
