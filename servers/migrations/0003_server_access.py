from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("servers", "0002_workbench")]

    operations: list[migrations.operations.base.Operation] = []
