"""Retention removes MCP servers' stderr files together with the records made from them."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from conversations.record.retention import conversations_prune

DAY = 24 * 3600


def _stderr_file(age_days: float) -> Path:
    folder = Path(settings.MCP_STDERR_DIR)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"retention-{uuid.uuid4().hex}-1-1.log"
    path.write_text("a server said something\n")
    then = time.time() - age_days * DAY
    os.utime(path, (then, then))
    return path


@pytest.mark.django_db
def test_a_prune_removes_stderr_files_last_written_before_the_cutoff(
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    old, recent = _stderr_file(10), _stderr_file(1)

    with django_capture_on_commit_callbacks(execute=True):
        report = conversations_prune(older_than_days=7)

    assert not old.exists()
    assert recent.exists()
    assert report.stderr_files >= 1
    assert report.as_json()["stderr_files"] == report.stderr_files


@pytest.mark.django_db
def test_a_dry_run_counts_stale_stderr_files_and_keeps_them(
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    old = _stderr_file(10)

    with django_capture_on_commit_callbacks(execute=True):
        report = conversations_prune(older_than_days=7, dry_run=True)

    assert old.exists()
    assert report.stderr_files >= 1
    old.unlink()
