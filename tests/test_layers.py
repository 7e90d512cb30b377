"""The layers the architecture promises (docs/ARCHITECTURE.md), held by tests: the agent loop and
the vocabulary it shares with the gateway load no framework, nothing below the UI imports the
UI package (the recorder announces through ``conversations.events``; ``inspector.live``, the one
module that talks to the channel layer, subscribes), between ``conversations`` and ``servers`` imports run one way, servers → conversations, and
``inspector.evals`` (the evals app, inside the UI package) sits above both: it imports them, neither
imports it, and it imports nothing else of the UI package but ``inspector.live``."""

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
    # The loop package as a whole, and each of its parts on its own: the agent, the paradigms,
    # providers, parsing and splicing, the contract the runner reaches MCP through (``toolhost``,
    # implemented by ``servers``) and the seam tool-definition overrides come through
    # (``tool_overrides``, filled by ``evals``).
    "conversations.loop",
    "conversations.loop.agent",
    "conversations.loop.llm",
    "conversations.loop.paradigms",
    "conversations.loop.providers",
    "conversations.loop.parsing",
    "conversations.loop.splicing",
    "conversations.loop.wire",
    "conversations.loop.toolhost",
    "conversations.loop.tool_overrides",
    # The host presets a turn run "as host" applies (docs/hosts.md).
    "conversations.loop.hosts",
    "conversations.redaction",
    "conversations.typealias",
    # The recorder's announcements (heard by ``inspector.live``).
    "conversations.events",
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


