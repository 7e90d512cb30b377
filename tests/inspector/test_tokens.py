"""API tokens expire after API_TOKEN_TTL_DAYS, and their owner revokes them from the API or a page."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.test.utils import override_settings
from django.utils import timezone
from rest_framework.authtoken.models import Token

from tests.factories import PASSWORD, UserFactory

pytestmark = pytest.mark.django_db

TOKEN = "/api/token"
LIST = "/api/conversations"
PAGE = "/accounts/token"


@pytest.fixture
def alice() -> User:
    user: User = UserFactory(username="alice")
    return user


@pytest.fixture
def bob() -> User:
    user: User = UserFactory(username="bob")
    return user


def _token(user: User, *, age_days: float = 0) -> Token:
    token: Token = Token.objects.create(user=user)
    Token.objects.filter(pk=token.pk).update(created=timezone.now() - timedelta(days=age_days))
    return Token.objects.get(pk=token.pk)


def _with(token: Token) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Token {token.key}")


# --- expiry -----------------------------------------------------------------------------------


def test_a_token_younger_than_the_ttl_works(alice: User) -> None:
    assert _with(_token(alice, age_days=89.9)).get(LIST).status_code == 200


def test_an_expired_token_answers_401_saying_it_expired_and_how_to_renew(alice: User) -> None:
    response = _with(_token(alice, age_days=90.1)).get(LIST)

    assert response.status_code == 401
    assert "Token expired on" in response.json()["detail"]
    assert "/api/token" in response.json()["detail"]


def test_obtaining_a_token_after_expiry_issues_a_new_one_and_the_old_stays_dead(alice: User) -> None:
    old = _token(alice, age_days=91)

    key = Client().post(TOKEN, {"username": "alice", "password": PASSWORD}).json()["token"]

    assert key != old.key
    assert _with(Token.objects.get(key=key)).get(LIST).status_code == 200
    assert _with(old).get(LIST).status_code == 401


def test_the_ttl_is_a_setting_and_zero_means_tokens_never_expire(alice: User) -> None:
    token = _token(alice, age_days=3)
    with override_settings(API_TOKEN_TTL_DAYS=2):
        assert _with(token).get(LIST).status_code == 401
    with override_settings(API_TOKEN_TTL_DAYS=0):
        assert _with(token).get(LIST).status_code == 200


# --- revocation through the API ---------------------------------------------------------------


def test_delete_revokes_the_callers_token(alice: User, bob: User) -> None:
    token, bobs = _token(alice), _token(bob)

    response = _with(token).delete(TOKEN)

    assert response.status_code == 204
    assert _with(token).get(LIST).status_code == 401
    assert _with(bobs).get(LIST).status_code == 200


def test_delete_without_credentials_answers_401(alice: User) -> None:
    _token(alice)

    assert Client().delete(TOKEN).status_code == 401
    assert Token.objects.filter(user=alice).exists()


def test_delete_with_an_expired_token_answers_401(alice: User) -> None:
    assert _with(_token(alice, age_days=100)).delete(TOKEN).status_code == 401


def test_a_browser_session_cannot_be_made_to_delete_a_token_without_the_csrf_token(alice: User) -> None:
    _token(alice)
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(alice)

    assert browser.delete(TOKEN).status_code == 403
    assert Token.objects.filter(user=alice).exists()


# --- the token page ---------------------------------------------------------------------------


def test_the_page_shows_when_the_token_expires_but_never_the_token(alice: User) -> None:
    token = _token(alice, age_days=10)
    browser = Client()
    browser.force_login(alice)

    page = browser.get(PAGE).content.decode()

    assert (token.created + timedelta(days=90)).strftime("%Y-%m-%d") in page
    assert token.key not in page
    assert 'id="token-revoke"' in page


def test_the_page_says_so_when_there_is_no_token(alice: User) -> None:
    browser = Client()
    browser.force_login(alice)

    assert 'id="token-none"' in browser.get(PAGE).content.decode()


def test_revoke_on_the_page_deletes_only_the_users_own_token(alice: User, bob: User) -> None:
    token, bobs = _token(alice), _token(bob)
    browser = Client()
    browser.force_login(alice)

    response = browser.post(f"{PAGE}/revoke", follow=True)

    assert response.redirect_chain[-1][0] == PAGE
    assert "revoked" in response.content.decode()
    assert _with(token).get(LIST).status_code == 401
    assert _with(bobs).get(LIST).status_code == 200


def test_the_token_page_needs_a_signed_in_user() -> None:
    response = Client().get(PAGE)

    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")
