"""Password guessing is throttled on the login page and on POST /api/token, per username and address."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from django.http import HttpResponse
from django.test import Client
from django.test.utils import override_settings
from rest_framework.authtoken.models import Token

from inspector import throttle
from tests.factories import PASSWORD, UserFactory

pytestmark = pytest.mark.django_db

LOGIN = "/accounts/login/"
TOKEN = "/api/token"
WINDOW = 900


class FakeClock:
    """Stands in for ``time`` in the throttle module, so a test can move to the next window."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0 + WINDOW / 2

    def time(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeClock]:
    fake = FakeClock()
    monkeypatch.setattr(throttle, "time", fake)
    with override_settings(
        LOGIN_THROTTLE_FAILURES=3, LOGIN_THROTTLE_ADDRESS_FAILURES=5, LOGIN_THROTTLE_WINDOW_SECONDS=WINDOW
    ):
        yield fake


def _unique(prefix: str) -> str:
    # Counters live in the shared cache (Redis in the Postgres pass): each test has its own keys.
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def alice() -> User:
    user: User = UserFactory(username=_unique("alice"))
    return user


def _address() -> str:
    """A client address no other test (or earlier run within the window) has used."""
    return f"2001:db8::{uuid.uuid4().hex[:4]}:{uuid.uuid4().hex[:4]}"


@pytest.fixture
def address() -> str:
    return _address()


def _login(username: str, password: str, address: str) -> HttpResponse:
    response: HttpResponse = Client(REMOTE_ADDR=address).post(
        LOGIN, {"username": username, "password": password}
    )
    return response


def test_after_three_failed_logins_even_the_right_password_gets_429_until_the_window_ends(
    alice: User, address: str, clock: FakeClock
) -> None:
    for _ in range(3):
        assert _login(alice.username, "guess", address).status_code == 200  # the form again, with an error

    refused = _login(alice.username, PASSWORD, address)

    assert refused.status_code == 429
    assert 0 < int(refused["Retry-After"]) <= WINDOW
    assert int(refused["Retry-After"]) == WINDOW / 2
    assert "Too many failed sign-in attempts" in refused.content.decode()
    assert "_auth_user_id" not in refused.client.session
    clock.now += WINDOW
    assert _login(alice.username, PASSWORD, address).status_code == 302


def test_the_username_is_throttled_from_every_address(alice: User) -> None:
    for _ in range(3):
        _login(alice.username, "guess", _address())

    assert _login(alice.username, PASSWORD, _address()).status_code == 429


def test_one_address_guessing_many_usernames_is_throttled_but_others_are_not(
    alice: User, address: str
) -> None:
    for _ in range(5):
        _login(_unique("nobody"), "guess", address)

    assert _login(alice.username, PASSWORD, address).status_code == 429
    assert _login(alice.username, PASSWORD, _address()).status_code == 302


def test_successful_logins_are_not_counted(alice: User, address: str) -> None:
    for _ in range(5):
        assert _login(alice.username, PASSWORD, address).status_code == 302


def test_the_username_counter_ignores_case_and_surrounding_spaces(alice: User) -> None:
    for variant in (alice.username.upper(), f" {alice.username}", alice.username.title()):
        _login(variant, "guess", _address())

    assert _login(alice.username, PASSWORD, _address()).status_code == 429


def test_token_creation_is_throttled_with_a_json_429_and_retry_after(alice: User, address: str) -> None:
    client = Client(REMOTE_ADDR=address)
    for _ in range(3):
        assert client.post(TOKEN, {"username": alice.username, "password": "guess"}).status_code == 400

    refused = client.post(TOKEN, {"username": alice.username, "password": PASSWORD})

    assert refused.status_code == 429
    assert int(refused["Retry-After"]) == WINDOW / 2
    assert "Too many failed sign-in attempts" in refused.json()["detail"]
    assert not Token.objects.filter(user=alice).exists()


def test_failed_logins_and_failed_token_requests_share_one_count(alice: User, address: str) -> None:
    _login(alice.username, "guess", address)
    client = Client(REMOTE_ADDR=address)
    client.post(TOKEN, {"username": alice.username, "password": "guess"})
    client.post(TOKEN, {"username": alice.username, "password": "guess"}, content_type="application/json")

    assert _login(alice.username, PASSWORD, address).status_code == 429
    assert client.post(TOKEN, {"username": alice.username, "password": PASSWORD}).status_code == 429


def test_behind_a_proxy_the_configured_header_names_the_client(alice: User) -> None:
    proxy, guesser, other = _address(), _address(), _address()
    with override_settings(CLIENT_IP_HEADER="X-Real-IP"):
        for _ in range(5):
            Client(REMOTE_ADDR=proxy, HTTP_X_REAL_IP=guesser).post(
                LOGIN, {"username": _unique("nobody"), "password": "guess"}
            )
        blocked = Client(REMOTE_ADDR=proxy, HTTP_X_REAL_IP=guesser).post(
            LOGIN, {"username": alice.username, "password": PASSWORD}
        )
        other_client = Client(REMOTE_ADDR=proxy, HTTP_X_REAL_IP=other).post(
            LOGIN, {"username": alice.username, "password": PASSWORD}
        )

    assert blocked.status_code == 429
    assert other_client.status_code == 302


def test_the_admin_login_counts_and_refuses_with_the_same_counters(alice: User, address: str) -> None:
    alice.is_staff = True
    alice.save()
    admin = Client(REMOTE_ADDR=address)
    for _ in range(2):
        admin.post("/admin/login/", {"username": alice.username, "password": "guess"})
    _login(alice.username, "guess", address)  # the third failure, on the site's login page

    refused = admin.post("/admin/login/", {"username": alice.username, "password": PASSWORD})

    assert "Too many failed sign-in attempts" in refused.content.decode()
    assert "_auth_user_id" not in admin.session
    assert _login(alice.username, PASSWORD, _address()).status_code == 429
