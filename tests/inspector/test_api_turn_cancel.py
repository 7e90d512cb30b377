"""``POST /api/turns/<id>/cancel``: token or session auth, the owner or staff only (anyone else
gets the same 404 as for a missing turn), and a running turn really stops."""

from __future__ import annotations

import threading
import time

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from pytest_django.fixtures import Settings
from rest_framework.authtoken.models import Token

from conversations.models import Step, Turn
from conversations.runner import turn_run
from conversations.services import conversation_start, demo_profile_ensure
from servers import gateway
from servers.services import demo_server_ensure

WEATHER = "What will the weather be like in Beijing tomorrow?"


def _url(turn: Turn) -> str:
    return f"/api/turns/{turn.pk}/cancel"


def _turn(owner: User, *, status: str = Turn.Status.RUNNING, question: str = WEATHER) -> Turn:
    _, turn = conversation_start(
        owner=owner,
        model_profile=demo_profile_ensure(),
        question=question,
        servers=[demo_server_ensure()],
        dispatch=False,
    )
    Turn.objects.filter(pk=turn.pk).update(status=status)
    turn.refresh_from_db()
    return turn


def _token_client(user: User) -> Client:
    token, _ = Token.objects.get_or_create(user=user)
    return Client(headers={"Authorization": f"Token {token.key}"})


@pytest.fixture
def alice(db: None) -> User:
    return User.objects.create_user("alice", password="pw-alice")


@pytest.fixture
def bob(db: None) -> User:
    return User.objects.create_user("bob", password="pw-bob")


@pytest.mark.django_db
def test_the_owner_cancels_a_running_turn_with_a_token(alice: User) -> None:
    turn = _turn(alice)

    response = _token_client(alice).post(_url(turn))

    assert response.status_code == 202
    body = response.json()
    assert (body["turn"], body["status"], body["cancel_requested_by"]) == (turn.pk, "running", "alice")
    assert body["cancel_requested_at"]
    turn.refresh_from_db()
    assert turn.cancel_requested_by == "alice" and turn.cancel_requested_at is not None


@pytest.mark.django_db
def test_a_queued_turn_is_cancelled_at_once(alice: User) -> None:
    turn = _turn(alice, status=Turn.Status.QUEUED)

    response = _token_client(alice).post(_url(turn))

    assert response.status_code == 202 and response.json()["status"] == "cancelled"
    assert Step.objects.get(turn=turn).title == "cancelled by alice"


@pytest.mark.django_db
def test_another_user_gets_the_same_404_as_for_a_missing_turn(alice: User, bob: User) -> None:
    turn = _turn(alice)

    theirs = _token_client(bob).post(_url(turn))
    missing = _token_client(bob).post(f"/api/turns/{turn.pk + 1000}/cancel")

    assert theirs.status_code == missing.status_code == 404
    assert theirs.json() == {"detail": "No such turn."} == missing.json()
    turn.refresh_from_db()
    assert turn.cancel_requested_at is None and turn.status == Turn.Status.RUNNING


@pytest.mark.django_db
def test_staff_may_cancel_anyones_turn(alice: User) -> None:
    turn = _turn(alice)
    staff = User.objects.create_user("carol", is_staff=True)

    response = _token_client(staff).post(_url(turn))

    assert response.status_code == 202 and response.json()["cancel_requested_by"] == "carol"


@pytest.mark.django_db
def test_a_finished_turn_answers_409(alice: User) -> None:
    turn = _turn(alice, status=Turn.Status.DONE)

    response = _token_client(alice).post(_url(turn))

    assert response.status_code == 409 and "already finished" in response.json()["detail"]


@pytest.mark.django_db
def test_an_anonymous_call_is_refused(alice: User) -> None:
    turn = _turn(alice)

    response = Client().post(_url(turn))

    assert response.status_code == 401
    assert Turn.objects.get(pk=turn.pk).cancel_requested_at is None


@pytest.mark.django_db
def test_a_browser_session_needs_its_csrf_token(alice: User) -> None:
    turn = _turn(alice)
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(alice)

    refused = browser.post(_url(turn))
    browser.get(f"/c/{turn.conversation.public_id}/")
    accepted = browser.post(_url(turn), headers={"X-CSRFToken": browser.cookies["csrftoken"].value})

    assert refused.status_code == 403
    assert accepted.status_code == 202


@pytest.mark.django_db
def test_the_openapi_document_describes_the_cancel_route(alice: User) -> None:
    document = _token_client(alice).get("/api/openapi.json").json()

    operation = document["paths"]["/api/turns/{turn_id}/cancel"]["post"]
    assert {"202", "404", "409"} <= set(operation["responses"])
    statuses = document["components"]["schemas"]["TurnStatusEnum"]["enum"]
    assert "cancelled" in statuses


@pytest.mark.django_db(transaction=True)
def test_a_turn_cancelled_through_the_api_stops_within_seconds(alice: User, settings: Settings) -> None:
    settings.TURN_CANCEL_POLL_SECONDS = 0.05
    turn = _turn(alice, status=Turn.Status.QUEUED, question=f"{WEATHER} [demo:slow=15]")

    def run() -> None:
        try:
            turn_run(turn_id=turn.pk)
        finally:
            connection.close()

    runner = threading.Thread(target=run)
    runner.start()
    try:
        deadline = time.monotonic() + 10
        while not Step.objects.filter(turn=turn, kind="decide").exists() and time.monotonic() < deadline:
            time.sleep(0.05)

        response = _token_client(alice).post(_url(turn))
        runner.join(10)
    finally:
        gateway.close_all()

    assert response.status_code == 202
    assert not runner.is_alive(), "the turn did not stop within 10 s"
    turn.refresh_from_db()
    assert turn.status == Turn.Status.CANCELLED and turn.error.startswith("cancelled by alice")
