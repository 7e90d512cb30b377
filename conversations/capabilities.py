"""Learned capabilities: what a model's provider refused at run time, remembered on its profile
(so ``auto`` starts lower next time), shown with when and why, and reset from the profile page.

The demo model refuses only on request (a ``[demo:…]`` scenario in the question), so a refusal
of the demo model says nothing about the model: it is never remembered, and one user's scenario
never changes the shared demo profile for the others.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from conversations.models import AuditEvent, LearnedCapability, ModelProfile, Turn
from conversations.record.audit import audit_change
from conversations.redaction import Redactor

CAPABILITY_FIELDS = ("native_tools", "structured_output", "parallel_calls")
# The audit log's action for a reset.
CAPABILITY_RESET_ACTION = AuditEvent.Action.PROFILE_CAPABILITY_RESET


def capability_downgrades_remember(
    *, profile: ModelProfile, downgrades: Sequence[tuple[str, str]], turn: Turn, redact: Redactor
) -> list[str]:
    """Mark each refused capability 'no' on ``profile`` and keep when and why (the reason
    redacted); the capabilities changed. Nothing for the demo model (see the module's note)."""
    if profile.is_demo:
        return []
    changed = list(
        dict.fromkeys(capability for capability, _ in downgrades if capability in CAPABILITY_FIELDS)
    )
    if not changed:
        return []
    reasons = dict(downgrades)
    with transaction.atomic():
        for capability in changed:
            setattr(profile, capability, "no")
            LearnedCapability.objects.update_or_create(
                profile=profile,
                capability=capability,
                defaults={
                    "reason": redact.text(reasons[capability]),
                    "learned_at": timezone.now(),
                    "turn": turn,
                },
            )
        profile.save(update_fields=changed)
    return changed


def profile_capability_reset(
    *, profile: ModelProfile, capability: str, actor: AbstractBaseUser, via: str = "web"
) -> bool:
    """Forget that ``profile``'s model lacks ``capability``: back to unknown, so ``auto`` tries it
    again (and learns it again if the provider still refuses). False if nothing was learned.
    A reset is audited: who, when, and what was forgotten (the value, and when and why it had
    been learned)."""
    if capability not in CAPABILITY_FIELDS:
        return False
    with transaction.atomic():
        learned = (
            LearnedCapability.objects.select_for_update()
            .filter(profile=profile, capability=capability)
            .first()
        )
        if learned is None:
            return False
        before = ModelProfile.objects.filter(pk=profile.pk).values_list(capability, flat=True).first()
        learned.delete()
        ModelProfile.objects.filter(pk=profile.pk).update(**{capability: "unknown"})
        audit_change(
            actor=actor,
            action=CAPABILITY_RESET_ACTION,
            via=via,
            subject=profile.name,
            detail={
                "profile_id": profile.pk,
                "capability": capability,
                "before": before,
                "after": "unknown",
                "learned": {
                    "reason": learned.reason,
                    "learned_at": learned.learned_at.isoformat(),
                    "turn_id": learned.turn_id,
                },
            },
        )
    return True


def profiles_capabilities() -> list[ModelProfile]:
    """The profiles a user can pick (not the ones imports hang conversations off), each with its
    learned capabilities loaded."""
    return list(
        ModelProfile.objects.filter(imported_by=None)
        .select_related("price")
        .prefetch_related("learned_capabilities__turn")
    )


def profile_pickable(*, profile_id: int) -> ModelProfile | None:
    """One profile a user can pick, or None."""
    return ModelProfile.objects.filter(imported_by=None, pk=profile_id).first()
