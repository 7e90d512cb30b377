"""A workbench operation never shows as running forever: one whose process ended without finishing
it (a web server or `manage.py server` killed mid-call) is ended by the stale check that every
serving process runs (``conversations.lifecycle``), with the reason, and its unanswered requests
are marked as never answered."""

from __future__ import annotations

import socket
import subprocess
import sys
from datetime import timedelta

import pytest
from django.utils import timezone

from conversations.lifecycle import _check_stale, runner_name
from conversations.models import Exchange
from servers import services
from servers.models import Operation
from servers.operations import LONGEST_OPERATION_SECONDS, operations_end_stale
from tests.factories import ExchangeFactory

pytestmark = pytest.mark.django_db


def _dead_runner() -> str:
    """The runner name of a process of this host that has ended."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return f"{socket.gethostname()}:{process.pid}:boot"


def _running(runner: str, **fields: object) -> Operation:
    server = services.demo_server_ensure()
    return Operation.objects.create(
        server=server, kind=Operation.Kind.TOOLS_CALL, target="calculate", runner=runner, **fields
    )


def test_an_operation_whose_process_ended_is_ended_with_the_reason_by_the_stale_check() -> None:
    operation = _running(_dead_runner())
    pending = ExchangeFactory(mcp=True, step=None, turn=None, server=operation.server, status="pending")
    operation.exchanges.add(pending)

    _check_stale()  # what every serving process runs on its beat

    operation.refresh_from_db()
    pending.refresh_from_db()
    assert operation.status == Operation.Status.ERROR
    assert "ended before it finished" in operation.error and operation.runner in operation.error
    assert operation.finished_at is not None
    assert pending.status == "no response"


def test_an_operation_of_a_live_process_is_left_alone() -> None:
    here = _running(runner_name())
    elsewhere = _running("another-host:123:boot")

    assert operations_end_stale() == []

    assert {o.status for o in Operation.objects.filter(pk__in=[here.pk, elsewhere.pk])} == {"running"}


def test_an_operation_of_another_host_running_longer_than_any_may_is_ended() -> None:
    old = timezone.now() - timedelta(seconds=LONGEST_OPERATION_SECONDS + 1)
    operation = _running("another-host:123:boot", started_at=old)

    assert operations_end_stale() == [operation.pk]

    operation.refresh_from_db()
    assert operation.status == Operation.Status.ERROR
    assert "longer than" in operation.error
    assert not Exchange.objects.filter(status="pending").exists()


def test_an_operation_records_the_process_that_runs_it() -> None:
    operation = services.operation_start(
        server=services.demo_server_ensure(), user=None, kind=Operation.Kind.TOOLS_LIST, source="cli"
    )

    assert operation.runner == runner_name()
