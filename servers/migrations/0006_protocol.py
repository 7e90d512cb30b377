from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("servers", "0005_oauth")]

    operations: list[migrations.operations.base.Operation] = []
