from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("conversations", "0017_model_deadline")]

    operations: list[migrations.operations.base.Operation] = []
