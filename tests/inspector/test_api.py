"""The JSON API: token and session auth, access per user, the transcript, the OpenAPI document."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.authtoken.models import Token

from conversations.models import Conversation, Exchange, Step
from conversations.record.transcripts.document import transcript_document
from tests.factories import (
    PASSWORD,
    ConversationFactory,
    ExchangeFactory,
    McpServerFactory,
    ModelProfileFactory,
    StepFactory,
    TurnFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db

LIST = "/api/conversations"
OPENAPI = "/api/openapi.json"
TOKEN = "/api/token"


@pytest.fixture
def alice() -> User:
    user: User = UserFactory(username="alice")
    return user


@pytest.fixture
def bob() -> User:
    user: User = UserFactory(username="bob")
    return user


def _conversation(owner: User, *, title: str = "weather in Beijing") -> Conversation:
    """A finished one-turn conversation: a decide step, its tool step, an exchange on each."""
    server = McpServerFactory(demo=True)
    conversation: Conversation = ConversationFactory(owner=owner, title=title, servers=[server])
    turn = TurnFactory(conversation=conversation)
    arguments = {"city": "Beijing", "day": "tomorrow"}
    decide = StepFactory(
        turn=turn,
        title="calls get_weather_forecast",
        calls=[{"id": "call_1", "name": "demo__get_weather_forecast", "arguments": arguments, "valid": True}],
    )
    ExchangeFactory(step=decide)
    tool = StepFactory(
        parent=decide,
        kind=Step.Kind.TOOL,
        title="demo/get_weather_forecast",
        server=server,
        tool_name="get_weather_forecast",
        arguments=arguments,
        result={"content": [{"type": "text", "text": "Sunny"}], "isError": False},
    )
    ExchangeFactory(step=tool, server=server, mcp=True)
    return conversation


def _transcript_url(conversation: Conversation) -> str:
    return f"/api/conversations/{conversation.public_id}"


def _token_client(user: User) -> Client:
    token, _ = Token.objects.get_or_create(user=user)
    return Client(HTTP_AUTHORIZATION=f"Token {token.key}")


# --- anonymous callers ------------------------------------------------------------------------


@pytest.mark.parametrize("path", [LIST, OPENAPI, "/api/conversations/00000000-0000-0000-0000-000000000000"])
def test_anonymous_calls_get_a_401_json_answer_not_a_login_redirect(client: Client, path: str) -> None:
    response = client.get(path)

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"
    # application/json, or application/vnd.oai.openapi+json for the schema view.
    assert response["Content-Type"].split(";")[0].endswith("json")
    assert "detail" in json.loads(response.content)


def test_a_wrong_token_is_refused_with_401(alice: User) -> None:
    response = Client(HTTP_AUTHORIZATION="Token not-a-real-token").get(LIST)

    assert response.status_code == 401


# --- tokens -----------------------------------------------------------------------------------


def test_the_right_password_obtains_the_users_token(client: Client, alice: User) -> None:
    response = client.post(TOKEN, {"username": "alice", "password": PASSWORD})

    assert response.status_code == 200
    assert response.json() == {"token": Token.objects.get(user=alice).key}


def test_obtaining_twice_returns_the_same_token(client: Client, alice: User) -> None:
    first = client.post(TOKEN, {"username": "alice", "password": PASSWORD}).json()
    second = client.post(
        TOKEN, json.dumps({"username": "alice", "password": PASSWORD}), content_type="application/json"
    ).json()

    assert first == second


def test_a_wrong_password_obtains_no_token(client: Client, alice: User) -> None:
    response = client.post(TOKEN, {"username": "alice", "password": "wrong"})

    assert response.status_code == 400
    assert "token" not in response.json()
    assert not Token.objects.filter(user=alice).exists()


def test_token_obtain_ignores_a_signed_in_session_without_a_csrf_token(alice: User) -> None:
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(alice)

    response = browser.post(TOKEN, {"username": "alice", "password": PASSWORD})

    assert response.status_code == 200


# --- the conversation list --------------------------------------------------------------------


def test_the_list_shows_only_the_callers_conversations_with_their_summary(alice: User, bob: User) -> None:
    mine = _conversation(alice)
    _conversation(bob, title="bob's question")

    response = _token_client(alice).get(LIST)

    assert response.status_code == 200
    body = response.json()
    assert body["count"] == 1
    [row] = body["results"]
    assert row == {
        "id": str(mine.public_id),
        "title": "weather in Beijing",
        "created_at": row["created_at"],
        "paradigm": "native",
        "model": "demo",
        "last_turn_status": "done",
        "turn_count": 1,
        "url": f"http://testserver{_transcript_url(mine)}",
    }


def test_a_conversation_without_turns_has_no_last_status(alice: User) -> None:
    ConversationFactory(owner=alice, title="nothing asked yet")

    [row] = _token_client(alice).get(LIST).json()["results"]

    assert row["last_turn_status"] is None
    assert row["turn_count"] == 0


def test_the_list_is_paginated_with_page(alice: User) -> None:
    ConversationFactory.create_batch(55, owner=alice, model_profile=ModelProfileFactory(name="many"))
    api = _token_client(alice)

    first = api.get(LIST).json()
    second = api.get(LIST, {"page": 2}).json()

    assert first["count"] == 55
    assert len(first["results"]) == 50
    assert first["next"].endswith("?page=2")
    assert len(second["results"]) == 5
    assert second["next"] is None


def test_the_browser_session_works_for_the_api_too(client: Client, alice: User) -> None:
    _conversation(alice)
    client.force_login(alice)

    response = client.get(LIST)

    assert response.status_code == 200
    assert response.json()["count"] == 1


# --- the transcript ---------------------------------------------------------------------------


def test_the_transcript_is_exactly_what_ask_json_prints(alice: User) -> None:
    conversation = _conversation(alice)

    response = _token_client(alice).get(_transcript_url(conversation))

    assert response.status_code == 200
    assert response.json() == json.loads(json.dumps(transcript_document(conversation=conversation)))
    [turn] = response.json()["turns"]
    assert [step["kind"] for step in turn["steps"]] == ["decide", "tool"]
    assert turn["steps"][1]["exchanges"][0]["label"] == "tools/call"


def test_a_step_and_exchange_whose_server_row_is_gone_show_the_name_the_record_kept(alice: User) -> None:
    """As the JSON export does: an imported conversation, or one whose server was deleted, has no
    server row, only the name its records kept."""
    conversation = _conversation(alice)
    Step.objects.filter(turn__conversation=conversation, kind=Step.Kind.TOOL).update(
        server=None, server_name="weather-srv"
    )
    Exchange.objects.filter(turn__conversation=conversation, channel="mcp").update(
        server=None, server_name="weather-srv"
    )

    [turn] = _token_client(alice).get(_transcript_url(conversation)).json()["turns"]

    tool = turn["steps"][1]
    assert tool["server"] == "weather-srv"
    assert tool["exchanges"][0]["server"] == "weather-srv"


def test_someone_elses_conversation_is_a_404_like_a_missing_one(alice: User, bob: User) -> None:
    conversation = _conversation(alice)
    api = _token_client(bob)

    theirs = api.get(_transcript_url(conversation))
    missing = api.get("/api/conversations/00000000-0000-0000-0000-000000000000")

    assert theirs.status_code == missing.status_code == 404
    assert theirs.json() == missing.json()


# --- the OpenAPI document ---------------------------------------------------------------------


def test_the_openapi_document_describes_the_transcript_and_token_auth(alice: User) -> None:
    response = _token_client(alice).get(OPENAPI)

    assert response.status_code == 200
    schema = json.loads(response.content)
    assert schema["openapi"].startswith("3.")
    transcript = schema["paths"]["/api/conversations/{public_id}"]["get"]
    assert transcript["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Transcript"
    }
    components = schema["components"]["schemas"]
    assert {"Transcript", "Conversation", "Turn", "Step", "Exchange"} <= set(components)
    assert {"format", "version", "conversation", "turns"} <= set(components["Transcript"]["properties"])
    assert {"model_profile", "servers"} <= set(components["Conversation"]["properties"])
    schemes = schema["components"]["securitySchemes"]
    assert schemes["tokenAuth"]["type"] == "apiKey"
    assert schemes["tokenAuth"]["name"] == "Authorization"
    assert {"tokenAuth": []} in transcript["security"]
    assert "/api/token" in schema["paths"]
