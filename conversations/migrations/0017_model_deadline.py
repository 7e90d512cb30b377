import django.core.validators
from django.db import migrations, models

import conversations.escaping
import conversations.models


class Migration(migrations.Migration):
    dependencies = [("conversations", "0016_access_audit")]

    operations: list[migrations.operations.base.Operation] = [
        migrations.AddField(
            model_name="modelprofile",
            name="deadline_seconds",
            field=models.FloatField(
                default=conversations.models.default_model_deadline,
                help_text="The whole-call deadline in seconds: a model call (a stream included) still going "
                "after it is cut, and what had arrived is kept, marked as cut.",
                validators=[django.core.validators.MinValueValidator(0.1)],
            ),
        ),
        # Stored JSON is read back carriable (a lone surrogate comes back as its escape).
        migrations.AlterField(
            model_name="conversation",
            name="imported_meta",
            field=models.JSONField(null=True, blank=True, decoder=conversations.escaping.CarriableDecoder),
        ),
        migrations.AlterField(
            model_name="exchange",
            name="request_headers",
            field=models.JSONField(default=dict, blank=True, decoder=conversations.escaping.CarriableDecoder),
        ),
        migrations.AlterField(
            model_name="exchange",
            name="response_headers",
            field=models.JSONField(default=dict, blank=True, decoder=conversations.escaping.CarriableDecoder),
        ),
        migrations.AlterField(
            model_name="step",
            name="arguments",
            field=models.JSONField(null=True, blank=True, decoder=conversations.escaping.CarriableDecoder),
        ),
        migrations.AlterField(
            model_name="step",
            name="calls",
            field=models.JSONField(default=list, blank=True, decoder=conversations.escaping.CarriableDecoder),
        ),
        migrations.AlterField(
            model_name="step",
            name="diagnostics",
            field=models.JSONField(default=list, blank=True, decoder=conversations.escaping.CarriableDecoder),
        ),
        migrations.AlterField(
            model_name="step",
            name="result",
            field=models.JSONField(null=True, blank=True, decoder=conversations.escaping.CarriableDecoder),
        ),
        migrations.AlterField(
            model_name="step",
            name="tokens",
            field=models.JSONField(default=dict, blank=True, decoder=conversations.escaping.CarriableDecoder),
        ),
        migrations.AlterField(
            model_name="step",
            name="usage",
            field=models.JSONField(default=dict, blank=True, decoder=conversations.escaping.CarriableDecoder),
        ),
        migrations.AlterField(
            model_name="turn",
            name="tools",
            field=models.JSONField(default=list, blank=True, decoder=conversations.escaping.CarriableDecoder),
        ),
        migrations.AlterField(
            model_name="turn",
            name="transcript",
            field=models.JSONField(default=list, blank=True, decoder=conversations.escaping.CarriableDecoder),
        ),
    ]
