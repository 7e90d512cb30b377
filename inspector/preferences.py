"""A user's display preferences (teaching mode, colour scheme): read for every page, written by
the header's switches."""

from __future__ import annotations

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser

from conversations.models import UserPreference

THEMES = tuple(UserPreference.Theme.values)


def preference_get(*, user: AbstractBaseUser | AnonymousUser) -> UserPreference:
    """The user's preferences; the defaults (unsaved) for a user who never changed one or nobody
    signed in."""
    if not user.is_authenticated:
        return UserPreference()
    found = UserPreference.objects.filter(user_id=user.pk).first()
    return found if found is not None else UserPreference(user_id=user.pk)


def preference_set(
    *, user: AbstractBaseUser, teaching: bool | None = None, theme: str | None = None
) -> UserPreference:
    """Change what is given (None: leave as it is) and keep it.

    Raises:
        ValueError: ``theme`` is not one of :data:`THEMES`.
    """
    if theme is not None and theme not in THEMES:
        raise ValueError(f"theme must be one of {', '.join(THEMES)}")
    fields: dict[str, object] = {}
    if teaching is not None:
        fields["teaching"] = teaching
    if theme is not None:
        fields["theme"] = theme
    preference, _ = UserPreference.objects.update_or_create(user_id=user.pk, defaults=fields)
    return preference
