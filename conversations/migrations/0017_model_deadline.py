from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("conversations", "0016_access_audit")]

    operations: list[migrations.operations.base.Operation] = []
