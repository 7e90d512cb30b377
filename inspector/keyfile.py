"""Key files generated on first start: created whole, readable by the owner only, one winner.

Settings import this module before Django is set up, so it imports nothing from Django.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from pathlib import Path

KEY_FILE_MODE = 0o600


def key_file_read_or_create(path: Path) -> str:
    """The key stored in ``path``; on first use, a new random key written there.

    The key is written to a private temporary file (mode 0600 from its creation, never wider)
    in the same directory and published with ``os.link``, which fails if ``path`` exists: the
    file never appears half-written, and when several processes start at once exactly one
    key wins and every process returns it. A key file found with a wider mode (written by an
    older version) is narrowed to 0600.

    Raises:
        OSError: the directory is not writable, or the file cannot be read.
    """
    if not path.exists():
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(secrets.token_hex(32))
                handle.flush()
                os.fsync(handle.fileno())
            try:
                os.link(temporary, path)
            except FileExistsError:
                pass  # Another process published its key first: everyone uses that one.
        finally:
            os.unlink(temporary)
    if path.stat().st_mode & 0o777 != KEY_FILE_MODE:
        # Another user's file stays as it is: reading it below is the real test.
        with contextlib.suppress(PermissionError):
            path.chmod(KEY_FILE_MODE)
    return path.read_text().strip()
