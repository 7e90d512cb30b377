"""What a Celery worker process loads when it starts: what it runs turns with, not the web side.

Every module a process imports stays in its memory, and a worker host runs one worker process per
core, each with hundreds of turn threads (docs/ARCHITECTURE.md, Scaled deployment): pages, forms,
the API and a model SDK the product does not call would cost each process memory for nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
WEB_ONLY = ("inspector.urls", "inspector.views", "inspector.api", "inspector.forms", "rest_framework.views")

# What ``celery -A inspector worker`` does before it takes a task: the app module, then the
# loader's default imports (the Django fixup's setup and, unless skipped, its system checks, then
# the task modules); then what a turn runs (the runner, the providers, the MCP gateway).
WORKER_START = """
import json, sys
from inspector.celery import app
app.loader.import_default_modules()
import conversations.runner, conversations.loop.providers, servers.gateway
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {"inspector", "rest_framework", "openai"})))
"""


def _loaded(tmp_path: Path, **env: str) -> set[str]:
    result = subprocess.run(
        [sys.executable, "-c", WORKER_START],
        cwd=REPO_ROOT,
        env={"PATH": "/usr/bin:/bin", "VAR_DIR": str(tmp_path), "HOME": str(tmp_path), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return set(json.loads(result.stdout.strip().splitlines()[-1]))


def test_a_worker_loads_no_page_form_or_api_module_and_no_model_sdk(tmp_path: Path) -> None:
    loaded = _loaded(tmp_path)

    assert "inspector.celery" in loaded  # the probe saw the worker's own modules
    assert loaded.isdisjoint(WEB_ONLY), sorted(loaded & set(WEB_ONLY))
    # The product speaks every provider's wire format itself (the SDK is a test client only).
    assert not any(name == "openai" or name.startswith("openai.") for name in loaded)


def test_an_operator_may_still_have_the_worker_run_djangos_checks(tmp_path: Path) -> None:
    # The checks import the URLconf, so the web modules are there once they run.
    assert "inspector.urls" in _loaded(tmp_path, CELERY_SKIP_CHECKS="0")
