from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("servers", "0006_protocol")]

    operations: list[migrations.operations.base.Operation] = []
