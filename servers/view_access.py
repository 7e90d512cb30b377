"""What the asker may see: the look-ups the workbench views start with (who is asking:
``conversations.signed_in``)."""

from __future__ import annotations

from uuid import UUID

from django.http import Http404, HttpRequest

from conversations.signed_in import signed_in_user
from servers import selectors
from servers.models import Operation


def operation_or_404(request: HttpRequest, public_id: UUID) -> Operation:
    """The operation, if the signed-in user may see it; else 404."""
    try:
        return selectors.operation_get(user=signed_in_user(request), public_id=public_id)
    except Operation.DoesNotExist:
        raise Http404("No such operation.") from None
