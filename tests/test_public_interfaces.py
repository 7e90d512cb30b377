"""Product code uses the frameworks through their public interfaces only (docs/decisions/0020).

A static scan (``ast``) of ``inspector``, ``conversations`` and ``servers`` (not tests, not
migrations) for what leans on a framework's internals: a private name imported from Django,
psycopg, psycopg_pool, Channels, channels-redis, Celery or kombu; Django's SQL compiler module,
its compiler classes subclassed, or its queryset iterables imported; and a ``_name`` attribute
read on a name imported from one of those packages. The underscore names Django documents as
public are allowed: ``_meta`` (the Model ``_meta`` API), ``_default_manager``, ``_base_manager``
and ``_state.adding`` / ``_state.db``. The scan is an approximation (an object reached through a
local variable is not followed); the self-test holds it to a sample of each kind.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("inspector", "conversations", "servers")
FRAMEWORKS = frozenset({"django", "psycopg", "psycopg_pool", "channels", "channels_redis", "celery", "kombu"})
COMPILER_MODULE = "django.db.models.sql.compiler"
ITERABLES = frozenset(
    {
        "ModelIterable",
        "RawModelIterable",
        "ValuesIterable",
        "ValuesListIterable",
        "NamedValuesListIterable",
        "FlatValuesListIterable",
    }
)
COMPILER_CLASS = re.compile(r"^SQL\w*Compiler$")
# Underscore names Django documents for use (the Model _meta API, managers, instance state).
DOCUMENTED = frozenset({"_meta", "_default_manager", "_base_manager"})
DOCUMENTED_STATE = frozenset({"adding", "db"})


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _framework(module: str) -> bool:
    return module.split(".")[0] in FRAMEWORKS


def scan_source(source: str, path: str = "<source>") -> list[Finding]:
    """What ``source`` leans on of the frameworks' internals, in the order it appears."""
    tree = ast.parse(source, filename=path)
    found: list[Finding] = []
    bound: set[str] = set()  # names bound by an import from a framework package
    parents: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node

    def report(node: ast.AST, what: str) -> None:
        found.append(Finding(path, getattr(node, "lineno", 0), what))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == COMPILER_MODULE or alias.name.startswith(COMPILER_MODULE + "."):
                    report(node, f"imports {alias.name}")
                if _framework(alias.name):
                    bound.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            module = node.module
            if not _framework(module):
                continue
            for alias in node.names:
                full = f"{module}.{alias.name}"
                if _private(alias.name):
                    report(node, f"imports the private name {alias.name} from {module}")
                if module == COMPILER_MODULE or full == COMPILER_MODULE:
                    report(node, f"imports {COMPILER_MODULE}")
                if alias.name in ITERABLES:
                    report(node, f"imports Django's queryset iterable {alias.name}")
                bound.add(alias.asname or alias.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for base in node.bases:
                name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
                if COMPILER_CLASS.match(name):
                    report(node, f"subclasses Django's compiler class {name}")
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            root: ast.expr = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if not (isinstance(root, ast.Name) and root.id in bound):
                continue
            if node.attr in DOCUMENTED:
                continue
            parent = parents.get(node)
            if (
                node.attr == "_state"
                and isinstance(parent, ast.Attribute)
                and parent.attr in DOCUMENTED_STATE
            ):
                continue
            report(node, f"reads the private attribute {node.attr} of {root.id}")
    return sorted(found, key=lambda finding: finding.line)


def _product_files() -> list[Path]:
    return [
        path
        for top in PRODUCT
        for path in sorted((ROOT / top).rglob("*.py"))
        if "migrations" not in path.relative_to(ROOT).parts and "tests" not in path.relative_to(ROOT).parts
    ]


def test_product_code_uses_the_frameworks_through_their_public_interfaces_only() -> None:
    findings = [
        str(finding)
        for path in _product_files()
        for finding in scan_source(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    ]
    assert findings == []


def test_the_scan_reads_every_module_of_the_three_apps() -> None:
    files = {str(path.relative_to(ROOT)) for path in _product_files()}
    assert {"inspector/settings.py", "conversations/record/connections.py", "servers/toolhost.py"} <= files
    assert not [name for name in files if "/migrations/" in name]


def test_the_scan_catches_a_sample_of_each_kind() -> None:
    sample = """
from django.db.models.query import _BaseQuerySet
from psycopg_pool.pool import _AsyncPool as Pool
from channels.layers import _private_layer
from celery import _state
from kombu.utils import _helper
from channels_redis.core import _consistent_hash
import django.db.models.sql.compiler
from django.db.models.sql import compiler
from django.db.models.sql.compiler import SQLCompiler
from django.db.models.query import ModelIterable, FlatValuesListIterable
from django.db.models.query import ValuesListIterable
from django.db import connection, models
import psycopg_pool
import psycopg.pq as pq

class Faster(SQLCompiler):
    pass

class Quicker(compiler.SQLInsertCompiler):
    pass

def lean(conn):
    connection._savepoint_ids
    psycopg_pool.ConnectionPool._check
    models.Model._do_update
    pq._secret
    connection.settings_dict._hidden.deeper
"""
    found = [finding.what for finding in scan_source(sample)]
    assert found == [
        "imports the private name _BaseQuerySet from django.db.models.query",
        "imports the private name _AsyncPool from psycopg_pool.pool",
        "imports the private name _private_layer from channels.layers",
        "imports the private name _state from celery",
        "imports the private name _helper from kombu.utils",
        "imports the private name _consistent_hash from channels_redis.core",
        "imports django.db.models.sql.compiler",
        "imports django.db.models.sql.compiler",
        "imports django.db.models.sql.compiler",
        "imports Django's queryset iterable ModelIterable",
        "imports Django's queryset iterable FlatValuesListIterable",
        "imports Django's queryset iterable ValuesListIterable",
        "subclasses Django's compiler class SQLCompiler",
        "subclasses Django's compiler class SQLInsertCompiler",
        "reads the private attribute _savepoint_ids of connection",
        "reads the private attribute _check of psycopg_pool",
        "reads the private attribute _do_update of models",
        "reads the private attribute _secret of pq",
        "reads the private attribute _hidden of connection",
    ]


def test_the_scan_allows_djangos_documented_underscore_names_and_names_of_other_modules() -> None:
    sample = """
from django.contrib.auth import get_user_model
from django.db import models
from conversations.models import Step
from conversations import _ours

User = get_user_model()
models.Model._meta.get_field("id")
models.Model._default_manager.all()
models.Model._base_manager.all()
models.Model._state.adding
models.Model._state.db
Step._anything
_ours._helper
models.Model.__name__

class Faster(Step):
    pass
"""
    assert scan_source(sample) == []
    # ``_state`` read for anything else is not one of the documented uses.
    assert [
        f.what for f in scan_source("from django.db import models\nmodels.Model._state.fields_cache")
    ] == ["reads the private attribute _state of models"]
