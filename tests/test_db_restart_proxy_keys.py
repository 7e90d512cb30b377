"""The LLM proxy's key look-up (``conversations.proxy.llm.key_for``) runs on a thread of the event
loop's executor, where no request starts or ends: it leaves that thread no connection, and a
connection the thread kept that the database has since dropped does not fail it."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest
from asgiref.sync import sync_to_async
from django.db import connection

from conversations.proxy import keys, llm
from conversations.proxy.models import ProxyKey
from tests.factories import UserFactory
from tests.support import other_connection, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def _new_key() -> str:
    _, raw = keys.create_key(UserFactory(username="alice"), openai_upstream="http://127.0.0.1:9/v1")
    keys.RECENT.forget(keys.key_hash(raw))  # looked up in the database, not the process's cache
    return raw


def _held() -> bool:
    return connection.connection is not None


def _opened() -> int:
    """Open this thread's connection (as a page rendered here before would have); its backend."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        row = cursor.fetchone()
    assert row is not None
    return int(row[0])


async def _on_one_thread(raw: str, *, drop: bool) -> tuple[ProxyKey | None, bool]:
    """On a loop whose executor has one thread: a connection opened there (and, with ``drop``,
    ended by the server, as a restart ends every one), then the key looked up; the key, and
    whether the thread still holds a connection after."""
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=1))
    pid = await sync_to_async(_opened, thread_sensitive=False)()
    if drop:
        with other_connection() as admin:
            admin.autocommit = True
            admin.execute("SELECT pg_terminate_backend(%s)", [pid])
            assert wait_until(
                lambda: not admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone(),
                10,
            )
    key = await llm.key_for(raw)
    return key, await sync_to_async(_held, thread_sensitive=False)()


@pytest.mark.postgres
def test_a_key_is_found_on_a_thread_whose_connection_the_database_ended() -> None:
    raw = _new_key()

    key, held = asyncio.run(_on_one_thread(raw, drop=True))

    assert key is not None and key.user.username == "alice"
    assert not held


@pytest.mark.postgres
def test_a_key_look_up_leaves_its_thread_no_connection() -> None:
    raw = _new_key()

    key, held = asyncio.run(_on_one_thread(raw, drop=False))

    assert key is not None
    assert not held
