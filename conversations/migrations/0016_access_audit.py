from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("conversations", "0015_record_integrity"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations: list[migrations.operations.base.Operation] = [
        migrations.AlterField(
            model_name="auditevent",
            name="action",
            field=models.CharField(
                choices=[
                    ("opened", "Opened"),
                    ("exported", "Exported"),
                    ("imported", "Imported"),
                    ("pruned", "Pruned"),
                    ("server.created", "Server Created"),
                    ("server.changed", "Server Changed"),
                    ("server.enabled", "Server Enabled"),
                    ("server.disabled", "Server Disabled"),
                    ("server.deleted", "Server Deleted"),
                ],
                max_length=24,
            ),
        ),
        migrations.AddField(
            model_name="auditevent",
            name="via",
            field=models.CharField(blank=True, default="", max_length=40),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="auditevent",
            name="subject",
            field=models.CharField(blank=True, default="", max_length=200),
            preserve_default=False,
        ),
        migrations.AddIndex(
            model_name="auditevent",
            index=models.Index(fields=["conversation_public_id", "actor", "-at"], name="audit_repeat_read_idx"),
        ),
    ]
