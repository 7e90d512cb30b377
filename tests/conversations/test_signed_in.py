"""The one check every view makes of who is asking (``conversations.signed_in``): the signed-in
user, anyone else refused; and no view package keeps a copy of its own."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import PermissionDenied
from django.test import RequestFactory

from conversations.signed_in import signed_in_user

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
# The check itself, however its names are spelled: an isinstance of the user model's base and
# is_authenticated, the two together.
CHECK = re.compile(
    r"isinstance\(\s*\w+(\.user)?\s*,\s*AbstractBaseUser\s*\)\s+or\s+not\s+\w+(\.user)?\.is_authenticated"
)


@pytest.mark.django_db
def test_the_signed_in_user_is_given_back_and_anyone_else_is_refused() -> None:
    alice = get_user_model().objects.create_user("alice")
    request = RequestFactory().get("/")
    request.user = alice
    assert signed_in_user(request) == alice
    request.user = AnonymousUser()
    with pytest.raises(PermissionDenied):
        signed_in_user(request)
    del request.user  # no authentication middleware ran: refused too, not an AttributeError
    with pytest.raises(PermissionDenied):
        signed_in_user(request)


def test_the_check_is_written_once() -> None:
    copies = [
        str(path.relative_to(REPO_ROOT))
        for package in ("conversations", "servers", "inspector")
        for path in sorted((REPO_ROOT / package).rglob("*.py"))
        if CHECK.search(path.read_text())
    ]
    assert copies == ["conversations/signed_in.py"]
