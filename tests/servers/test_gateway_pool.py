"""The gateway's event-loop thread across a fork: a child process (Celery's prefork pool) starts its
own loop and its own sessions, and leaves the parent's alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
# Bounds the whole script: a child stuck on the parent's loop waits out the gateway's own budget
# (connect + call + 15 s) first, so a hang still ends here with the script's report.
SCRIPT_DEADLINE_SECONDS = 120

# Run in a fresh interpreter: forking the test process itself would copy pytest and its threads.
FORKING_SCRIPT = """
import json, os, sys

import django

django.setup()

from servers import gateway
from servers.gateway import ServerConfig

config = ServerConfig(
    server_id=1,
    name="demo",
    transport="stdio",
    command=sys.executable,
    args=("-m", "servers.demo_server"),
    cwd=os.getcwd(),
    call_timeout=10.0,
)


def seen(outcome):
    session = outcome.session
    return {
        "error": outcome.error,
        "tools": sorted(tool["name"] for tool in outcome.tools),
        "spawned": session.spawned if session else None,
        "generation": session.generation if session else None,
        "respawn_reason": session.respawn_reason if session else None,
    }


report = {"parent_before": seen(gateway.list_tools(config))}
read_end, write_end = os.pipe()
child = os.fork()
if child == 0:
    os.close(read_end)
    try:
        found = seen(gateway.list_tools(config))
        found["spawn_count"] = gateway.spawn_count(config.server_id)
        gateway.close_all()  # the child's own sessions only
    except BaseException as exc:
        found = {"error": f"{type(exc).__name__}: {exc}"}
    with os.fdopen(write_end, "w") as pipe:
        json.dump(found, pipe)
    os._exit(0)
os.close(write_end)
with os.fdopen(read_end) as pipe:
    report["child"] = json.loads(pipe.read() or "{}")
os.waitpid(child, 0)
report["parent_after"] = seen(gateway.list_tools(config))
report["parent_spawn_count"] = gateway.spawn_count(config.server_id)
gateway.close_all()
print(json.dumps(report))
"""


def test_a_forked_child_starts_its_own_gateway_loop_and_sessions_and_the_parents_survive(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "inspector.settings", "VAR_DIR": str(tmp_path)}

    finished = subprocess.run(
        [sys.executable, "-c", FORKING_SCRIPT],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=SCRIPT_DEADLINE_SECONDS,
    )

    assert finished.returncode == 0, finished.stderr
    report = json.loads(finished.stdout.strip().splitlines()[-1])
    demo_tools = report["parent_before"]["tools"]
    assert "get_weather_forecast" in demo_tools
    assert report["parent_before"] == {
        "error": "",
        "tools": demo_tools,
        "spawned": True,
        "generation": 1,
        "respawn_reason": "",
    }
    # The child spawned a server of its own on a loop of its own: the first of its process.
    assert report["child"] == {
        "error": "",
        "tools": demo_tools,
        "spawned": True,
        "generation": 1,
        "respawn_reason": "",
        "spawn_count": 1,
    }
    # The parent's pooled session outlived the child and its close_all: reused, not respawned.
    assert report["parent_after"] == {
        "error": "",
        "tools": demo_tools,
        "spawned": False,
        "generation": 1,
        "respawn_reason": "",
    }
    assert report["parent_spawn_count"] == 1
