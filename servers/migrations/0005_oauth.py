from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("servers", "0004_server_capture")]

    operations: list[migrations.operations.base.Operation] = []
