"""``manage.py eval run`` as a terminal shows it: a process of its own on a fresh embedded
database, its stderr holding only the progress lines and the final summary (no log line of the
turns it runs interleaved with them), its results on stdout."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from inspector.evals.management.commands.eval import EXIT_BELOW_MIN_ACCURACY
from tests.conftest import REPO_ROOT

PROGRESS = re.compile(r"^\[\d+/\d+\] \d+% · \d+ passed · \d+ running( · \w+)?$")
SUITE = """\
name: terminal
models: [demo]
paradigms: [native, prompt_json]
servers: [demo]
cases:
  - {question: 'What is 2 + 2?', expect: [{tool: demo/calculate}]}
  - {question: 'What will the weather be like in Beijing tomorrow?', expect: [{tool: demo/calculate}]}
  - {question: 'Hello there', expect: []}
"""


def _manage(*args: str, var_dir: Path) -> subprocess.CompletedProcess[str]:
    # The embedded default: no DATABASE_URL or REDIS_URL, whatever the test run was given; the
    # log level the settings default to, so any INFO line would show.
    unset = ("DATABASE_URL", "REDIS_URL", "LOG_LEVEL")
    env = {name: value for name, value in os.environ.items() if name not in unset}
    env.update(VAR_DIR=str(var_dir), DJANGO_SETTINGS_MODULE="inspector.settings")
    env["DJANGO_SUPERUSER_PASSWORD"] = "a-password-for-this-test"
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_commands_stderr_holds_only_its_progress_lines_and_the_final_summary(tmp_path: Path) -> None:
    for setup in (
        ("migrate", "--verbosity", "0"),
        ("createsuperuser", "--noinput", "--username", "admin", "--email", "admin@example.com"),
    ):
        done = _manage(*setup, var_dir=tmp_path)
        assert done.returncode == 0, done.stderr
    suite = tmp_path / "terminal.yaml"
    suite.write_text(SUITE, encoding="utf-8")

    run = _manage("eval", "run", str(suite), "--min-accuracy", "1.0", "--concurrency", "2", var_dir=tmp_path)

    assert run.returncode == EXIT_BELOW_MIN_ACCURACY, run.stderr
    *progress, summary = run.stderr.splitlines()
    assert progress and all(PROGRESS.match(line) for line in progress), run.stderr
    assert progress[-1] == "[6/6] 100% · 4 passed · 0 running · done"
    assert summary.startswith("CommandError: 2 cell(s) below the minimum accuracy 1.0"), run.stderr
    assert "native" in run.stdout and "wrong_tool 1" in run.stdout
