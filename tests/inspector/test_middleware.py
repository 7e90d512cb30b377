"""Under ASGI (daphne) a request crosses from the event loop to its thread a few times, not once
per middleware method (``inspector.middleware``)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import SyncToAsync
from django.contrib.auth.models import User
from django.test import AsyncClient

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("async_db_connections")]


@pytest.fixture
def handovers(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The thread of every call handed from the event loop to a thread, in order."""
    seen: list[int] = []
    original = SyncToAsync.__call__

    async def counted(self: SyncToAsync[Any, Any], *args: Any, **kwargs: Any) -> Any:
        seen.append(threading.get_ident())
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(SyncToAsync, "__call__", counted)
    yield seen


async def test_a_page_crosses_to_its_thread_a_few_times_not_per_middleware(handovers: list[int]) -> None:
    user = await User.objects.acreate(username="alice")
    client = AsyncClient()
    await client.aforce_login(user)
    handovers.clear()

    response = await client.get("/")
    crossings = len(handovers)

    assert response.status_code == 200
    # The whole chain once; Django's own: the request signals' receivers, the view middleware
    # (CSRF, login required) and the view. With the chain in async mode: 16 here.
    assert 1 <= crossings <= 6, crossings
