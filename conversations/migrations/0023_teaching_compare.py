from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("conversations", "0022_profile_tokens")]

    operations: list[migrations.operations.base.Operation] = []
