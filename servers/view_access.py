"""Who is asking, and what they may see: the look-ups every workbench view starts with."""

from __future__ import annotations

from uuid import UUID

from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest

from servers import selectors
from servers.models import Operation


def signed_in_user(request: HttpRequest) -> AbstractBaseUser:
    """The signed-in user (anyone else: 403)."""
    user = request.user
    if not isinstance(user, AbstractBaseUser) or not user.is_authenticated:
        raise PermissionDenied
    return user


def operation_or_404(request: HttpRequest, public_id: UUID) -> Operation:
    """The operation, if the signed-in user may see it; else 404."""
    try:
        return selectors.operation_get(user=signed_in_user(request), public_id=public_id)
    except Operation.DoesNotExist:
        raise Http404("No such operation.") from None
