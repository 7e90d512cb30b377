from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("servers", "0003_server_access")]

    operations: list[migrations.operations.base.Operation] = []