def _imports(path: Path, package: str) -> list[tuple[int, str]]:
    """Every module of ``package`` a file imports (at any depth of the file), with its line."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == package:
                found.extend((node.lineno, f"{package}.{alias.name}") for alias in node.names)
            elif node.module.startswith(f"{package}."):
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found.extend(
                (node.lineno, alias.name) for alias in node.names if alias.name.split(".")[0] == package
            )
    return found


def test_nothing_in_conversations_or_servers_imports_the_ui_package() -> None:
    offenders = [
        f"{path.relative_to(REPO_ROOT)}:{line} imports {module}"
        for package in ("conversations", "servers")
        for path in sorted((REPO_ROOT / package).rglob("*.py"))
        for line, module in _imports(path, "inspector")
    ]
    assert offenders == []


def test_evals_imports_nothing_of_the_ui_package_but_its_channel_layer_module() -> None:
    offenders = [
        f"{path.relative_to(REPO_ROOT)}:{line} imports {module}"
        for path in sorted((REPO_ROOT / "inspector" / "evals").rglob("*.py"))
        for line, module in _imports(path, "inspector")
        if module != "inspector.live" and not module.startswith("inspector.evals")
    ]
    assert offenders == []


# What the loop may take from the rest of ``conversations``: the vocabulary it shares with the
# record (JSON names, escaping, the redactor) and, for type checking only, the Conversation model.
LOOP_MAY_IMPORT = (
    "conversations.loop",
    "conversations.typealias",
    "conversations.escaping",
    "conversations.strings",
    "conversations.redaction",
)


def test_the_loop_imports_nothing_of_the_record_or_the_turn_domain() -> None:
    offenders = [
        f"{path.relative_to(REPO_ROOT)}:{line} imports {module}"
        for path in sorted((REPO_ROOT / "conversations" / "loop").rglob("*.py"))
        for line, module in _imports(path, "conversations")
        if not any(module == allowed or module.startswith(f"{allowed}.") for allowed in LOOP_MAY_IMPORT)
        and not (module == "conversations.models" and _type_checking_only(path, line))
    ]
    assert offenders == []


def _type_checking_only(path: Path, line: int) -> bool:
    """Whether the import on ``line`` sits in an ``if TYPE_CHECKING:`` block."""
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            if any(child.lineno == line for statement in node.body for child in ast.walk(statement)):
                return True
    return False


def test_the_loop_scan_sees_an_import_of_the_record(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from typing import TYPE_CHECKING\nfrom conversations.record import recording\n"
        "if TYPE_CHECKING:\n    from conversations.models import Turn\n"
    )
    assert _imports(sample, "conversations") == [
        (2, "conversations.record"),
        (4, "conversations.models"),
    ]
    assert not _type_checking_only(sample, 2)
    assert _type_checking_only(sample, 4)


def test_nothing_in_conversations_imports_servers() -> None:
    # servers → conversations only: the runner reaches MCP through ``conversations.loop.toolhost`` and
    # the redactor learns the servers' secrets from ``conversations.secret_sources``, both filled
    # by ``servers`` when Django starts. Migrations name other apps' models by string.
    offenders = [
        f"{path.relative_to(REPO_ROOT)}:{line} imports {module}"
        for path in sorted((REPO_ROOT / "conversations").rglob("*.py"))
        if "migrations" not in path.parts
        for line, module in _imports(path, "servers")
    ]
    assert offenders == []


def test_nothing_in_conversations_or_servers_imports_evals() -> None:
    # evals → conversations, servers only: an eval conversation's tool overrides reach the runner
    # through ``conversations.loop.tool_overrides``, filled by ``evals`` when Django starts.
    offenders = [
        f"{path.relative_to(REPO_ROOT)}:{line} imports {module}"
        for package in ("conversations", "servers")
        for path in sorted((REPO_ROOT / package).rglob("*.py"))
        if "migrations" not in path.parts
        for line, module in _imports(path, "inspector")
        if module.startswith("inspector.evals")
    ]
    assert offenders == []


def test_the_scan_sees_an_import_of_the_ui_package(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from inspector import live, views\nimport inspector.settings\n\ndef f():\n    from inspector.wire import x\n"
    )
    assert _imports(sample, "inspector") == [
        (1, "inspector.live"),
        (1, "inspector.views"),
        (2, "inspector.settings"),
        (5, "inspector.wire"),
    ]


def test_the_scan_sees_an_import_of_servers_in_a_function_and_a_type_checking_block(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from typing import TYPE_CHECKING\nfrom serverside import x\nimport servers_extra\n"
        "if TYPE_CHECKING:\n    from servers.models import McpServer\n\n"
        "def f():\n    import servers.gateway as gateway\n    from servers import toolhost\n"
    )
    assert _imports(sample, "servers") == [
        (5, "servers.models"),
        (8, "servers.gateway"),
        (9, "servers.toolhost"),
    ]


def _module_graph(root: Path) -> dict[str, set[str]]:
    """The apps' modules and what each imports when it is loaded (module-level imports, relative
    ones included, with the packages Python runs on the way), migrations left out."""
    files = {
        ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): path
        for package in ("conversations", "servers", "inspector")
        for path in (root / package).rglob("*.py")
        if "migrations" not in path.parts
    }

    def known(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.parse(path.read_text(), filename=str(path)).body:
            if isinstance(node, ast.Import):
                targets.update(filter(None, (known(alias.name) for alias in node.names)))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join([*parts[: len(parts) - node.level + 1], *([base] if base else [])])
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    target = full if full in files else known(base)
                    if target:
                        targets.add(target)
        for target in list(targets):
            parts = target.split(".")
            targets.update(
                ".".join(parts[:end]) for end in range(1, len(parts)) if ".".join(parts[:end]) in files
            )
        graph[name] = {target for target in targets if target != name and not name.startswith(f"{target}.")}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or round about (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph.get(module, ())):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_no_module_of_the_apps_imports_itself_round_about() -> None:
    assert _cycles(_module_graph(REPO_ROOT)) == []


def _package_graph(graph: dict[str, set[str]], packages: tuple[str, ...]) -> dict[str, set[str]]:
    """The module graph seen from above: which of ``packages`` imports which (itself left out)."""

    # The most specific of ``packages`` a module is in (``inspector.evals`` before ``inspector``).
    def owner(module: str) -> str | None:
        return max((p for p in packages if module == p or module.startswith(f"{p}.")), key=len, default=None)

    found: dict[str, set[str]] = {package: set() for package in packages}
    for module, targets in graph.items():
        top = owner(module)
        if top is not None:
            found[top].update(filter(None, map(owner, targets)))
    return {package: targets - {package} for package, targets in found.items()}


def test_servers_imports_conversations_at_module_level_and_never_the_reverse() -> None:
    packages = _package_graph(_module_graph(REPO_ROOT), ("conversations", "servers"))
    assert packages == {"conversations": set(), "servers": {"conversations"}}
    assert _cycles(packages) == []


def test_evals_imports_conversations_and_servers_at_module_level_and_neither_imports_it() -> None:
    packages = _package_graph(_module_graph(REPO_ROOT), ("conversations", "servers", "inspector.evals"))
    assert packages == {
        "conversations": set(),
        "servers": {"conversations"},
        "inspector.evals": {"conversations", "servers"},
    }
    assert _cycles(packages) == []


def test_the_cycle_check_finds_a_cycle_through_a_package_and_a_relative_import(tmp_path: Path) -> None:
    app = tmp_path / "conversations"
    app.mkdir()
    (app / "__init__.py").write_text("from .services import x\n")
    (app / "services.py").write_text("from conversations.tasks import y\nx = 1\n")
    (app / "tasks.py").write_text("import conversations.retention\ny = 2\n")
    (app / "retention.py").write_text("from conversations import services\n")
    (app / "free.py").write_text("def f():\n    from conversations import services\n")
    assert _cycles(_module_graph(tmp_path)) == [
        ["conversations.retention", "conversations.services", "conversations.tasks"]
    ]
