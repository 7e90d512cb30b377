from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("conversations", "0013_exchange_search_span")]

    operations: list[migrations.operations.base.Operation] = [
        migrations.AddField(
            model_name="turn",
            name="cancel_requested_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="turn",
            name="cancel_requested_by",
            field=models.CharField(blank=True, max_length=150),
        ),
        migrations.AddField(
            model_name="turn",
            name="heartbeat_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="turn",
            name="runner",
            field=models.CharField(blank=True, max_length=200),
        ),
        migrations.AlterField(
            model_name="turn",
            name="status",
            field=models.CharField(
                choices=[
                    ("queued", "Queued"),
                    ("running", "Running"),
                    ("done", "Done"),
                    ("failed", "Failed"),
                    ("interrupted", "Interrupted"),
                    ("cancelled", "Cancelled"),
                ],
                default="queued",
                max_length=12,
            ),
        ),
        migrations.AddIndex(
            model_name="turn",
            index=models.Index(
                condition=models.Q(("status", "running")),
                fields=["heartbeat_at"],
                name="turn_running_heartbeat_idx",
            ),
        ),
    ]
