"""Django's asynchronous handling (daphne's) renders an error page on a thread of the event loop's
executor, where no request starts or ends (``inspector.api_errors``): the page leaves that thread
no connection, and a connection the thread kept that the database has since ended does not turn
the 404 into a 500."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest
from asgiref.sync import sync_to_async
from django.db import connection, connections
from django.test import AsyncClient

from tests.factories import UserFactory
from tests.support import other_connection, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

NOT_FOUND = "/no-such-page/"


def _held() -> bool:
    return connection.connection is not None


def _opened() -> int:
    """Open this thread's connection (as an earlier use on it would have); its backend's pid."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        row = cursor.fetchone()
    assert row is not None
    return int(row[0])


def _ended(pid: int) -> None:
    """The server ends the backend ``pid``, as a restart ends every connection."""
    with other_connection() as admin:
        admin.autocommit = True
        admin.execute("SELECT pg_terminate_backend(%s)", [pid])
        assert wait_until(
            lambda: not admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone(), 10
        )


async def _pages(*, kept: str) -> tuple[list[int], bool]:
    """alice's 404 pages on a loop whose executor has one thread, which first keeps a connection
    (``kept``: "none", "open" or "ended"); the pages' statuses and whether the thread holds a
    connection after them."""
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=1))
    client = AsyncClient()
    await client.aforce_login(await sync_to_async(UserFactory)(username="alice"))
    if kept != "none":
        pid = await sync_to_async(_opened, thread_sensitive=False)()
        if kept == "ended":
            await sync_to_async(_ended)(pid)
    statuses = [(await client.get(NOT_FOUND)).status_code for _ in range(2)]
    held = await sync_to_async(_held, thread_sensitive=False)()
    # The test client's own thread (its sign-in, the request's middleware) is the test's to close.
    await sync_to_async(connections.close_all)()
    return statuses, held


def test_a_404_page_leaves_the_thread_it_was_rendered_on_no_connection() -> None:
    statuses, held = asyncio.run(_pages(kept="none"))

    assert statuses == [404, 404]
    assert not held


@pytest.mark.postgres
def test_a_404_page_hands_back_a_connection_its_thread_kept() -> None:
    statuses, held = asyncio.run(_pages(kept="open"))

    assert statuses == [404, 404]
    assert not held


@pytest.mark.postgres
def test_a_404_page_is_rendered_on_a_thread_whose_connection_the_database_ended() -> None:
    statuses, held = asyncio.run(_pages(kept="ended"))

    assert statuses == [404, 404]
    assert not held
