"""The parallel suite's per-worker services (tests/workers.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.workers import _redis_url_for

REPO_ROOT = Path(__file__).resolve().parent.parent


def test_each_worker_takes_the_redis_database_below_the_given_one() -> None:
    assert _redis_url_for("redis://127.0.0.1:6379/15", 0) == "redis://127.0.0.1:6379/15"
    assert _redis_url_for("redis://127.0.0.1:6379/15", 3) == "redis://127.0.0.1:6379/12"
    assert _redis_url_for("redis://:pw@cache:6380/2", 1) == "redis://:pw@cache:6380/1"


def test_a_redis_index_with_no_room_for_the_worker_is_refused() -> None:
    with pytest.raises(RuntimeError, match="no room for worker 2"):
        _redis_url_for("redis://127.0.0.1:6379/1", 2)


def test_a_worker_process_gets_its_own_redis_database_and_var_dir_before_django_reads_them() -> None:
    script = "import os, tests.workers; print(os.environ['REDIS_URL']); print(os.environ['VAR_DIR'])"
    env = {
        **os.environ,
        "PYTEST_XDIST_WORKER": "gw1",
        "REDIS_URL": "redis://127.0.0.1:6379/15",
        "VAR_DIR": "/srv/var",
    }
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=True
    ).stdout.split()

    assert out == ["redis://127.0.0.1:6379/14", "/srv/var/gw1"]
