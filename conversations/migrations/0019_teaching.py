from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("conversations", "0018_trace_delivery")]

    operations: list[migrations.operations.base.Operation] = []
