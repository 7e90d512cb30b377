"""The SDK's deprecation warnings on the command line: never a trace of file, line and source
(Python's default display), at most one plain line, and only when asked for (``-v 2``).

A real command in a subprocess, as a user runs it: a client-credentials grant without
``--issuer`` makes the SDK warn each time its provider is built (the command already says so
in its own words), against the real authorization server of ``tests.fixtures.oauth_server``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.oauth_server import PRE_REGISTERED, FakeAuthorization, Served

REPO_ROOT = Path(__file__).resolve().parents[2]
DEPRECATION = "Omitting `issuer` is deprecated"


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeAuthorization]:
    with Served() as served:
        yield served


def manage(var_dir: Path, *args: str, log_level: str = "") -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key not in {"DATABASE_URL", "REDIS_URL"}}
    env["VAR_DIR"] = str(var_dir)
    if log_level:
        env["LOG_LEVEL"] = log_level
    return subprocess.run(
        [sys.executable, str(REPO_ROOT / "manage.py"), *args],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


@pytest.fixture(scope="module")
def authorized(fake: FakeAuthorization, tmp_path_factory: pytest.TempPathFactory) -> Path:
    var_dir = tmp_path_factory.mktemp("cli-warnings")
    manage(var_dir, "migrate", "--verbosity", "0")
    manage(var_dir, "server", "add", "guarded", "--url", fake.mcp_url)
    manage(
        var_dir, "server", "auth", "guarded", "--grant", "client_credentials",
        "--client-id", PRE_REGISTERED[0], "--client-secret", PRE_REGISTERED[1],
    )  # fmt: skip
    return var_dir


def test_with_a_log_level_set_a_command_prints_the_sdks_deprecation_as_one_plain_line(
    authorized: Path,
) -> None:
    done = manage(authorized, "server", "-v", "2", "tools", "guarded", log_level="DEBUG")

    assert "whoami" in done.stdout
    assert "Traceback" not in done.stderr
    assert "MCPDeprecationWarning" not in done.stderr  # no file:line: Category: trace
    assert "ClientCredentialsOAuthProvider(" not in done.stderr  # nor the source line under it
    assert done.stderr.count(DEPRECATION) == 1, done.stderr
    [line] = [line for line in done.stderr.splitlines() if DEPRECATION in line]
    assert line.startswith("note: the MCP SDK says: ")


def test_without_verbosity_the_sdks_deprecation_is_not_printed(authorized: Path) -> None:
    done = manage(authorized, "server", "tools", "guarded", log_level="INFO")

    assert "whoami" in done.stdout
    assert DEPRECATION not in done.stderr and "Traceback" not in done.stderr
    assert "MCPDeprecationWarning" not in done.stderr
