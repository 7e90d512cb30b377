from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("conversations", "0015_record_integrity")]

    operations: list[migrations.operations.base.Operation] = []
