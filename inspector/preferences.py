"""A user's display preferences (teaching mode, colour scheme, class view): read for every page,
written by the header's switches."""

from __future__ import annotations

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.http import HttpRequest

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
    *,
    user: AbstractBaseUser,
    teaching: bool | None = None,
    theme: str | None = None,
    class_view: bool | None = None,
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
    if class_view is not None:
        fields["class_view"] = class_view
    preference, _ = UserPreference.objects.update_or_create(user_id=user.pk, defaults=fields)
    return preference


_CACHED = "_inspector_preferences"


def request_preferences(request: HttpRequest) -> UserPreference:
    """The signed-in user's preferences, read once per request."""
    cached = getattr(request, _CACHED, None)
    if isinstance(cached, UserPreference):
        return cached
    user = getattr(request, "user", None)
    found = preference_get(user=user) if user is not None else UserPreference()
    setattr(request, _CACHED, found)
    return found


def teaching_context(request: HttpRequest) -> dict[str, bool]:
    """Context processor: ``teaching`` — whether the page renders the teaching layer at all (a
    user with teaching mode off gets pages without it; docs/teaching.md §1)."""
    return {"teaching": request_preferences(request).teaching}
