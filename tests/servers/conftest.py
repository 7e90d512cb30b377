"""Fixtures of the workbench tests: operations run inline, people."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User

from servers import gateway


@pytest.fixture
def workbench(settings: Any) -> Iterator[None]:
    """Workbench operations run in the request's own thread (no polling needed)."""
    settings.WORKBENCH_RUNNER = "inline"
    yield
    gateway.close_all()


@pytest.fixture
def alice(db: None) -> User:
    """Staff: may register servers and respawn stdio ones."""
    return User.objects.create_user("alice", password="pw", is_staff=True)


@pytest.fixture
def bob(db: None) -> User:
    """A signed-in user without staff rights."""
    return User.objects.create_user("bob", password="pw")
