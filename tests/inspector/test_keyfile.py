"""Key files: created whole with mode 0600, and one key wins when processes start at once."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from inspector.keyfile import key_file_read_or_create

REPO_ROOT = Path(__file__).resolve().parents[2]
RACERS = 8
# Each racer imports first, then waits for the word on stdin, so all of them create at once.
RACER = """
import sys
from pathlib import Path
from inspector.keyfile import key_file_read_or_create
sys.stdin.readline()
print(key_file_read_or_create(Path(sys.argv[1])))
"""


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_key_file_is_private_and_holds_a_long_random_key(tmp_path: Path) -> None:
    path = tmp_path / "secret_key"

    key = key_file_read_or_create(path)

    assert _mode(path) == 0o600
    assert len(key) >= 50 and len(set(key)) >= 5
    assert path.read_text() == key
    assert key_file_read_or_create(path) == key
    assert sorted(os.listdir(tmp_path)) == ["secret_key"]  # no temporary file left behind


def test_the_file_is_private_even_under_a_permissive_umask(tmp_path: Path) -> None:
    previous = os.umask(0)
    try:
        key_file_read_or_create(tmp_path / "secret_key")
    finally:
        os.umask(previous)

    assert _mode(tmp_path / "secret_key") == 0o600


def test_an_existing_world_readable_key_file_is_narrowed_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "secret_key"
    path.write_text("an-older-key-written-by-an-older-version\n")
    path.chmod(0o644)

    assert key_file_read_or_create(path) == "an-older-key-written-by-an-older-version"
    assert _mode(path) == 0o600


def test_a_process_that_loses_the_race_returns_the_winners_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "secret_key"
    real_link = os.link
    published: list[tuple[str, int]] = []

    def winner_publishes_first(source: str, destination: Path) -> None:
        # What this process is about to publish is already whole and private...
        published.append((Path(source).read_text(), _mode(Path(source))))
        # ...and another process publishes its key just before it does.
        path.write_text("the-winners-key")
        real_link(source, destination)

    monkeypatch.setattr(os, "link", winner_publishes_first)

    assert key_file_read_or_create(path) == "the-winners-key"
    assert len(published[0][0]) == 64 and published[0][1] == 0o600
    assert sorted(os.listdir(tmp_path)) == ["secret_key"]


def test_processes_starting_at_once_all_use_the_one_key_that_won(tmp_path: Path) -> None:
    for attempt in range(3):
        path = tmp_path / f"secret_key_{attempt}"
        racers = [
            subprocess.Popen(
                [sys.executable, "-c", RACER, str(path)],
                cwd=REPO_ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(RACERS)
        ]
        for racer in racers:
            assert racer.stdin is not None
            racer.stdin.write("go\n")
            racer.stdin.flush()
        keys = {racer.communicate(timeout=60)[0].strip() for racer in racers}

        assert all(racer.returncode == 0 for racer in racers)
        assert keys == {path.read_text()}
        assert _mode(path) == 0o600
    assert len(os.listdir(tmp_path)) == 3


def test_settings_keep_the_generated_secret_key_private(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if key not in {"SECRET_KEY", "SECRET_KEY_FILE"}}
    env.update(VAR_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="inspector.settings")
    script = "from django.conf import settings; print(settings.SECRET_KEY)"

    printed = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=True
    ).stdout.strip()

    assert printed == (tmp_path / "secret_key").read_text()
    assert _mode(tmp_path / "secret_key") == 0o600


def _settings_value(tmp_path: Path, expression: str, **extra: str) -> str:
    env = {key: value for key, value in os.environ.items() if not key.startswith("INTEGRITY_KEY")}
    env.update(VAR_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="inspector.settings", **extra)
    script = f"from django.conf import settings; print({expression})"
    return subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=True
    ).stdout.strip()


def test_settings_generate_the_integrity_key_in_a_private_file_under_var(tmp_path: Path) -> None:
    printed = _settings_value(tmp_path, "settings.INTEGRITY_KEY, settings.INTEGRITY_KEY_FILE")

    path = tmp_path / "integrity_key"
    assert printed == f"{path.read_text()} {path}"
    assert len(path.read_text()) == 64 and _mode(path) == 0o600


def test_settings_read_the_integrity_key_from_the_file_or_the_value_they_are_given(tmp_path: Path) -> None:
    given = tmp_path / "mounted_secret"
    given.write_text("a key from a mounted secret\n")

    from_file = _settings_value(tmp_path, "settings.INTEGRITY_KEY", INTEGRITY_KEY_FILE=str(given))
    from_value = _settings_value(tmp_path, "settings.INTEGRITY_KEY", INTEGRITY_KEY="a key given as it is")

    assert from_file == "a key from a mounted secret"
    assert from_value == "a key given as it is"
    assert not (tmp_path / "integrity_key").exists()
