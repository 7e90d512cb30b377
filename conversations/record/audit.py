"""Writes to the audit log (``AuditEvent``): who read which conversation, and who changed what.

Two kinds of entry. A *read* says a user was shown a conversation's full record (its page, a
turn or its rows, a catch-up, a whole body, a prompt, the API transcript); reads are folded: a
user reading the same thing of the same conversation again within ``READ_AUDIT_WINDOW_SECONDS``
(default 300) adds nothing, because the live page re-fetches its rows on every doorbell and
would otherwise write a row per step. A *change* (a server registered, edited, enabled,
disabled or deleted; a model profile's prices set or a learned capability reset) is always
written, with what it was before and after.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.utils import timezone

from conversations.models import AuditEvent, Conversation
from conversations.typealias import JSONDict

READ_AUDIT_WINDOW_SECONDS: float = getattr(settings, "READ_AUDIT_WINDOW_SECONDS", 300.0)


def audit_read(
    *,
    actor: AbstractBaseUser,
    conversation: Conversation,
    via: str,
    subject: str = "",
    detail: JSONDict | None = None,
) -> AuditEvent | None:
    """Record that ``actor`` was shown ``conversation``'s record through ``via`` (an "opened" entry).

    ``subject`` names the part read when it is not the whole (``"turn 12"``, ``"exchange 40
    response"``): a different subject is a different read. Returns the new entry, or None when
    the same read (actor, conversation, via, subject) was recorded within the window. Two
    requests racing past the check may both write: the window bounds cost, not exactness.
    """
    since = timezone.now() - timedelta(seconds=READ_AUDIT_WINDOW_SECONDS)
    repeated = AuditEvent.objects.filter(
        conversation_public_id=conversation.public_id,
        actor_id=actor.pk,
        action=AuditEvent.Action.OPENED,
        via=via,
        subject=subject,
        at__gte=since,
    ).exists()
    if repeated:
        return None
    return AuditEvent.objects.create(
        actor_id=actor.pk,
        actor_name=actor.get_username(),
        action=AuditEvent.Action.OPENED,
        conversation_public_id=conversation.public_id,
        via=via,
        subject=subject,
        detail={"via": via, **(detail or {})},
    )


def audit_reads(
    *,
    actor: AbstractBaseUser,
    conversations: Iterable[Conversation],
    via: str,
    subject: str = "",
    detail: JSONDict | None = None,
) -> int:
    """``audit_read`` for many conversations shown at once (a comparison, an eval run's results),
    in two queries however many there are; returns how many entries were written (a read of the
    same thing within the window is folded, as there)."""
    by_id = {conversation.public_id: conversation for conversation in conversations}
    if not by_id:
        return 0
    since = timezone.now() - timedelta(seconds=READ_AUDIT_WINDOW_SECONDS)
    recent = set(
        AuditEvent.objects.filter(
            conversation_public_id__in=list(by_id),
            actor_id=actor.pk,
            action=AuditEvent.Action.OPENED,
            via=via,
            subject=subject,
            at__gte=since,
        ).values_list("conversation_public_id", flat=True)
    )
    entries = [
        AuditEvent(
            actor_id=actor.pk,
            actor_name=actor.get_username(),
            action=AuditEvent.Action.OPENED,
            conversation_public_id=public_id,
            via=via,
            subject=subject,
            detail={"via": via, **(detail or {})},
        )
        for public_id in by_id
        if public_id not in recent
    ]
    AuditEvent.objects.bulk_create(entries)
    return len(entries)


def audit_change(
    *,
    actor: AbstractBaseUser | None,
    actor_name: str = "",
    action: str,
    via: str,
    subject: str,
    detail: JSONDict,
) -> AuditEvent:
    """Record a change made by ``actor`` (None: the system; ``actor_name`` then says who ran it)."""
    return AuditEvent.objects.create(
        actor_id=actor.pk if actor is not None else None,
        actor_name=actor.get_username() if actor is not None else (actor_name or "system"),
        action=action,
        via=via,
        subject=subject,
        detail={"via": via, **detail},
    )


def audit_record(
    *,
    actor: AbstractBaseUser | None,
    action: str,
    conversation: Conversation | None = None,
    detail: JSONDict | None = None,
) -> AuditEvent:
    """Write one read-audit entry (opened, exported, imported, pruned)."""
    return AuditEvent.objects.create(
        actor_id=actor.pk if actor is not None else None,
        actor_name=actor.get_username() if actor is not None else "system",
        action=action,
        conversation_public_id=conversation.public_id if conversation is not None else None,
        detail=detail or {},
    )
