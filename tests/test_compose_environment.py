"""docker-compose.yml passes every setting the app reads to web, worker and beat, so what an
operator puts in the `.env` beside it reaches each process; a setting left out of the `.env`
reaches them empty, which the settings read as their default."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.test_settings_environment import settings_names

REPO_ROOT = Path(__file__).resolve().parent.parent
APP_SERVICES = ("web", "worker", "beat")
# The secrets that may come from a file instead (``NAME_FILE``, a mounted secret).
SECRETS = (
    "SECRET_KEY",
    "INTEGRITY_KEY",
    "ADMIN_PASSWORD",
    "DEMO_MODEL_API_KEY",
    "OTEL_EXPORTER_OTLP_HEADERS",
)
# §2 and §3 settings of docs/deployment.md an operator sets in the `.env`.
OPERATOR_ENV = {
    "DATABASE_POOL_MIN_SIZE": "1",
    "DATABASE_POOL_MAX_SIZE": "7",
    "AGENT_MAX_STEPS": "12",
    "OAUTH_REDIRECT_URL": "https://inspector.example.com/servers/oauth/callback/",
    "MCP_POOL_MAX_SESSIONS": "5",
    "RECORD_STORE": "orm",
    "WORKBENCH_SAMPLING_REVIEW_SECONDS": "45",
    "LOG_LEVEL": "warning",
    "OTEL_EXPORTER_OTLP_HEADERS_FILE": "/run/secrets/otlp_headers",
}


def _resolved(env_file: Path) -> dict[str, dict[str, str]]:
    """Each app service's environment as `docker-compose config` resolves it from ``env_file``
    alone (nothing of this process's environment leaks in)."""
    compose = shutil.which("docker-compose")
    if compose is None:
        pytest.fail("docker-compose is not installed (apt-get install docker-compose; `make test` does it)")
    result = subprocess.run(
        [compose, "--env-file", str(env_file), "-f", "docker-compose.yml", "config"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"]},
    )
    assert result.returncode == 0, result.stderr
    services: dict[str, Any] = yaml.safe_load(result.stdout)["services"]
    return {
        name: {key: str(value) for key, value in services[name]["environment"].items()}
        for name in APP_SERVICES
    }


def test_every_setting_the_app_reads_reaches_web_worker_and_beat_and_nothing_else_is_passed(
    tmp_path: Path,
) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("POSTGRES_PASSWORD=only-this-is-set\n")
    expected = settings_names() | {f"{name}_FILE" for name in SECRETS}

    environments = _resolved(env_file)

    for name in APP_SERVICES:
        assert set(environments[name]) == expected, name


def test_the_settings_an_operator_puts_in_the_env_file_reach_every_app_service(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text(
        "POSTGRES_PASSWORD=from-the-env-file\n"
        + "".join(f"{key}={value}\n" for key, value in OPERATOR_ENV.items())
    )

    environments = _resolved(env_file)

    for name in APP_SERVICES:
        assert {key: environments[name][key] for key in OPERATOR_ENV} == OPERATOR_ENV, name


def test_the_environment_resolved_from_the_minimal_env_file_is_accepted_by_the_settings(
    tmp_path: Path,
) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("POSTGRES_PASSWORD=only-this-is-set\n")
    web = _resolved(env_file)["web"]
    # The settings are read, not used: `check` connects to neither PostgreSQL nor Redis.
    env = {"PATH": os.environ["PATH"], **web, "VAR_DIR": str(tmp_path / "var")}

    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert result.returncode == 0, result.stderr
    assert sorted(key for key, value in web.items() if value == "") != []  # the defaults are empty values
