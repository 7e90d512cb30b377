"""API tokens that expire and that their owner can revoke.

A user has at most one token (DRF's ``authtoken``). It is refused once it is
``API_TOKEN_TTL_DAYS`` old (0: never), and ``POST /api/token`` then issues a fresh one.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone
from rest_framework.authentication import TokenAuthentication
from rest_framework.authtoken.models import Token
from rest_framework.exceptions import AuthenticationFailed


def token_expires_at(token: Token) -> datetime | None:
    """When ``token`` stops working; None when tokens do not expire."""
    if settings.API_TOKEN_TTL_DAYS <= 0:
        return None
    created: datetime = token.created
    return created + timedelta(days=settings.API_TOKEN_TTL_DAYS)


def token_is_expired(token: Token) -> bool:
    expires_at = token_expires_at(token)
    return expires_at is not None and expires_at <= timezone.now()


def token_get(*, user: User) -> Token | None:
    """The user's token, expired or not; None when they have none."""
    return Token.objects.filter(user=user).first()


def token_obtain(*, user: User) -> Token:
    """The user's current token: the existing one while it is valid, else a new one (the old is deleted)."""
    with transaction.atomic():
        token = Token.objects.select_for_update().filter(user=user).first()
        if token is not None and not token_is_expired(token):
            return token
        if token is not None:
            token.delete()
        return Token.objects.create(user=user)


def token_revoke(*, user: User) -> bool:
    """Delete the user's token; whether there was one."""
    deleted, _ = Token.objects.filter(user=user).delete()
    return deleted > 0


class ExpiringTokenAuthentication(TokenAuthentication):
    """``Authorization: Token …`` that refuses an expired token with a 401 saying so."""

    def authenticate_credentials(self, key: str) -> tuple[User, Token]:
        user, token = super().authenticate_credentials(key)
        if token_is_expired(token):
            raise AuthenticationFailed(
                f"Token expired on {token_expires_at(token):%Y-%m-%d %H:%M} UTC; "
                "POST your username and password to /api/token for a new one."
            )
        return user, token
