"""The README's shell examples run: each ``python manage.py ...`` line of its ``sh`` blocks exits 0
against a fresh embedded set-up (SQLite in a temporary VAR_DIR, the demo model and the demo MCP
server as ``make run`` leaves them), in the order the README shows them — so the README cannot
drift from the commands again.

The lines run one after another in one interpreter started as the README starts it, each through
``manage.py``'s own entry point (``execute_from_command_line`` with the line's arguments; its exit
status is the ``SystemExit`` it raises, 0 when it returns): one Django start instead of one a
line keeps the test well under a minute on a busy host."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
# A block may be indented (inside a list item): its lines are then indented alike.
SHELL_BLOCK = re.compile(r"^[ \t]*```sh\n(.*?)^[ \t]*```", re.MULTILINE | re.DOTALL)
PYTHON = ".venv/bin/python"
# All of them together: a bound, not a measure (a few seconds of CPU on a quiet host).
TIMEOUT_SECONDS = 300


def manage_lines(text: str) -> list[str]:
    """The ``python manage.py ...`` lines of the ``sh`` blocks of a markdown text, comments cut."""
    found = []
    for block in SHELL_BLOCK.findall(text):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            if len(words) >= 2 and words[0].endswith("python") and words[1] == "manage.py":
                found.append(line)
    return found


def argv(line: str) -> list[str]:
    """A README line as the process to run: its interpreter is this one when the README's
    ``.venv`` is not there (the suite run from another environment)."""
    words = shlex.split(line, comments=True)
    if not (ROOT / PYTHON).exists():
        words = [sys.executable if word == PYTHON else word for word in words]
    return words


def test_the_manage_lines_of_sh_blocks_are_found_with_their_arguments() -> None:
    text = (
        '```sh\nmake run\n.venv/bin/python manage.py ask "Hi?" --json   # a comment\n```\n'
        "```\n.venv/bin/python manage.py not-a-shell-block\n```\n"
        "```sh\npython manage.py server list\n```\n"
        "1. A step:\n\n   ```sh\n   .venv/bin/python manage.py proxy key list\n   ```\n"
    )
    assert manage_lines(text) == [
        '.venv/bin/python manage.py ask "Hi?" --json   # a comment',
        "python manage.py server list",
        "   .venv/bin/python manage.py proxy key list",
    ]
    assert argv('.venv/bin/python manage.py ask "Hi?" --json  # c')[1:] == [
        "manage.py",
        "ask",
        "Hi?",
        "--json",
    ]


def test_the_readme_shows_commands_of_each_part_of_its_tour() -> None:
    commands = {shlex.split(line)[2] for line in manage_lines(README.read_text(encoding="utf-8"))}
    assert {"ask", "server", "verify", "proxy"} <= commands


# Runs in the subprocess: each line's arguments through manage.py's entry point, its exit status
# written to the file named by the second argument.
DRIVER = """
import json, os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "inspector.settings")
from django.core.management import execute_from_command_line
statuses = []
for words in json.loads(sys.argv[1]):
    try:
        execute_from_command_line(["manage.py", *words])
        status = 0
    except SystemExit as stop:
        status = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    statuses.append(status)
    with open(sys.argv[2], "w") as out:
        json.dump(statuses, out)
    if status:
        break
"""


def test_every_manage_command_the_readme_shows_exits_0_on_a_fresh_embedded_setup(tmp_path: Path) -> None:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DATABASE_URL", "REDIS_URL", "TURN_RUNNER", "DJANGO_SETTINGS_MODULE"}
    }
    env.update(VAR_DIR=str(tmp_path / "var"), ADMIN_PASSWORD="readme-examples", PYTHONPATH=str(ROOT))
    setup = [f"{PYTHON} manage.py migrate --noinput", f"{PYTHON} manage.py setup_local"]
    lines = manage_lines(README.read_text(encoding="utf-8"))
    assert lines, "the README shows no manage.py command"

    runs = [*setup, *lines]
    interpreter = argv(runs[0])[0]
    assert all(argv(line)[0] == interpreter for line in runs), "the lines start different interpreters"
    statuses_file = tmp_path / "statuses.json"

    done = subprocess.run(
        [interpreter, "-c", DRIVER, json.dumps([argv(line)[2:] for line in runs]), str(statuses_file)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
        check=False,
    )

    statuses = json.loads(statuses_file.read_text()) if statuses_file.exists() else []
    output = f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert done.returncode == 0, output
    for line, status in zip(runs, statuses, strict=False):
        assert status == 0, f"{line}\nexited {status}\n{output}"
    assert len(statuses) == len(runs), output
