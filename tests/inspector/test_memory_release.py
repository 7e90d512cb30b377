"""Memory a big page or turn grew a process by goes back (inspector/memory.py): the garbage
cycles that hold what it read are collected and glibc's free pages returned, once the process
has grown by RELEASE_GROWTH_BYTES since it last looked."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from celery.signals import task_postrun
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from inspector import memory
from inspector.celery import TURN_TASK, app

MB = 1024 * 1024


class _Node:
    """Half of a reference cycle, as a prefetched step and its children are."""

    def __init__(self, payload: bytes | None) -> None:
        self.payload = payload
        self.other: _Node | None = None


def _garbage_cycle(megabytes: int) -> None:
    """``megabytes`` of memory held only by a reference cycle (freed by a collection alone)."""
    first, second = _Node(b"x" * (megabytes * MB)), _Node(None)
    first.other, second.other = second, first


@pytest.fixture
def no_automatic_collection() -> Iterator[None]:
    """Only an explicit collection frees a cycle during the test: what is measured is the release."""
    gc.collect()
    gc.disable()
    yield
    gc.enable()


@pytest.mark.usefixtures("no_automatic_collection")
def test_a_process_that_grew_collects_its_cycles_and_gives_the_memory_back() -> None:
    memory.release_if_grown()  # the level before
    before = memory.resident_bytes()
    _garbage_cycle(128)
    assert memory.resident_bytes() - before > 100 * MB

    assert memory.release_if_grown()
    assert memory.resident_bytes() - before < 16 * MB
    # Grown by nothing since: no collection is paid for.
    assert not memory.release_if_grown()


@pytest.mark.django_db
@pytest.mark.usefixtures("no_automatic_collection")
def test_a_delivered_page_gives_back_what_the_process_grew_by(django_user_model: type[User]) -> None:
    client = Client()
    client.force_login(django_user_model.objects.create_user("alice"))
    client.get(reverse("inspector-conversations"))
    memory.release_if_grown()
    before = memory.resident_bytes()
    _garbage_cycle(128)

    assert client.get(reverse("inspector-conversations")).status_code == 200

    assert memory.resident_bytes() - before < 16 * MB


@pytest.mark.usefixtures("no_automatic_collection")
def test_a_worker_gives_back_what_a_turn_task_grew_it_by() -> None:
    task = app.tasks[TURN_TASK]
    memory.release_if_grown()
    before = memory.resident_bytes()
    _garbage_cycle(128)

    # What a worker's pool sends once a turn task has returned.
    task_postrun.send(
        sender=task, task_id="t-1", task=task, args=(1,), kwargs={}, retval="done", state="SUCCESS"
    )

    assert memory.resident_bytes() - before < 16 * MB


def test_what_a_process_holds_once_started_is_out_of_the_collectors_walk() -> None:
    class Cycle:
        other: object = None

    kept = Cycle()
    kept.other = kept
    try:
        memory.freeze_what_started()
        assert gc.get_freeze_count() > 0
        # Made after: still collected when it becomes garbage.
        made = Cycle()
        made.other = made
        del made
        assert gc.collect() >= 1
    finally:
        gc.unfreeze()
