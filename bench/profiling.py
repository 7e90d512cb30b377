"""Profiles of other processes (py-spy), summarised for the report.

``py-spy record --format raw`` writes collapsed stacks (``frame;frame;... count``); the summary
keeps the functions with the most samples on top of the stack (self) and the project's own
functions with the most samples anywhere on it (inclusive), which is where a fix would go.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

PROJECT_DIRS = ("conversations/", "inspector/", "servers/")
# Each sample is put in the first area whose marker appears anywhere in its stack.
AREAS = (
    (
        "publishing (asgiref async_to_sync → channels-redis)",
        ("asgiref/sync.py", "channels_redis/", "redis/asyncio"),
    ),
    ("prompt splicing + token counts", ("conversations/loop/splicing/",)),
    ("argument validation (jsonschema)", ("jsonschema/",)),
    ("MCP gateway + SDK", ("servers/gateway/", "mcp/", "anyio/")),
    ("model HTTP call (openai SDK, httpx2)", ("openai/", "httpx2/", "httpcore2/")),
    ("database (Django ORM, psycopg)", ("django/db/", "psycopg/")),
    ("Celery / kombu", ("celery/", "kombu/")),
)


def py_spy_path() -> str | None:
    local = Path(sys.executable).parent / "py-spy"
    return str(local) if local.exists() else shutil.which("py-spy")


def _frame_name(frame: str) -> str:
    # "function (path/to/module.py:123)" → "function (module path without site-packages)"
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    if "site-packages/" in path:
        path = path.split("site-packages/", 1)[1]
    elif path.startswith("/"):
        for marker in PROJECT_DIRS:
            if marker in path:
                path = marker + path.split(marker, 1)[1]
                break
    return f"{name} ({path})" if path else name


def summarise(collapsed: str, top: int = 15) -> dict[str, Any]:
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    areas: Counter[str] = Counter()
    total = 0
    for line in collapsed.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        frames = [_frame_name(f) for f in stack.split(";")]
        area = next((name for name, markers in AREAS if any(m in stack for m in markers)), "other")
        areas[area] += count
        # py-spy puts the thread name first; the leaf is last.
        own[frames[-1]] += count
        for frame in set(frames):
            if any(f"({marker}" in frame for marker in PROJECT_DIRS):
                inclusive[frame] += count
    share = (lambda n: round(100 * n / total, 1)) if total else (lambda n: 0.0)
    return {
        "samples": total,
        "by_area_pct": {name: share(n) for name, n in areas.most_common()},
        "top_self_pct": [[name, share(n)] for name, n in own.most_common(top)],
        "top_project_inclusive_pct": [[name, share(n)] for name, n in inclusive.most_common(top)],
    }


def areas_of_tree(root: Any) -> dict[str, float]:
    """Seconds per area in a pyinstrument frame tree: each frame goes to the first area whose
    marker is in its file path, counted once at the outermost such frame; the rest is "other"."""
    areas: Counter[str] = Counter()
    pending = [root]
    while pending:
        frame = pending.pop()
        path = (frame.file_path or "").replace("\\", "/")
        area = next((name for name, markers in AREAS if any(m in path for m in markers)), None)
        if area is not None:
            areas[area] += frame.time
        else:
            pending.extend(frame.children)
    areas["other"] = max(0.0, root.time - sum(areas.values()))
    return dict(areas.most_common())


def record(pid: int, seconds: float, out: Path) -> dict[str, Any]:
    """Sample ``pid`` (all threads, idle ones excluded) for ``seconds``; returns the summary."""
    binary = py_spy_path()
    if binary is None:
        return {"profile": "not taken: py-spy is not installed (pip install -e '.[bench]')"}
    completed = subprocess.run(
        [
            binary,
            "record",
            "--pid",
            str(pid),
            "--duration",
            str(int(seconds)),
            "--rate",
            "250",
            "--format",
            "raw",
            "--nonblocking",
            "--output",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    if completed.returncode != 0 or not out.exists():
        return {
            "profile": f"not taken: py-spy failed: {(completed.stderr or completed.stdout).strip()[-300:]}"
        }
    summary = summarise(out.read_text())
    summary["profile"] = str(out)
    return summary
