import django.core.validators
from django.db import migrations, models

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
    ]
