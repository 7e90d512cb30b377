"""``manage.py setup_local`` (run by ``make run``, ``make setup`` and compose's web command on every
start): demo rows, the admin user when there is none, and how to log in, never the password."""

from __future__ import annotations

import re
import stat
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from pytest_django.fixtures import Settings

from conversations.models import ModelProfile
from servers.models import McpServer

pytestmark = pytest.mark.django_db

LOGIN_LINE = re.compile(r"Log in at http://127\.0\.0\.1:(\d+)/ as admin\b")


@pytest.fixture(autouse=True)
def var_dir(settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    settings.VAR_DIR = tmp_path
    settings.ADMIN_PASSWORD = ""
    monkeypatch.delenv("PORT", raising=False)
    return tmp_path


def _setup(*args: str) -> str:
    """Run the command; returns what it printed (checked to say how to log in)."""
    out = StringIO()
    call_command("setup_local", *args, stdout=out)
    assert LOGIN_LINE.search(out.getvalue()), out.getvalue()
    return out.getvalue()


def _port(output: str) -> str:
    match = LOGIN_LINE.search(output)
    assert match, output
    return match.group(1)


def test_the_first_run_creates_the_demo_rows_and_an_admin_who_can_log_in(var_dir: Path) -> None:
    output = _setup()

    assert _port(output) == "8000"
    # The demo model, and the demo model in each provider's wire format, whole and streamed.
    assert set(ModelProfile.objects.filter(is_demo=True).values_list("name", "provider", "stream")) == {
        ("demo", "openai_chat", False),
        *{
            (f"demo {provider}{' streamed' if stream else ''}", provider, stream)
            for provider in ("openai_chat", "openai_responses", "anthropic", "gemini")
            for stream in (False, True)
        },
    }
    assert McpServer.objects.filter(is_demo=True).count() == 1
    admin = User.objects.get(username="admin")
    assert admin.is_superuser and admin.is_staff and admin.is_active
    stored = var_dir / "admin-password"
    password = stored.read_text().strip()
    assert admin.check_password(password)
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    # Where the password is, not the password: stdout is the container's log under compose.
    assert password not in output
    assert f"Created the superuser admin; its password is in {stored}" in output


def test_later_runs_reuse_everything_and_never_print_the_password(var_dir: Path) -> None:
    _setup()
    password = (var_dir / "admin-password").read_text().strip()

    output = _setup()

    assert password not in output
    assert "Created" not in output
    assert f"its password is in {var_dir / 'admin-password'}" in output
    assert User.objects.filter(username="admin").count() == 1
    assert User.objects.get(username="admin").check_password(password)
    assert ModelProfile.objects.count() == 9
    assert McpServer.objects.count() == 1


def test_an_existing_admin_keeps_its_password_and_no_password_file_is_made(var_dir: Path) -> None:
    User.objects.create_superuser("admin", password="an-old-password")

    output = _setup()

    assert User.objects.get(username="admin").check_password("an-old-password")
    assert not (var_dir / "admin-password").exists()
    assert "Created" not in output


def test_a_deactivated_and_demoted_admin_stays_so(var_dir: Path) -> None:
    User.objects.create_superuser("admin", password="an-old-password")
    User.objects.filter(username="admin").update(is_active=False, is_superuser=False, is_staff=False)

    out = StringIO()
    call_command("setup_local", stdout=out)

    admin = User.objects.get(username="admin")
    assert (admin.is_active, admin.is_superuser, admin.is_staff) == (False, False, False)
    assert admin.check_password("an-old-password")
    assert not LOGIN_LINE.search(out.getvalue())  # no one logs in as a deactivated user
    assert "deactivated, and not a superuser: setup_local left it as it is" in out.getvalue()


def test_an_active_admin_who_is_no_superuser_stays_so() -> None:
    User.objects.create_user("admin", password="an-old-password", is_staff=True)

    output = _setup()

    admin = User.objects.get(username="admin")
    assert (admin.is_active, admin.is_superuser, admin.is_staff) == (True, False, True)
    assert "not a superuser: setup_local left it as it is" in output


def test_admin_password_from_the_environment_is_the_new_admins_and_is_not_printed(
    settings: Settings, var_dir: Path
) -> None:
    settings.ADMIN_PASSWORD = "chosen-by-me-42"  # settings.env_str("ADMIN_PASSWORD")

    output = _setup()

    assert User.objects.get(username="admin").check_password("chosen-by-me-42")
    assert "chosen-by-me-42" not in output
    assert "ADMIN_PASSWORD" in output
    assert not (var_dir / "admin-password").exists()


def test_admin_password_from_the_environment_does_not_reset_an_existing_admin(settings: Settings) -> None:
    _setup()
    admin = User.objects.get(username="admin")
    admin.set_password("changed-in-the-app")
    admin.save()
    settings.ADMIN_PASSWORD = "chosen-by-me-42"

    output = _setup()

    assert User.objects.get(username="admin").check_password("changed-in-the-app")
    assert "chosen-by-me-42" not in output
    # The operator who set it learns why it does not work, and what does.
    assert "ADMIN_PASSWORD" in output and "changepassword admin" in output


def test_the_port_comes_from_the_option_or_else_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PORT", "8123")

    assert _port(_setup()) == "8123"
    assert _port(_setup("--port", "9000")) == "9000"


def test_a_password_changed_in_the_app_is_not_said_to_be_in_the_file(var_dir: Path) -> None:
    _setup()
    stored = (var_dir / "admin-password").read_text().strip()
    admin = User.objects.get(username="admin")
    admin.set_password("changed-in-the-admin")
    admin.save()

    output = _setup()

    assert stored not in output and "changed-in-the-admin" not in output
    assert "no longer matches" in output
    assert User.objects.get(username="admin").check_password("changed-in-the-admin")
