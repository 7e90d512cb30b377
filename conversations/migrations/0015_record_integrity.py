from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("conversations", "0014_turn_lifecycle")]

    operations: list[migrations.operations.base.Operation] = []
