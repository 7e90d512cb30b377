from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('servers', '0007_apps'),
    ]

    operations = [
        migrations.AddField(
            model_name='operation',
            name='runner',
            field=models.CharField(blank=True, max_length=200),
        ),
    ]
