"""The lean run: ``make run`` installs the runtime dependencies only, and the app needs no more;
the test, lint, type and bench targets add the dev extras; transformers (the templates-check
extra) only for the whole suite; and the oldest release of every runtime dependency is tested
once (``make test-min-deps``)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path
from types import ModuleType

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
APP_PACKAGES = ("inspector", "conversations", "servers")


def _requirement_name(requirement: str) -> str:
    name = requirement
    for stop in "[<>=!~; ":
        name = name.split(stop)[0]
    return name.lower().replace("_", "-")


def _dev_only_modules() -> set[str]:
    """Top-level modules installed by a distribution the extras name and the runtime does not."""
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    runtime = {_requirement_name(r) for r in project["dependencies"]}
    dev = {
        _requirement_name(r) for extra in project["optional-dependencies"].values() for r in extra
    } - runtime
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
    assert {"pytest", "playwright", "mypy", "hypothesis", "transformers"} <= blocked

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
        ".ci/min_requirements.py",
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


def test_only_the_whole_suite_and_its_template_target_install_transformers(tmp_path: Path) -> None:
    for target in ("test", "test-sqlite", "test-postgres", "test-templates"):
        assert 'pip install --quiet -e ".[dev,templates-check]"' in _planned_commands(target, tmp_path)
    for target in ("test-fast", "check", "lint", "typecheck", "bench", "run"):
        assert "templates-check" not in _planned_commands(target, tmp_path), target


def test_the_quick_run_leaves_out_the_tests_that_need_transformers(tmp_path: Path) -> None:
    assert "not templates_check" in _planned_commands("test-fast", tmp_path)
    assert "-m templates_check" in _planned_commands("test-templates", tmp_path)


def _min_requirements() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "min_requirements", REPO_ROOT / ".ci" / "min_requirements.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_runtime_dependency_is_pinned_to_its_lower_bound() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / ".ci" / "min_requirements.py")],
        capture_output=True,
        text=True,
        check=True,
    )

    pins = result.stdout.splitlines()
    assert [_requirement_name(pin) for pin in pins] == [_requirement_name(r) for r in project["dependencies"]]
    assert all("==" in pin and ">" not in pin and "<" not in pin for pin in pins)
    assert "celery[redis]==5.7" in pins


def test_a_lower_bound_becomes_a_pin_and_a_missing_one_is_refused() -> None:
    module = _min_requirements()

    assert module.pinned("psycopg[binary,pool]>=3.2.1,<4") == "psycopg[binary,pool]==3.2.1"
    assert module.pinned("psycopg[binary,pool]>=3.2.1", extras=False) == "psycopg==3.2.1"
    with pytest.raises(ValueError, match="no lower bound"):
        module.pinned("redis<9")
    with pytest.raises(ValueError, match="no lower bound"):
        module.pinned("types-PyYAML")


def test_the_oldest_releases_are_tested_in_a_venv_of_their_own_once_by_the_whole_suite(
    tmp_path: Path,
) -> None:
    commands = _planned_commands("test-min-deps", tmp_path)

    assert "python3.11 -m venv .venv-min" in commands
    assert "python3.11 .ci/min_requirements.py > .venv-min/requirements.txt" in commands
    assert "-c .venv-min/constraints.txt -r .venv-min/tools.txt" in commands
    assert ".venv-min/bin/python -m pip install --quiet --no-deps -e ." in commands
    assert ".venv-min/bin/python -m pytest" in commands
    assert ".[dev" not in commands
    assert _planned_commands("test", tmp_path).count(".venv-min/bin/python -m pytest") == 2
