"""The deployment files users rely on stay valid."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


def test_docker_compose_file_is_valid() -> None:
    compose = shutil.which("docker-compose")
    if compose is None:
        pytest.fail(
            "docker-compose is not installed (apt-get install docker-compose; `make test` does it as root)"
        )
    result = subprocess.run(
        [compose, "-f", "docker-compose.yml", "config", "-q"], cwd=REPO_ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


def test_docker_compose_describes_web_worker_beat_postgres_and_redis() -> None:
    compose = shutil.which("docker-compose")
    if compose is None:
        pytest.fail("docker-compose is not installed")
    result = subprocess.run(
        [compose, "-f", "docker-compose.yml", "config", "--services"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert set(result.stdout.split()) == {"web", "worker", "beat", "postgres", "redis"}
