import uuid

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("servers", "0004_server_capture"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="OAuthGrant",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("public_id", models.UUIDField(default=uuid.uuid4, editable=False, unique=True)),
                (
                    "grant",
                    models.CharField(
                        choices=[
                            ("authorization_code", "authorization code (browser redirect, PKCE S256)"),
                            ("client_credentials", "client credentials (client secret or private-key JWT)"),
                            ("cross_app", "cross-app access (ID-JAG from an identity provider)"),
                        ],
                        default="authorization_code",
                        max_length=24,
                    ),
                ),
                ("settings", models.JSONField(blank=True, default=dict)),
                ("sealed_secrets", models.TextField(blank=True)),
                ("sealed_tokens", models.TextField(blank=True)),
                ("sealed_client", models.TextField(blank=True)),
                ("sealed_callback", models.TextField(blank=True)),
                (
                    "scope",
                    models.CharField(
                        blank=True, help_text="The scope granted, as last received.", max_length=500
                    ),
                ),
                ("expires_at", models.DateTimeField(blank=True, null=True)),
                ("authorized_at", models.DateTimeField(blank=True, null=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                (
                    "server",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="oauth_grants",
                        to="servers.mcpserver",
                    ),
                ),
                (
                    "user",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={"ordering": ["server", "id"]},
        ),
    ]
