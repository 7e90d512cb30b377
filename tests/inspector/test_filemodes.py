"""What the app writes under VAR_DIR is private: 0600 files in 0700 directories, on a fresh install
and on one an older version left readable by others."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from inspector.filemodes import var_dir_private

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
# A login shell's usual umask: the modes below must come from the app, not from the caller.
OPEN_UMASK = 0o022


def _manage(var_dir: Path, *args: str) -> None:
    env = {key: value for key, value in os.environ.items() if key not in {"DATABASE_URL", "REDIS_URL"}}
    env["VAR_DIR"] = str(var_dir)
    env.pop("ADMIN_PASSWORD", None)
    subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        umask=OPEN_UMASK,
    )


def _make_run_setup(var_dir: Path) -> None:
    """What `make run` does before it serves (the Makefile's `setup` target)."""
    _manage(var_dir, "migrate", "--noinput")
    _manage(var_dir, "setup_local", "--port", "8000")


def _modes(var_dir: Path) -> dict[str, int]:
    modes = {".": stat.S_IMODE(var_dir.stat().st_mode)}
    for path in var_dir.rglob("*"):
        modes[str(path.relative_to(var_dir))] = stat.S_IMODE(path.lstat().st_mode)
    return modes


def _open_to_others(modes: dict[str, int]) -> dict[str, str]:
    return {name: oct(mode) for name, mode in modes.items() if mode & 0o077}


@contextmanager
def _umask(mask: int) -> Iterator[None]:
    previous = os.umask(mask)
    try:
        yield
    finally:
        os.umask(previous)


def test_make_runs_setup_writes_var_readable_by_its_owner_only(tmp_path: Path) -> None:
    var_dir = tmp_path / "var"

    _make_run_setup(var_dir)

    modes = _modes(var_dir)
    assert {"inspector.sqlite3", "secret_key", "integrity_key", "admin-password", "staticfiles"} <= set(modes)
    assert _open_to_others(modes) == {}
    assert modes["."] == 0o700 and modes["staticfiles"] == 0o700
    assert modes["inspector.sqlite3"] == 0o600 and modes["admin-password"] == 0o600


def test_the_databases_wal_and_shm_files_take_the_databases_private_mode(tmp_path: Path) -> None:
    var_dir = tmp_path / "var"
    _make_run_setup(var_dir)
    database = var_dir / "inspector.sqlite3"

    # Another process with an open umask writes to it: SQLite creates the -wal and -shm files
    # with the database file's own mode.
    with _umask(OPEN_UMASK), sqlite3.connect(database) as connection:
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("CREATE TABLE written_by_another_process (x)")
        side_files = {
            name: stat.S_IMODE(Path(f"{database}{name}").stat().st_mode) for name in ("-wal", "-shm")
        }
    connection.close()

    assert side_files == {"-wal": 0o600, "-shm": 0o600}


def test_an_install_an_older_version_left_readable_is_narrowed_at_start(tmp_path: Path) -> None:
    var_dir = tmp_path / "var"
    _make_run_setup(var_dir)
    for path in [var_dir, *var_dir.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)  # what a umask of 022 used to give
    assert _open_to_others(_modes(var_dir))

    _manage(var_dir, "check")

    assert _open_to_others(_modes(var_dir)) == {}
    assert stat.S_IMODE((var_dir / "inspector.sqlite3").stat().st_mode) == 0o600


def test_a_shared_sticky_directory_is_not_narrowed(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    mine = shared / "someone-elses.txt"
    mine.write_text("x")
    mine.chmod(0o644)

    with _umask(OPEN_UMASK):
        var_dir_private(shared)

    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777
    assert stat.S_IMODE(mine.stat().st_mode) == 0o644


def test_a_private_var_dir_is_not_walked_at_start(tmp_path: Path) -> None:
    """Every process start (each ``manage.py`` command, web process, worker) calls it: once
    ``var/`` is 0700 nobody else can reach anything under it, so the tree is not walked again."""
    var_dir = tmp_path / "var"
    var_dir.mkdir(mode=0o700)
    var_dir.chmod(0o700)
    inner = var_dir / "left-open.txt"
    inner.write_text("x")
    inner.chmod(0o644)
    with _umask(OPEN_UMASK):
        var_dir_private(var_dir)

    assert stat.S_IMODE(inner.stat().st_mode) == 0o644
    assert stat.S_IMODE(var_dir.stat().st_mode) == 0o700
