"""``manage.py setup_local``: what ``make run`` needs before serving, and how to log in.

Ensures the demo model profile (and one per provider wire format, whole and streamed) and the demo
MCP server, and creates a superuser ``admin`` when there is no user of that name. The new admin's
password is ``ADMIN_PASSWORD`` when set; otherwise one generated then and kept in
``VAR_DIR/admin-password`` (mode 600). An existing ``admin`` is never changed: not its password,
not its flags (an operator who deactivated it meant it). Idempotent.

It runs on every start of the compose web service, whose stdout is the container's log: it says
where the password is, never the password.
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
from django.db import IntegrityError, transaction

from conversations.services import demo_format_profiles_ensure, demo_profile_ensure
from servers.services import demo_server_ensure

ADMIN_USERNAME = "admin"
PASSWORD_FILE_NAME = "admin-password"
CHANGE_PASSWORD = f"manage.py changepassword {ADMIN_USERNAME}"


class Command(BaseCommand):
    help = (
        "Create the demo model, the demo MCP server and, when there is none, the 'admin' superuser;"
        " print how to log in (never the password)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--port", type=int, default=int(os.environ.get("PORT") or 8000), help="The port to print."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        demo_profile_ensure()
        for stream in (False, True):
            demo_format_profiles_ensure(stream=stream)
        demo_server_ensure()
        login = f"Log in at http://127.0.0.1:{options['port']}/ as {ADMIN_USERNAME}"
        path = Path(settings.VAR_DIR) / PASSWORD_FILE_NAME
        created = _admin_create(path)
        if created is not None:
            self.stdout.write(self.style.SUCCESS(f"Created the superuser {ADMIN_USERNAME}; {created}"))
            self.stdout.write(self.style.SUCCESS(f"{login}."))
            return
        admin = get_user_model().objects.get(username=ADMIN_USERNAME)
        for line, fine in _existing_admin_lines(admin, login, path):
            self.stdout.write(self.style.SUCCESS(line) if fine else self.style.WARNING(line))


def _admin_create(path: Path) -> str | None:
    """Create the ``admin`` superuser if there is no user of that name; returns where its password
    is (for the log), or None when the user already existed (and is left as it is)."""
    user_model = get_user_model()
    if user_model.objects.filter(username=ADMIN_USERNAME).exists():
        return None
    if settings.ADMIN_PASSWORD:
        password, where = settings.ADMIN_PASSWORD, "its password is the one set in ADMIN_PASSWORD."
    else:
        password, where = _stored_password(path), f"its password is in {path} (readable by this user only)."
    try:
        # Two web processes starting at once: the second finds the first's admin.
        with transaction.atomic():
            user_model.objects.create_superuser(username=ADMIN_USERNAME, email="", password=password)
    except IntegrityError:
        return None
    return where


def _existing_admin_lines(admin: AbstractBaseUser, login: str, path: Path) -> list[tuple[str, bool]]:
    """How to log in as an ``admin`` this command did not create, each line with whether it is
    plain news (else a warning)."""
    superuser = getattr(admin, "is_superuser", False)
    if not admin.is_active:
        also = "" if superuser else ", and not a superuser"
        return [(f"The user {ADMIN_USERNAME} is deactivated{also}: setup_local left it as it is.", False)]
    lines: list[tuple[str, bool]] = []
    from_env = settings.ADMIN_PASSWORD
    if from_env and admin.check_password(from_env):
        lines.append((f"{login} with the password set in ADMIN_PASSWORD.", True))
    elif from_env:
        lines.append((f"{login} with the password you set.", True))
        lines.append(
            (
                "ADMIN_PASSWORD is not the admin's password: it is used only when setup_local creates "
                f"the user, never applied to an existing one. To change it: {CHANGE_PASSWORD}",
                False,
            )
        )
    elif path.exists() and admin.check_password(path.read_text().strip()):
        lines.append((f"{login}: its password is in {path}.", True))
    elif path.exists():
        # Someone changed it in the app since: the file would only mislead.
        lines.append((f"{login} with the password you set (it no longer matches {path}).", False))
    else:
        lines.append((f"{login} with the password you set.", True))
    if not superuser:
        lines.append((f"The user {ADMIN_USERNAME} is not a superuser: setup_local left it as it is.", False))
    return lines


def _stored_password(path: Path) -> str:
    """The password kept in ``path``, generating it on first use."""
    if path.exists():
        return path.read_text().strip()
    password = secrets.token_urlsafe(12)
    # O_EXCL with mode 600: the file is never readable by others, not even for a moment.
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as stream:
        stream.write(password + "\n")
    return password
