"""Where the benchmarks run: the bench's own Postgres database and Redis index, or SQLite.

:func:`prepare` runs before Django is set up: it probes PostgreSQL and Redis, creates the bench
database when missing, and sets the environment the settings module reads (and that the worker
and web subprocesses inherit). When a service is unreachable the bench falls back to the
embedded default (SQLite, in-memory channel layer) and the measures that need the service say
"not run" with the reason.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import redis

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/inspector_bench"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/14"
VAR_DIR = REPO_ROOT / "var" / "bench"
# Every turn the bench runs is longer than the default 8 decisions.
AGENT_MAX_STEPS = 64


@dataclass
class Services:
    database_url: str = ""
    redis_url: str = ""
    postgres_version: str = ""
    redis_version: str = ""
    problems: dict[str, str] = field(default_factory=dict)

    @property
    def postgres(self) -> bool:
        return bool(self.database_url)

    @property
    def redis(self) -> bool:
        return bool(self.redis_url)

    @property
    def scaled(self) -> bool:
        """Postgres and Redis both up: the scaled deployment (Celery workers, channels-redis)."""
        return self.postgres and self.redis

    def missing(self, *needs: str) -> str:
        """Why a measure that ``needs`` these services cannot run ("" when it can)."""
        reasons = [
            self.problems.get(need, f"{need} is not available") for need in needs if not getattr(self, need)
        ]
        return "; ".join(reasons)


def _postgres(url: str, services: Services) -> None:
    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    admin = dict(
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 5432,
        user=parts.username or None,
        password=parts.password or None,
        connect_timeout=3,
    )
    try:
        with psycopg.connect(dbname="postgres", autocommit=True, **admin) as conn:  # type: ignore[arg-type]
            services.postgres_version = str(conn.execute("SHOW server_version").fetchone()[0])  # type: ignore[index]
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
            if not exists:
                conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as exc:
        services.problems["postgres"] = (
            f"PostgreSQL is not reachable at {parts.hostname}:{parts.port}: {exc}".strip()
        )
        return
    services.database_url = url


def _redis(url: str, services: Services) -> None:
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=3)
        info = client.info("server")
        services.redis_version = str(info.get("redis_version", ""))
    except redis.RedisError as exc:
        services.problems["redis"] = f"Redis is not reachable at {url}: {exc}"
        return
    services.redis_url = url


def prepare() -> Services:
    """Probe the services and set the environment; call before ``django.setup()``."""
    services = Services()
    if os.environ.get("BENCH_NO_SERVICES") != "1":
        _postgres(os.environ.get("BENCH_DATABASE_URL", DEFAULT_DATABASE_URL), services)
        _redis(os.environ.get("BENCH_REDIS_URL", DEFAULT_REDIS_URL), services)
    else:
        services.problems["postgres"] = services.problems["redis"] = "BENCH_NO_SERVICES=1"
    for name in ("DATABASE_URL", "REDIS_URL", "TURN_RUNNER"):
        os.environ.pop(name, None)
    if services.postgres:
        os.environ["DATABASE_URL"] = services.database_url
    if services.redis:
        os.environ["REDIS_URL"] = services.redis_url
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    os.environ["VAR_DIR"] = str(VAR_DIR)
    os.environ["AGENT_MAX_STEPS"] = str(AGENT_MAX_STEPS)
    os.environ["DEMO_MODEL_LATENCY_SECONDS"] = os.environ.get("BENCH_DEMO_MODEL_LATENCY", "0")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ["DJANGO_SETTINGS_MODULE"] = "inspector.settings"
    return services


def migrate() -> None:
    """Bring the bench database to the current migrations (a subprocess: quiet and isolated)."""
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
        cwd=REPO_ROOT,
        check=True,
        env=os.environ,
    )


def flush_redis(services: Services) -> None:
    """Empty the bench's own Redis index (stale Celery tasks of an interrupted run)."""
    if services.redis:
        redis.Redis.from_url(services.redis_url).flushdb()
