from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("conversations", "0013_exchange_search_span")]

    operations: list[migrations.operations.base.Operation] = []
