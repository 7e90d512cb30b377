from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("conversations", "0019_teaching")]

    operations = [
        migrations.AddField(
            model_name="turn",
            name="seal_rule",
            field=models.PositiveSmallIntegerField(default=2),
        ),
    ]
