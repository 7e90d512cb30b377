"""Who is asking: the one check every view of the workbench (``inspector``, ``servers``) starts
with. Here, below both, because ``servers`` may not import ``inspector`` (the layers test)."""

from __future__ import annotations

from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest


def signed_in_user(request: HttpRequest) -> AbstractBaseUser:
    """The signed-in user; anyone else (anonymous, or no authentication ran at all): 403.

    ``LoginRequiredMiddleware`` lets no one else reach a view, so this mostly narrows the type;
    the refusal is what a view gets if a route is ever opened to anonymous users by mistake."""
    user = getattr(request, "user", None)
    if not isinstance(user, AbstractBaseUser) or not user.is_authenticated:
        raise PermissionDenied
    return user
