"""Retention: ``conversations_prune``, the ``prune`` command and the Celery beat task."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.conf import LazySettings
from django.core.management import CommandError, call_command
from django.utils import timezone

from conversations.models import AuditEvent, Comparison, Conversation, Exchange, Step, Turn
from conversations.record.audit import audit_record
from conversations.record.retention import conversations_prune
from conversations.tasks import prune_conversations
from tests.conftest import REPO_ROOT
from tests.factories import (
    ComparisonFactory,
    ConversationFactory,
    ExchangeFactory,
    StepFactory,
    TurnFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db


def _conversation(*, days_old: float, **fields: Any) -> Conversation:
    """A conversation created ``days_old`` days ago with one turn: a decide step, a tool step, two exchanges."""
    created = timezone.now() - timedelta(days=days_old)
    conversation: Conversation = ConversationFactory(created_at=created, **fields)
    turn = TurnFactory(conversation=conversation, created_at=created)
    decide = StepFactory(turn=turn)
    ExchangeFactory(step=decide, started_at=created)
    ExchangeFactory(mcp=True, step=StepFactory(parent=decide, kind="tool"), started_at=created)
    return conversation


def _exists(conversation: Conversation) -> bool:
    return Conversation.objects.filter(pk=conversation.pk).exists()


def test_prune_deletes_conversations_older_than_the_window_with_everything_in_them() -> None:
    old = _conversation(days_old=40)
    recent = _conversation(days_old=5)

    report = conversations_prune(older_than_days=30)

    assert not _exists(old) and _exists(recent)
    assert not Turn.objects.filter(conversation_id=old.pk).exists()
    assert not Step.objects.filter(turn__conversation_id=old.pk).exists()
    assert Exchange.objects.count() == 2  # the recent conversation's
    assert (report.conversations, report.turns, report.steps, report.exchanges) == (1, 1, 2, 2)
    assert report.conversation_ids == (str(old.public_id),)


def test_a_conversation_with_a_turn_inside_the_window_is_kept() -> None:
    old_but_active = _conversation(days_old=40)
    TurnFactory(conversation=old_but_active, created_at=timezone.now() - timedelta(days=1))

    report = conversations_prune(older_than_days=30)

    assert _exists(old_but_active) and report.conversations == 0


def test_a_dry_run_counts_but_deletes_and_records_nothing() -> None:
    old = _conversation(days_old=40)

    report = conversations_prune(older_than_days=30, dry_run=True)

    assert report.dry_run and (report.conversations, report.exchanges) == (1, 2)
    assert _exists(old) and Exchange.objects.count() == 2
    assert not AuditEvent.objects.exists()


def test_each_run_writes_one_audit_event_with_the_counts_and_the_window() -> None:
    old = _conversation(days_old=40)
    carol = UserFactory(username="carol")

    conversations_prune(older_than_days=30, actor=carol)

    event = AuditEvent.objects.get()
    assert (event.action, event.actor_name, event.conversation_public_id) == ("pruned", "carol", None)
    assert event.detail["older_than_days"] == 30 and event.detail["dry_run"] is False
    assert (event.detail["conversations"], event.detail["turns"], event.detail["exchanges"]) == (1, 1, 2)
    assert event.detail["conversation_ids"] == [str(old.public_id)]
    assert event.detail["conversation_ids_truncated"] is False


def test_audit_events_of_pruned_conversations_stay() -> None:
    old = _conversation(days_old=40)
    audit_record(actor=old.owner, action="opened", conversation=old)

    conversations_prune(older_than_days=30)

    assert AuditEvent.objects.filter(action="opened", conversation_public_id=old.public_id).exists()


def test_old_server_only_exchanges_are_pruned_and_recent_ones_kept() -> None:
    old = ExchangeFactory(step=None, mcp=True, started_at=timezone.now() - timedelta(days=40))
    recent = ExchangeFactory(step=None, mcp=True, started_at=timezone.now() - timedelta(days=2))
    assert old.turn is None

    report = conversations_prune(older_than_days=30)

    assert list(Exchange.objects.values_list("pk", flat=True)) == [recent.pk]
    assert report.server_exchanges == 1
    assert AuditEvent.objects.get().detail["server_exchanges"] == 1


def test_a_comparison_left_without_runs_goes_with_them() -> None:
    owner = UserFactory()
    created = timezone.now() - timedelta(days=40)
    emptied = ComparisonFactory(owner=owner, created_at=created)
    _conversation(days_old=40, owner=owner, comparison=emptied)
    still_used = ComparisonFactory(owner=owner, created_at=created)
    _conversation(days_old=40, owner=owner, comparison=still_used)
    TurnFactory(conversation=still_used.conversations.get(), created_at=timezone.now())

    report = conversations_prune(older_than_days=30)

    assert list(Comparison.objects.all()) == [still_used] and report.comparisons == 1


def test_a_window_under_one_day_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one day"):
        conversations_prune(older_than_days=0)


def test_the_prune_command_prints_the_counts() -> None:
    old = _conversation(days_old=40)
    out = StringIO()

    call_command("prune", "--older-than", "30", "--dry-run", stdout=out)
    assert out.getvalue().startswith("would delete 1 conversation(s) (1 turn(s), 2 step(s), 2 exchange(s))")
    assert _exists(old)

    call_command("prune", "--older-than", "30", stdout=out)
    assert "deleted 1 conversation(s)" in out.getvalue() and not _exists(old)
    assert AuditEvent.objects.get().actor_name == "system"


def test_the_prune_command_refuses_a_window_under_one_day() -> None:
    with pytest.raises(CommandError, match="at least 1 day"):
        call_command("prune", "--older-than", "0")


def test_the_beat_task_keeps_everything_when_retention_days_is_zero(settings: LazySettings) -> None:
    settings.RETENTION_DAYS = 0
    old = _conversation(days_old=4000)

    prune_conversations()

    assert _exists(old) and not AuditEvent.objects.exists()


def test_the_beat_task_prunes_with_the_configured_window(settings: LazySettings) -> None:
    settings.RETENTION_DAYS = 30
    old, recent = _conversation(days_old=40), _conversation(days_old=5)

    prune_conversations()

    assert not _exists(old) and _exists(recent)
    assert AuditEvent.objects.get().detail["older_than_days"] == 30


def _beat_schedule(retention_days: str | None) -> dict[str, Any]:
    env = {key: value for key, value in os.environ.items() if key != "RETENTION_DAYS"}
    if retention_days is not None:
        env["RETENTION_DAYS"] = retention_days
    script = (
        "import json, django; django.setup(); from inspector.celery import app; "
        "print(json.dumps({name: [entry['task'], str(entry['schedule'])] "
        "for name, entry in app.conf.beat_schedule.items()}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO_ROOT,
        env={**env, "DJANGO_SETTINGS_MODULE": "inspector.settings"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    schedule: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return schedule


def test_celery_beat_schedules_the_prune_daily_only_when_retention_is_set() -> None:
    assert _beat_schedule(None) == {}
    ((task, when),) = _beat_schedule("7").values()
    assert task == "conversations.tasks.prune_conversations"
    assert "30 3 * * *" in when
