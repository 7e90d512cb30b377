"""One OAuth grant per server and user (the CLI's grant, with no user, once per server).

Before this, a second row could appear and the newest one was read; the older duplicates are
removed here, so the row that was in use is the one kept.
"""

from typing import Any

from django.db import migrations, models


def keep_the_newest_grant(apps: Any, schema_editor: Any) -> None:
    OAuthGrant = apps.get_model("servers", "OAuthGrant")
    seen: set[tuple[int, int | None]] = set()
    stale: list[int] = []
    for pk, server_id, user_id in OAuthGrant.objects.order_by("-id").values_list("id", "server_id", "user_id"):
        if (server_id, user_id) in seen:
            stale.append(pk)
        seen.add((server_id, user_id))
    OAuthGrant.objects.filter(pk__in=stale).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("servers", "0008_operation_runner"),
    ]

    operations = [
        migrations.RunPython(keep_the_newest_grant, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="oauthgrant",
            constraint=models.UniqueConstraint(
                condition=models.Q(("user__isnull", False)),
                fields=("server", "user"),
                name="oauth_grant_one_per_server_and_user",
            ),
        ),
        migrations.AddConstraint(
            model_name="oauthgrant",
            constraint=models.UniqueConstraint(
                condition=models.Q(("user__isnull", True)),
                fields=("server",),
                name="oauth_grant_one_cli_grant_per_server",
            ),
        ),
    ]
