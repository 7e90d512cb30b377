"""The lean run: ``make run`` installs the runtime dependencies only, and the app needs no more;
the test, lint, type and bench targets add the dev extras."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
APP_PACKAGES = ("inspector", "conversations", "servers")


def _requirement_name(requirement: str) -> str:
    name = requirement
    for stop in "[<>=!~; ":
        name = name.split(stop)[0]
    return name.lower().replace("_", "-")


def _dev_only_modules() -> set[str]:
    """Top-level modules installed by a distribution the dev extras name and the runtime does not."""
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    runtime = {_requirement_name(r) for r in project["dependencies"]}
    dev = {_requirement_name(r) for r in project["optional-dependencies"]["dev"]} - runtime
    return {
        module
        for module, distributions in metadata.packages_distributions().items()
        if all(d.lower().replace("_", "-") in dev for d in distributions)
    }


# Run in a fresh interpreter: imports every module of the app (management commands, migrations,
# the ASGI and Celery entry points) with the dev-only modules made unimportable.
IMPORT_EVERYTHING = """
import importlib, json, os, pkgutil, sys

blocked = set(json.loads(sys.argv[1]))

class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ModuleNotFoundError(f"{name} is installed by the dev extras only", name=name)
        return None

sys.meta_path.insert(0, Block())
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "inspector.settings")
import django
django.setup()
count = 0
for package in json.loads(sys.argv[2]):
    root = importlib.import_module(package)
    for info in pkgutil.walk_packages(root.__path__, package + "."):
        importlib.import_module(info.name)
        count += 1
print(count)
"""


def test_the_app_imports_nothing_that_only_the_dev_extras_install(tmp_path: Path) -> None:
    blocked = _dev_only_modules()
    assert {"pytest", "playwright", "mypy", "hypothesis"} <= blocked

    result = subprocess.run(
        [sys.executable, "-c", IMPORT_EVERYTHING, json.dumps(sorted(blocked)), json.dumps(APP_PACKAGES)],
        cwd=REPO_ROOT,
        env={"PATH": "/usr/bin:/bin", "VAR_DIR": str(tmp_path), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert result.returncode == 0, result.stderr[-3000:]
    assert int(result.stdout.strip().splitlines()[-1]) > 100  # every module was walked


def _planned_commands(target: str, tmp_path: Path) -> str:
    """What ``make <target>`` would run on a machine with no virtual environment yet."""
    for name in (
        "Makefile",
        "pyproject.toml",
        "tests/mcp_servers/package.json",
        "tests/mcp_servers/package-lock.json",
    ):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO_ROOT / name, tmp_path / name)
    result = subprocess.run(
        ["make", "-n", target, "PYTHON=python3.11", "CHROMIUM=/bin/sh"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("target", ["run", "setup", "worker", "beat"])
def test_running_the_app_installs_the_runtime_dependencies_only(target: str, tmp_path: Path) -> None:
    commands = _planned_commands(target, tmp_path)

    assert "python3.11 -m venv .venv" in commands
    assert "pip install --quiet -e .\n" in commands
    assert "[dev" not in commands


@pytest.mark.parametrize(
    "target", ["test", "test-fast", "test-sqlite", "test-postgres", "lint", "typecheck", "bench"]
)
def test_the_test_lint_type_and_bench_targets_add_the_dev_extras(target: str, tmp_path: Path) -> None:
    commands = _planned_commands(target, tmp_path)

    assert "pip install --quiet -e .\n" in commands
    assert 'pip install --quiet -e ".[dev]"' in commands
    assert "touch .venv/.installed-dev" in commands
