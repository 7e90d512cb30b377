"""Retention: delete conversations (and server-only records) older than a window, audited."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from django.db.models import Exists, OuterRef, QuerySet
from django.utils import timezone

from conversations.models import AuditEvent, Comparison, Conversation, Exchange, Step, Turn
from conversations.record.audit import audit_record
from conversations.typealias import JSONDict

# How many pruned conversation ids the report (and so the audit entry) lists by name.
LISTED_IDS = 100
_CHUNK = 500


@dataclass(frozen=True)
class PruneReport:
    """What a prune removed (or, on a dry run, would remove).

    ``exchanges`` are those of the pruned conversations; ``server_exchanges`` the server-only
    records (no turn) older than the cutoff. ``conversation_ids`` names at most ``LISTED_IDS``
    of the pruned conversations, oldest first; ``conversations`` is the full count.
    ``stderr_files`` are MCP servers' stderr files (``MCP_STDERR_DIR``) last written before the
    cutoff: what they hold was recorded then, with records that go too.
    """

    older_than_days: int
    cutoff: datetime
    dry_run: bool
    conversations: int
    turns: int
    steps: int
    exchanges: int
    server_exchanges: int
    comparisons: int
    conversation_ids: tuple[str, ...]
    stderr_files: int = 0

    def as_json(self) -> JSONDict:
        return {
            "older_than_days": self.older_than_days,
            "cutoff": self.cutoff.isoformat(),
            "dry_run": self.dry_run,
            "conversations": self.conversations,
            "turns": self.turns,
            "steps": self.steps,
            "exchanges": self.exchanges,
            "server_exchanges": self.server_exchanges,
            "comparisons": self.comparisons,
            "conversation_ids": list(self.conversation_ids),
            "conversation_ids_truncated": self.conversations > len(self.conversation_ids),
            "stderr_files": self.stderr_files,
        }


def _stale_stderr_files(cutoff: datetime) -> list[Path]:
    """stderr files of MCP servers not written to since ``cutoff``."""
    folder = Path(settings.MCP_STDERR_DIR)
    if not folder.is_dir():
        return []
    limit = cutoff.timestamp()
    stale = []
    for path in folder.glob("*.log"):
        try:
            if path.is_file() and path.stat().st_mtime < limit:
                stale.append(path)
        except OSError:
            continue  # removed meanwhile (another process pruning)
    return stale


def _stale_conversations(cutoff: datetime) -> QuerySet[Conversation]:
    """Created before the cutoff and no turn since: a conversation still in use is kept."""
    recent_turns = Turn.objects.filter(conversation=OuterRef("pk"), created_at__gte=cutoff)
    return Conversation.objects.filter(created_at__lt=cutoff).exclude(Exists(recent_turns))


def _chunks(ids: list[int]) -> list[list[int]]:
    return [ids[start : start + _CHUNK] for start in range(0, len(ids), _CHUNK)]


def conversations_prune(
    *, older_than_days: int, actor: AbstractBaseUser | None = None, dry_run: bool = False
) -> PruneReport:
    """Delete what is older than ``older_than_days`` days, and record it in the audit log.

    Goes: every conversation created before now − ``older_than_days`` that has had no turn
    since, with its turns, steps and exchanges; server-only exchanges (no turn) started before
    the cutoff; comparisons from before the cutoff left with no conversation. Audit events
    stay (they hold ids, not content). A real run writes one ``pruned`` audit event with the
    report, in the same transaction as the deletes; a dry run deletes and records nothing.

    Raises:
        ValueError: ``older_than_days`` is less than 1.
    """
    if older_than_days < 1:
        raise ValueError("the retention window must be at least one day")
    cutoff = timezone.now() - timedelta(days=older_than_days)
    with transaction.atomic():
        stale = list(_stale_conversations(cutoff).order_by("created_at", "pk").values_list("pk", "public_id"))
        ids = [pk for pk, _ in stale]
        still_used = Conversation.objects.filter(comparison=OuterRef("pk")).exclude(
            pk__in=_stale_conversations(cutoff).values("pk")
        )
        comparisons = list(
            Comparison.objects.filter(created_at__lt=cutoff)
            .exclude(Exists(still_used))
            .values_list("pk", flat=True)
        )
        server_only = Exchange.objects.filter(turn__isnull=True, started_at__lt=cutoff)
        stderr_files = _stale_stderr_files(cutoff)
        turns = steps = exchanges = 0
        for chunk in _chunks(ids):
            turns += Turn.objects.filter(conversation_id__in=chunk).count()
            steps += Step.objects.filter(turn__conversation_id__in=chunk).count()
            exchanges += Exchange.objects.filter(turn__conversation_id__in=chunk).count()
        report = PruneReport(
            older_than_days=older_than_days,
            cutoff=cutoff,
            dry_run=dry_run,
            conversations=len(ids),
            turns=turns,
            steps=steps,
            exchanges=exchanges,
            server_exchanges=server_only.count(),
            comparisons=len(comparisons),
            conversation_ids=tuple(str(public_id) for _, public_id in stale[:LISTED_IDS]),
            stderr_files=len(stderr_files),
        )
        if dry_run:
            return report
        for chunk in _chunks(ids):
            # Bottom up: exchanges and steps go in bulk instead of through the cascade collector.
            Exchange.objects.filter(turn__conversation_id__in=chunk).delete()
            Step.objects.filter(turn__conversation_id__in=chunk).delete()
            Conversation.objects.filter(pk__in=chunk).delete()
        server_only.delete()
        Comparison.objects.filter(pk__in=comparisons).delete()
        audit_record(actor=actor, action=AuditEvent.Action.PRUNED, detail=report.as_json())
        # Files go only once the records' deletion is committed.
        transaction.on_commit(lambda: _remove(stderr_files))
    return report


def _remove(paths: list[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)
