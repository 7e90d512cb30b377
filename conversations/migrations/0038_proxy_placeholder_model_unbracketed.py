from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

# A key without a profile records under a placeholder profile whose model reads "as the host sent
# it". It read "(as the host sent it)", and the conversation page, which brackets a profile's
# model itself, showed it in two pairs of brackets.
PREFIX = "recorded by proxy: "


def unbracketed(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    profiles = apps.get_model("conversations", "ModelProfile")
    profiles.objects.filter(name__startswith=PREFIX, model="(as the host sent it)").update(
        model="as the host sent it"
    )


def bracketed(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    profiles = apps.get_model("conversations", "ModelProfile")
    profiles.objects.filter(name__startswith=PREFIX, model="as the host sent it").update(
        model="(as the host sent it)"
    )


class Migration(migrations.Migration):
    dependencies = [
        ("conversations", "0037_modelprofile_host_preset"),
    ]

    operations = [migrations.RunPython(unbracketed, bracketed)]
