"""Running ``manage.py proxy stdio`` as a host would, against the test database."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from django.conf import settings
from django.db import connection

from conversations.models import Exchange
from conversations.proxy.models import ProxyKey

REPO = Path(__file__).resolve().parents[3]


def proxy_env(var_dir: Path, **extra: str) -> dict[str, str]:
    """The environment a proxy process needs to record into this test's database."""
    db = connection.settings_dict
    env = {
        **os.environ,
        "SECRET_KEY": settings.SECRET_KEY,
        "INTEGRITY_KEY": settings.INTEGRITY_KEY,
        "VAR_DIR": str(var_dir),
        "PYTHONPATH": str(REPO),
        **extra,
    }
    var_dir.mkdir(parents=True, exist_ok=True)
    if db["ENGINE"] == "django.db.backends.sqlite3":
        env.pop("DATABASE_URL", None)
        link = var_dir / "inspector.sqlite3"
        if not link.exists():
            # The embedded default's database is VAR_DIR/inspector.sqlite3: this test's, by name.
            link.symlink_to(Path(db["NAME"]).resolve())
    else:
        user = db.get("USER") or ""
        password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
        auth = f"{user}{password}@" if user else ""
        env["DATABASE_URL"] = (
            f"postgres://{auth}{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}/{db['NAME']}"
        )
    return env


def proxy_command(raw_key: str, name: str, *server: str, session: str = "") -> list[str]:
    hint = ["--session", session] if session else []
    return [
        sys.executable,
        str(REPO / "manage.py"),
        "proxy",
        "stdio",
        "--key",
        raw_key,
        "--name",
        name,
        *hint,
        "--",
        *server,
    ]


def recorded(key: ProxyKey) -> list[Exchange]:
    return list(Exchange.objects.filter(turn__conversation__proxy_session__key=key).order_by("pk"))
