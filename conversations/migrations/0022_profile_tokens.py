from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("conversations", "0021_engine_templates")]

    operations: list[migrations.operations.base.Operation] = []
