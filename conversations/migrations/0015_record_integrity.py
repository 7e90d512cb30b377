import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("conversations", "0014_turn_lifecycle"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations: list[migrations.operations.base.Operation] = [
        migrations.AddField(
            model_name="conversation",
            name="chain_anchor",
            field=models.CharField(blank=True, max_length=64),
        ),
        migrations.AddField(
            model_name="conversation",
            name="chain_head",
            field=models.CharField(blank=True, max_length=64),
        ),
        migrations.AddField(
            model_name="conversation",
            name="chain_turns",
            field=models.PositiveIntegerField(default=0),
        ),
        # Records already stored were hashed under the unkeyed rule 1; new ones are keyed (2).
        migrations.AddField(
            model_name="exchange",
            name="chain_version",
            field=models.PositiveSmallIntegerField(default=1),
        ),
        migrations.AlterField(
            model_name="exchange",
            name="chain_version",
            field=models.PositiveSmallIntegerField(default=2),
        ),
        migrations.AddField(
            model_name="modelprofile",
            name="imported_by",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.AddField(
            model_name="turn",
            name="seal",
            field=models.CharField(blank=True, max_length=64),
        ),
        migrations.AddField(
            model_name="turn",
            name="seal_steps",
            field=models.JSONField(blank=True, default=list),
        ),
    ]
