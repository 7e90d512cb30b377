from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("conversations", "0035_proxy_keys_and_sessions"),
    ]

    operations = [
        migrations.AddField(
            model_name="userpreference",
            name="class_view",
            field=models.BooleanField(
                default=False,
                help_text="Hide what a first lesson does not need (headers, ids, timings, the seal).",
            ),
        ),
    ]
