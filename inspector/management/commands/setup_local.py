"""``manage.py setup_local``: what ``make run`` needs before serving, and how to log in.

Ensures the demo model profile (and one per provider wire format, whole and streamed), the demo MCP
server, and a superuser ``admin``. Its password
is ``ADMIN_PASSWORD`` when set; otherwise one generated on the first run and kept in
``VAR_DIR/admin-password`` (mode 600), so every later run prints the same one. Idempotent.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.management.base import BaseCommand, CommandParser

from conversations.services import demo_format_profiles_ensure, demo_profile_ensure
from servers.services import demo_server_ensure

ADMIN_USERNAME = "admin"
PASSWORD_FILE_NAME = "admin-password"


class Command(BaseCommand):
    help = "Create the demo model, the demo MCP server and the 'admin' superuser; print how to log in."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--port", type=int, default=int(os.environ.get("PORT") or 8000), help="The port to print."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        demo_profile_ensure()
        for stream in (False, True):
            demo_format_profiles_ensure(stream=stream)
        demo_server_ensure()
        from_env = settings.ADMIN_PASSWORD
        if from_env:
            password, fresh = from_env, True
        else:
            password, fresh = _stored_password(settings.VAR_DIR / PASSWORD_FILE_NAME)
        admin = _admin_ensure(password=password, apply_password=fresh)

        url = f"http://127.0.0.1:{options['port']}/"
        if admin.check_password(password):
            self.stdout.write(self.style.SUCCESS(f"Log in at {url} as {ADMIN_USERNAME} / {password}"))
        else:
            # Someone changed it in the app since: the stored one would only mislead.
            self.stdout.write(
                self.style.WARNING(
                    f"Log in at {url} as {ADMIN_USERNAME} with the password you set "
                    f"(it no longer matches {PASSWORD_FILE_NAME}; set ADMIN_PASSWORD to reset it)"
                )
            )


def _stored_password(path: Path) -> tuple[str, bool]:
    """The password kept in ``path``, generating it on first use; returns (password, just created)."""
    if path.exists():
        return path.read_text().strip(), False
    password = secrets.token_urlsafe(12)
    # O_EXCL with mode 600: the file is never readable by others, not even for a moment.
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as stream:
        stream.write(password + "\n")
    return password, True


def _admin_ensure(*, password: str, apply_password: bool) -> AbstractBaseUser:
    """The ``admin`` superuser, created with ``password``; an existing one gets it only if asked."""
    user_model = get_user_model()
    admin = user_model.objects.filter(username=ADMIN_USERNAME).first()
    if admin is None:
        return user_model.objects.create_superuser(username=ADMIN_USERNAME, email="", password=password)
    if apply_password:
        admin.set_password(password)
    admin.is_superuser = admin.is_staff = admin.is_active = True
    admin.save()
    return admin
