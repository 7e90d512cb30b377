"""The layers the architecture promises (docs/ARCHITECTURE.md), held by tests: the agent loop and
the vocabulary it shares with the gateway load no framework, and nothing below the UI imports the
UI package except ``inspector.live`` (the one module that talks to the channel layer)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
FRAMEWORKS = ("django", "celery", "channels", "kombu", "billiard", "rest_framework", "daphne", "inspector")
# The loop, what it is made of, and the vocabulary it shares with the gateway and the recorder.
FRAMEWORK_FREE = (
    "conversations.agent",
    "conversations.llm",
    "conversations.paradigms",
    "conversations.providers",
    "conversations.parsing",
    "conversations.splicing",
    "conversations.redaction",
    "conversations.typealias",
    "conversations.wire",
)


@pytest.mark.parametrize("module", FRAMEWORK_FREE)
def test_importing_the_loop_and_its_vocabulary_loads_no_framework(module: str) -> None:
    probe = (
        f"import sys, {module}\n"
        f"print(' '.join(sorted({{name.split('.')[0] for name in sys.modules}} & set({FRAMEWORKS!r}))))"
    )
    # A fresh interpreter: this one has Django loaded already.
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "", f"importing {module} loads {result.stdout.strip()}"


def _inspector_imports(path: Path) -> list[tuple[int, str]]:
    """Every ``inspector`` module a file imports (at any depth of the file), with its line."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "inspector":
                found.extend((node.lineno, f"inspector.{alias.name}") for alias in node.names)
            elif node.module.startswith("inspector."):
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found.extend(
                (node.lineno, alias.name) for alias in node.names if alias.name.split(".")[0] == "inspector"
            )
    return found


def test_nothing_below_the_ui_imports_the_ui_package_but_its_channel_layer_module() -> None:
    offenders = [
        f"{path.relative_to(REPO_ROOT)}:{line} imports {module}"
        for package in ("conversations", "servers")
        for path in sorted((REPO_ROOT / package).rglob("*.py"))
        for line, module in _inspector_imports(path)
        if module != "inspector.live"
    ]
    assert offenders == []


def test_the_scan_sees_an_import_of_the_ui_package(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from inspector import live, views\nimport inspector.settings\n\ndef f():\n    from inspector.wire import x\n"
    )
    assert _inspector_imports(sample) == [
        (1, "inspector.live"),
        (1, "inspector.views"),
        (2, "inspector.settings"),
        (5, "inspector.wire"),
    ]
