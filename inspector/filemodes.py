"""What the app writes is its own: created private, and what an older version left open narrowed.

Settings call ``var_dir_private`` before anything else is written, and every entry point
(``manage.py``, ``asgi.py``, ``wsgi.py``, the Celery app) loads the settings first, so the umask
holds for the whole process: the SQLite database and its ``-wal``/``-shm`` files, the keys,
logs, exports and the spawned stdio servers' files. Settings import this module before Django is
set up, so it imports nothing from Django.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

PRIVATE_UMASK = 0o077


def var_dir_private(path: Path) -> Path:
    """``path`` created (or found) readable by the owner only, with everything under it.

    Sets the process umask to 0077 first, so every file and directory the process creates from
    then on is 0600/0700. A tree an older version wrote with wider modes (0644 files in a 0755
    directory) is narrowed once, at start: a ``path`` that is already private is not walked (no
    one else can reach anything under it, whatever its modes), so a start costs one ``stat``.
    Only entries this user owns are changed, and a shared sticky directory (such as /tmp, if
    VAR_DIR were pointed at it) is left as it is.
    """
    os.umask(PRIVATE_UMASK)
    path.mkdir(parents=True, exist_ok=True)
    if not _narrowable(path) or not stat.S_IMODE(path.stat().st_mode) & 0o077:
        return path
    _narrow(path)
    for root, directories, files in os.walk(path):
        for name in [*directories, *files]:
            _narrow(Path(root) / name)
    return path


def _narrowable(path: Path) -> bool:
    status = path.stat()
    return status.st_uid == os.geteuid() and not status.st_mode & stat.S_ISVTX


def _narrow(path: Path) -> None:
    """Take away the group's and others' bits; the owner's stay (0644 → 0600, 0755 → 0700)."""
    with contextlib.suppress(OSError):  # gone meanwhile, or not ours
        status = path.lstat()
        if stat.S_ISLNK(status.st_mode) or status.st_uid != os.geteuid():
            return
        mode = stat.S_IMODE(status.st_mode)
        if mode & 0o077:
            path.chmod(mode & 0o700)
