from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("conversations", "0020_turn_seal_rule")]

    operations: list[migrations.operations.base.Operation] = []
