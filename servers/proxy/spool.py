"""The stdio proxy's spool: records kept on local disk while the database is unreachable.

One file per proxy process, ``VAR_DIR/proxy-spool/<fingerprint>-<pid>-<start>.jsonl`` (the
folder 0700, the file 0600), one JSON object per line: a ``WireExchange``'s fields plus the
``session`` and ``server_name`` they are recorded under. ``<fingerprint>`` is a hash of the key,
never the key, so a later proxy started with the same key imports what an earlier one left.

Records are redacted before they are written here (the one redactor), as on every write path.
A file is imported whole by one ``record_mcp`` call per session and server (it stores all or
nothing), then deleted; a crash between the two is the one way a record can be stored twice.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, fields
from datetime import datetime
from pathlib import Path

from conversations.loop.wire import WireExchange
from conversations.redaction import current as current_redactor

# Imports the records of one (session, server name); raises django.db.Error when it cannot.
Importer = Callable[[str | None, str, Sequence[WireExchange]], object]
_FIELDS = {item.name for item in fields(WireExchange)}


def fingerprint(raw_key: str) -> str:
    return hashlib.sha256(f"proxy-spool:{raw_key}".encode()).hexdigest()[:24]


def spool_dir(var_dir: Path) -> Path:
    folder = var_dir / "proxy-spool"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder.chmod(0o700)
    return folder


def redacted(record: WireExchange, secrets: tuple[str, ...]) -> WireExchange:
    """A copy of ``record`` fit to write to disk: bodies and headers through the redactor."""
    redactor = current_redactor()

    def clean(text: str) -> str:
        for secret in secrets:
            if secret and secret in text:
                text = text.replace(secret, "[REDACTED:secret]")
        return redactor.text(text)

    data = asdict(record)
    for name in ("request_body", "response_body", "error"):
        data[name] = clean(data[name])
    for name in ("request_headers", "response_headers"):
        data[name] = {key: clean(value) for key, value in data[name].items()}
    return WireExchange(**data)


class Spool:
    """The spool file of one proxy process (created on first write)."""

    def __init__(self, var_dir: Path, raw_key: str) -> None:
        self.folder = spool_dir(var_dir)
        self.prefix = fingerprint(raw_key)
        self.path = self.folder / f"{self.prefix}-{os.getpid()}-{time.time_ns()}.jsonl"

    def write(
        self,
        session: str | None,
        server_name: str,
        records: Sequence[WireExchange],
        *,
        path: Path | None = None,
    ) -> None:
        """Append ``records`` to the spool file (or to ``path``, a file of the spool's folder)."""
        descriptor = os.open(path or self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(descriptor, "a", encoding="utf-8", errors="surrogateescape") as out:
            for record in records:
                line = {**asdict(record), "started_at": record.started_at.isoformat()}
                line.update(session=session, server_name=server_name)
                out.write(json.dumps(line, ensure_ascii=True) + "\n")

    def pending(self) -> list[Path]:
        """Spool files of this key (this process's and any an earlier one left), oldest first."""
        return sorted(self.folder.glob(f"{self.prefix}-*.jsonl"), key=lambda path: path.stat().st_mtime)

    def import_all(self, importer: Importer) -> int:
        """Import every spool file of this key; returns how many records were imported.

        Raises:
            Whatever ``importer`` raises (the database is still unreachable): the file is kept,
            less what was imported.
        """
        count = 0
        for path in self.pending():
            groups: dict[tuple[str | None, str], list[WireExchange]] = {}
            for session, server_name, record in _read(path):
                groups.setdefault((session, server_name), []).append(record)
            # A file is the unit: rename it first so a second importer (another proxy of this
            # key starting now) cannot import it too.
            claimed = path.with_suffix(".importing")
            try:
                path.rename(claimed)
            except FileNotFoundError:
                continue
            done: list[tuple[str | None, str]] = []
            try:
                for (session, server_name), records in groups.items():
                    importer(session, server_name, records)
                    done.append((session, server_name))
                    count += len(records)
            except BaseException as exc:
                # Put back only what was not imported, so a retry stores nothing twice (an
                # importer that stored part of a group says which records it did not store).
                for group in done:
                    del groups[group]
                unstored = getattr(exc, "unstored", None)
                if isinstance(unstored, list) and groups:
                    groups[next(iter(groups))] = unstored
                self._rewrite(path, groups)
                claimed.unlink()
                raise
            claimed.unlink()
        return count

    def _rewrite(self, path: Path, groups: dict[tuple[str | None, str], list[WireExchange]]) -> None:
        keep = Spool.__new__(Spool)
        keep.folder, keep.prefix, keep.path = self.folder, self.prefix, path
        for (session, server_name), records in groups.items():
            keep.write(session, server_name, records)


def _read(path: Path) -> list[tuple[str | None, str, WireExchange]]:
    out: list[tuple[str | None, str, WireExchange]] = []
    with path.open(encoding="utf-8", errors="surrogateescape") as spooled:
        for text in spooled:
            try:
                data = json.loads(text)
            except ValueError:
                continue  # a line cut by a crash mid-write
            record = {key: value for key, value in data.items() if key in _FIELDS}
            record["started_at"] = datetime.fromisoformat(record["started_at"])
            out.append((data.get("session"), str(data.get("server_name", "")), WireExchange(**record)))
    return out
