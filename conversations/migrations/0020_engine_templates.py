from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("conversations", "0019_teaching")]

    operations: list[migrations.operations.base.Operation] = []
