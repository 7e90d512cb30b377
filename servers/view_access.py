"""What the asker may see and do: the look-ups the workbench views start with, and whether they
may act on what they see (who is asking: ``conversations.signed_in``)."""

from __future__ import annotations

from uuid import UUID

from django.http import Http404, HttpRequest

from conversations.selectors import may_act
from conversations.signed_in import signed_in_user
from servers import selectors
from servers.models import Operation


def operation_or_404(request: HttpRequest, public_id: UUID) -> Operation:
    """The operation, if the signed-in user may see it; else 404."""
    try:
        return selectors.operation_get(user=signed_in_user(request), public_id=public_id)
    except Operation.DoesNotExist:
        raise Http404("No such operation.") from None


def read_only_refusal(request: HttpRequest, *, owner_id: int | None, what: str) -> str | None:
    """Why the signed-in user may not ``what`` a row they see whose owner is ``owner_id`` (a
    viewer of the owner's team follows it read-only: a 403 that says so, not a 404, as the row
    is no secret to them); None when they may (``conversations.selectors.may_act``)."""
    if may_act(signed_in_user(request), owner_id):
        return None
    return f"You follow this read-only, as a viewer of its owner's team: you may not {what}."
