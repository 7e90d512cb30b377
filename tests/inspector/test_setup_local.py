"""``manage.py setup_local`` (run by ``make run``): demo rows, the admin user, how to log in."""

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

LOGIN_LINE = re.compile(r"Log in at http://127\.0\.0\.1:(\d+)/ as admin / (\S+)")


@pytest.fixture(autouse=True)
def var_dir(settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    settings.VAR_DIR = tmp_path
    settings.ADMIN_PASSWORD = ""
    monkeypatch.delenv("PORT", raising=False)
    return tmp_path


def _setup(*args: str) -> tuple[str, str]:
    """Run the command; returns the (port, password) it printed."""
    out = StringIO()
    call_command("setup_local", *args, stdout=out)
    match = LOGIN_LINE.search(out.getvalue())
    assert match, out.getvalue()
    return match.group(1), match.group(2)


def test_the_first_run_creates_the_demo_rows_and_an_admin_who_can_log_in(var_dir: Path) -> None:
    port, password = _setup()

    assert port == "8000"
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
    assert admin.is_superuser and admin.is_staff
    assert admin.check_password(password)
    stored = var_dir / "admin-password"
    assert stored.read_text().strip() == password
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600


def test_later_runs_reuse_everything_and_print_the_same_password() -> None:
    _, first = _setup()

    _, second = _setup()

    assert second == first
    assert User.objects.filter(username="admin").count() == 1
    assert ModelProfile.objects.count() == 9
    assert McpServer.objects.count() == 1


def test_an_existing_admin_gets_the_password_when_the_file_is_new(var_dir: Path) -> None:
    User.objects.create_superuser("admin", password="an-old-password")

    _, password = _setup()

    assert User.objects.get(username="admin").check_password(password)
    assert password != "an-old-password"


def test_admin_password_from_the_environment_wins(settings: Settings) -> None:
    _setup()
    settings.ADMIN_PASSWORD = "chosen-by-me-42"  # settings.env_str("ADMIN_PASSWORD")

    _, password = _setup()

    assert password == "chosen-by-me-42"
    assert User.objects.get(username="admin").check_password("chosen-by-me-42")


def test_the_port_comes_from_the_option_or_else_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PORT", "8123")

    assert _setup()[0] == "8123"
    assert _setup("--port", "9000")[0] == "9000"


def test_a_password_changed_in_the_app_is_not_printed_as_if_it_still_worked() -> None:
    _, stored = _setup()
    admin = User.objects.get(username="admin")
    admin.set_password("changed-in-the-admin")
    admin.save()

    out = StringIO()
    call_command("setup_local", stdout=out)

    assert stored not in out.getvalue()
    assert "ADMIN_PASSWORD" in out.getvalue()
    assert User.objects.get(username="admin").check_password("changed-in-the-admin")
