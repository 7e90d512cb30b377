"""``manage.py proxy key create|list|revoke``: the key printed once, alone on the last line; lists
show prefixes, never keys; a revoked key authenticates nothing. ``proxy stdio`` refuses to run
without a key or a command."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from conversations.proxy.keys import authenticate
from conversations.proxy.models import ProxyKey

pytestmark = pytest.mark.django_db


def _create(*args: str) -> str:
    out = StringIO()
    call_command("proxy", "key", "create", *args, stdout=out)
    return out.getvalue()


def test_a_key_is_printed_once_alone_on_the_last_line_and_stored_only_hashed() -> None:
    get_user_model().objects.create_user("alice")
    printed = _create("--user", "alice", "--name", "laptop", "--openai-upstream", "http://127.0.0.1:9/v1")
    raw = printed.strip().splitlines()[-1]
    key = authenticate(raw)
    assert key is not None and key.user.get_username() == "alice" and key.name == "laptop"
    assert key.openai_upstream == "http://127.0.0.1:9/v1"
    assert raw not in str(list(ProxyKey.objects.values()))
    listed = StringIO()
    call_command("proxy", "key", "list", "--user", "alice", stdout=listed)
    assert key.prefix in listed.getvalue() and raw not in listed.getvalue()


def test_a_key_revoked_by_its_prefix_authenticates_nothing() -> None:
    get_user_model().objects.create_user("alice")
    raw = _create("--user", "alice").strip().splitlines()[-1]
    key = authenticate(raw)
    assert key is not None
    call_command("proxy", "key", "revoke", key.prefix, stdout=StringIO())
    assert authenticate(raw) is None
    listed = StringIO()
    call_command("proxy", "key", "list", stdout=listed)
    assert "revoked" in listed.getvalue()


def test_unclear_requests_are_refused_with_what_to_do() -> None:
    get_user_model().objects.create_user("alice")
    with pytest.raises(CommandError, match="no user"):
        _create("--user", "nobody")
    _create("--user", "alice")
    _create("--user", "alice")
    with pytest.raises(CommandError, match="at least 6 characters"):
        call_command("proxy", "key", "revoke", "tci_")
    for number, key in enumerate(ProxyKey.objects.all()):
        ProxyKey.objects.filter(pk=key.pk).update(prefix=f"tci_same{number}")
    with pytest.raises(CommandError, match="2 keys match"):
        call_command("proxy", "key", "revoke", "tci_same")
    with pytest.raises(CommandError, match="no key"):
        call_command("proxy", "key", "revoke", "999999")
    with pytest.raises(CommandError, match="proxy key"):
        call_command("proxy", "stdio", "--name", "time", "--", "true")
    with pytest.raises(CommandError, match="command"):
        call_command("proxy", "stdio", "--key", "tci_x", "--name", "time")
