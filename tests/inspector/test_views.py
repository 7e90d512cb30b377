"""The inspection pages: who sees what, starting conversations, follow-ups, the catch-up endpoint."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape

from conversations.loop.paradigms import PARADIGMS
from conversations.models import Conversation, Step, Turn
from inspector.forms import paradigm_explanation
from inspector.fragments import timestamp_iso
from tests.factories import (
    ConversationFactory,
    DemoModelProfileFactory,
    McpServerFactory,
    ModelProfileFactory,
    StepFactory,
    TurnFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice() -> Any:
    return UserFactory(username="alice")


@pytest.fixture
def bob() -> Any:
    return UserFactory(username="bob")


@pytest.fixture
def alice_client(client: Client, alice: Any) -> Client:
    client.force_login(alice)
    return client


@pytest.fixture
def bob_client(client: Client, bob: Any) -> Client:
    client.force_login(bob)
    return client


@pytest.fixture
def conversation(alice: Any) -> Conversation:
    conversation = ConversationFactory(owner=alice, title="Weather in Paris")
    TurnFactory(conversation=conversation, question="What is the weather in Paris tomorrow?")
    return conversation


def detail_url(conversation: Conversation) -> str:
    return reverse("inspector-conversation", args=[conversation.public_id])


def ask_url(conversation: Conversation) -> str:
    return reverse("inspector-turn-create", args=[conversation.public_id])


def rows_url(conversation: Conversation) -> str:
    return reverse("inspector-conversation-rows", args=[conversation.public_id])


def new_conversation_data(**overrides: Any) -> dict[str, Any]:
    profile = DemoModelProfileFactory()
    server = McpServerFactory(demo=True)
    data: dict[str, Any] = {
        "model_profile": profile.pk,
        "paradigm": "native",
        "tool_choice": "auto",
        "tool_choice_name": "",
        "servers": [server.pk],
        "question": "What is the weather in Paris tomorrow?",
    }
    data.update(overrides)
    return data


# --- access ---------------------------------------------------------------------------------


def test_anonymous_visitors_are_sent_to_the_login_page_from_every_page(
    client: Client, conversation: Conversation
) -> None:
    requests = [
        ("get", reverse("inspector-conversations")),
        ("post", reverse("inspector-conversation-create")),
        ("get", detail_url(conversation)),
        ("post", ask_url(conversation)),
        ("get", rows_url(conversation) + "?since=2020-01-01T00:00:00Z"),
    ]
    for method, url in requests:
        response = getattr(client, method)(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("login") + "?next="), url


def test_the_login_page_itself_is_open(client: Client) -> None:
    response = client.get(reverse("login"))

    assert response.status_code == 200
    assert "Tool-Call Inspector" in response.content.decode()


def test_alice_sees_her_conversation(alice_client: Client, conversation: Conversation) -> None:
    response = alice_client.get(detail_url(conversation))

    assert response.status_code == 200
    html = response.content.decode()
    assert "Weather in Paris" in html
    assert "What is the weather in Paris tomorrow?" in html
    assert "Sunny, 21 °C." in html


def test_bob_gets_404_for_every_view_of_alices_conversation(
    bob_client: Client, conversation: Conversation
) -> None:
    assert bob_client.get(detail_url(conversation)).status_code == 404
    assert bob_client.post(ask_url(conversation), {"question": "mine now?"}).status_code == 404
    assert bob_client.get(rows_url(conversation), {"since": "2020-01-01T00:00:00Z"}).status_code == 404
    assert conversation.turns.count() == 1


def test_the_list_shows_only_the_users_own_conversations(alice_client: Client, bob: Any) -> None:
    ConversationFactory(owner=bob, title="Bob's secret")
    ConversationFactory(owner=UserFactory(username="alice"), title="Alice's question")

    html = alice_client.get(reverse("inspector-conversations")).content.decode()

    assert "Alice&#x27;s question" in html
    assert "Bob" not in html


def test_the_list_is_paginated_by_25(alice_client: Client, alice: Any) -> None:
    for n in range(27):
        ConversationFactory(owner=alice, title=f"question {n:02d}")

    first = alice_client.get(reverse("inspector-conversations"))
    second = alice_client.get(reverse("inspector-conversations"), {"page": 2})

    assert len(first.context["page"].object_list) == 25
    assert len(second.context["page"].object_list) == 2


def test_the_new_conversation_form_offers_the_demo_model_first_and_labelled(alice_client: Client) -> None:
    ModelProfileFactory(name="aaa-real")
    DemoModelProfileFactory()
    demo_server = McpServerFactory(demo=True)

    response = alice_client.get(reverse("inspector-conversations"))

    form = response.context["form"]
    choices = [label for _, label in form.fields["model_profile"].choices]
    assert choices[0].endswith("(demo)")
    assert not choices[1].endswith("(demo)")
    assert form.initial["servers"] == [demo_server.pk]
    html = response.content.decode()
    assert f'value="{demo_server.pk}"' in html
    assert "checked" in html


def test_the_new_conversation_form_offers_every_paradigm_with_a_line_on_each(alice_client: Client) -> None:
    response = alice_client.get(reverse("inspector-conversations"))

    choices = dict(response.context["form"].fields["paradigm"].choices)
    assert list(choices) == list(PARADIGMS)
    html = response.content.decode()
    for key, paradigm in PARADIGMS.items():
        assert choices[key] == f"{paradigm.label} — {paradigm_explanation(key)}"
        assert f'type="radio" name="paradigm" value="{key}"' in html
        assert escape(choices[key]) in html


# --- starting a conversation ----------------------------------------------------------------


def test_creating_a_conversation_queues_its_first_turn_and_redirects_to_it(
    alice_client: Client, alice: Any, django_capture_on_commit_callbacks: Any
) -> None:
    data = new_conversation_data(tool_choice="required")

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = alice_client.post(reverse("inspector-conversation-create"), data)

    conversation = Conversation.objects.get()
    assert response.status_code == 302
    assert response["Location"] == detail_url(conversation)
    assert conversation.owner == alice
    assert conversation.model_profile.pk == data["model_profile"]
    assert conversation.paradigm == "native"
    assert conversation.tool_choice == "required"
    assert [s.pk for s in conversation.servers.all()] == data["servers"]
    turn = conversation.turns.get()
    assert (turn.seq, turn.status, turn.question) == (1, Turn.Status.QUEUED, data["question"])
    assert len(callbacks) == 1  # the dispatch, held back until commit


def test_a_named_tool_choice_is_stored_with_its_tool(
    alice_client: Client, django_capture_on_commit_callbacks: Any
) -> None:
    data = new_conversation_data(tool_choice="named", tool_choice_name="demo/get_weather_forecast")

    with django_capture_on_commit_callbacks(execute=False):
        response = alice_client.post(reverse("inspector-conversation-create"), data)

    assert response.status_code == 302
    conversation = Conversation.objects.get()
    assert (conversation.tool_choice, conversation.tool_choice_name) == ("named", "demo/get_weather_forecast")


def test_an_invalid_form_is_shown_again_with_its_errors_and_status_400(alice_client: Client) -> None:
    response = alice_client.post(reverse("inspector-conversation-create"), new_conversation_data(question=""))

    assert response.status_code == 400
    assert "question" in response.context["form"].errors
    assert "errorlist" in response.content.decode()
    assert not Conversation.objects.exists()


def test_a_too_long_question_is_refused(alice_client: Client) -> None:
    data = new_conversation_data(question="x" * 10_001)

    response = alice_client.post(reverse("inspector-conversation-create"), data)

    assert response.status_code == 400
    assert "question" in response.context["form"].errors


def test_named_tool_choice_without_a_tool_name_is_an_error(alice_client: Client) -> None:
    response = alice_client.post(
        reverse("inspector-conversation-create"), new_conversation_data(tool_choice="named")
    )

    assert response.status_code == 400
    assert "tool_choice_name" in response.context["form"].errors
    assert not Conversation.objects.exists()


def test_a_named_tool_must_be_written_as_server_slash_tool(alice_client: Client) -> None:
    data = new_conversation_data(tool_choice="named", tool_choice_name="get_forecast")

    response = alice_client.post(reverse("inspector-conversation-create"), data)

    assert response.status_code == 400
    assert "server/tool" in str(response.context["form"].errors["tool_choice_name"])


def test_named_tool_on_a_server_that_is_not_selected_is_an_error(alice_client: Client) -> None:
    data = new_conversation_data(tool_choice="named", tool_choice_name="elsewhere/get_forecast")

    response = alice_client.post(reverse("inspector-conversation-create"), data)

    assert response.status_code == 400
    assert "not among the selected servers" in str(response.context["form"].errors["tool_choice_name"])


def test_a_tool_name_is_dropped_unless_tool_choice_is_named(
    alice_client: Client, django_capture_on_commit_callbacks: Any
) -> None:
    data = new_conversation_data(tool_choice="auto", tool_choice_name="demo/get_forecast")

    with django_capture_on_commit_callbacks(execute=False):
        alice_client.post(reverse("inspector-conversation-create"), data)

    assert Conversation.objects.get().tool_choice_name == ""


# --- the conversation page ------------------------------------------------------------------


def test_the_page_tells_its_script_where_to_connect_and_from_when(
    alice_client: Client, conversation: Conversation
) -> None:
    turn = conversation.turns.get()
    step = StepFactory(turn=turn)

    html = alice_client.get(detail_url(conversation)).content.decode()

    assert f'data-ws-url="/ws/conversations/{conversation.public_id}/"' in html
    assert f'data-rows-url="{rows_url(conversation)}"' in html
    step.refresh_from_db()
    newest = max(step.updated_at, turn.updated_at)
    assert f'data-since="{newest.isoformat(timespec="microseconds")}"' in html
    assert f'id="step-{step.pk}"' in html
    assert "conversation_detail.js" in html
    assert "conversation_detail.css" in html


def test_the_page_labels_the_demo_model(alice_client: Client, conversation: Conversation) -> None:
    html = alice_client.get(detail_url(conversation)).content.decode()

    assert "demo model" in html


def test_a_missing_conversation_is_404(alice_client: Client) -> None:
    url = reverse("inspector-conversation", args=["00000000-0000-0000-0000-000000000000"])

    assert alice_client.get(url).status_code == 404


# --- follow-up questions --------------------------------------------------------------------


def test_a_follow_up_after_a_finished_turn_queues_the_next_turn(
    alice_client: Client, conversation: Conversation, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = alice_client.post(ask_url(conversation), {"question": "And the day after?"})

    assert response.status_code == 302
    assert response["Location"] == detail_url(conversation)
    turn = conversation.turns.get(seq=2)
    assert (turn.question, turn.status) == ("And the day after?", Turn.Status.QUEUED)
    assert len(callbacks) == 1


@pytest.mark.parametrize("status", [Turn.Status.QUEUED, Turn.Status.RUNNING])
def test_a_follow_up_is_refused_while_the_previous_turn_is_unfinished(
    alice_client: Client, alice: Any, status: str
) -> None:
    conversation = ConversationFactory(owner=alice)
    TurnFactory(conversation=conversation, status=status, answer="")

    response = alice_client.post(ask_url(conversation), {"question": "Hurry up?"})

    assert response.status_code == 409
    assert "still running" in response.content.decode()
    assert conversation.turns.count() == 1


def test_the_ask_button_is_disabled_while_a_turn_runs(alice_client: Client, alice: Any) -> None:
    conversation = ConversationFactory(owner=alice)
    TurnFactory(conversation=conversation, status=Turn.Status.RUNNING, answer="")

    html = alice_client.get(detail_url(conversation)).content.decode()

    assert "follow-up is-busy" in html
    assert "waiting…" in html


def test_an_empty_follow_up_is_a_400(alice_client: Client, conversation: Conversation) -> None:
    response = alice_client.post(ask_url(conversation), {"question": "  "})

    assert response.status_code == 400
    assert conversation.turns.count() == 1


def test_pages_refuse_the_wrong_method(alice_client: Client, conversation: Conversation) -> None:
    assert alice_client.get(ask_url(conversation)).status_code == 405
    assert alice_client.get(reverse("inspector-conversation-create")).status_code == 405
    assert alice_client.post(rows_url(conversation)).status_code == 405


# --- the plain-HTTP catch-up ----------------------------------------------------------------


def test_rows_endpoint_returns_what_changed_since_a_timestamp(
    alice_client: Client, conversation: Conversation
) -> None:
    turn = conversation.turns.get()
    long_ago = timezone.now() - timedelta(hours=1)
    old = StepFactory(turn=turn, title="old step")
    Step.objects.filter(pk=old.pk).update(updated_at=long_ago)
    Turn.objects.filter(pk=turn.pk).update(updated_at=long_ago)
    new = StepFactory(turn=turn, title="new step")
    since = timezone.now() - timedelta(minutes=1)

    response = alice_client.get(rows_url(conversation), {"since": since.isoformat()})

    assert response.status_code == 200
    messages = json.loads(response.content)["messages"]
    assert [(m["type"], m["step_id"]) for m in messages] == [("row", new.pk)]
    assert "new step" in messages[0]["html"]


def test_rows_endpoint_sends_turns_first_then_rows(alice_client: Client, conversation: Conversation) -> None:
    turn = conversation.turns.get()
    step = StepFactory(turn=turn)

    messages = alice_client.get(rows_url(conversation), {"since": "2000-01-01T00:00:00Z"}).json()["messages"]

    assert [m["type"] for m in messages] == ["turn", "row"]
    assert messages[0]["turn_id"] == turn.pk
    assert messages[1]["step_id"] == step.pk


@pytest.mark.parametrize("since", ["", "yesterday", "2024-13-45T99:00:00"])
def test_rows_endpoint_refuses_a_junk_since(
    alice_client: Client, conversation: Conversation, since: str
) -> None:
    response = alice_client.get(rows_url(conversation), {"since": since})

    assert response.status_code == 400
    assert "since" in response.json()["error"]


def test_rows_endpoint_needs_a_since(alice_client: Client, conversation: Conversation) -> None:
    assert alice_client.get(rows_url(conversation)).status_code == 400


def test_rows_endpoint_with_the_pages_view_sends_only_what_the_page_does_not_hold(
    alice_client: Client, conversation: Conversation
) -> None:
    """A page whose websocket cannot connect catches up over plain HTTP: with its view (as the
    socket's catch-up takes it) the rows it holds at their versions are not rendered again."""
    turn = conversation.turns.get()
    held, changed = StepFactory(turn=turn, title="held step"), StepFactory(turn=turn, title="changed step")
    held.refresh_from_db()
    turn.refresh_from_db()
    view = {
        "turns": {
            str(turn.pk): {
                "from_seq": 0,
                "held": {
                    str(held.pk): timestamp_iso(held.updated_at),
                    str(changed.pk): "2000-01-01T00:00:00+00:00",
                },
                "status_at": timestamp_iso(turn.updated_at),
            }
        },
        "newest_seq": turn.seq,
    }
    since = (timezone.now() - timedelta(minutes=1)).isoformat()

    with_view = alice_client.get(rows_url(conversation), {"since": since, "view": json.dumps(view)})
    without = alice_client.get(rows_url(conversation), {"since": since})

    assert with_view.status_code == 200
    assert [(m["type"], m.get("step_id")) for m in with_view.json()["messages"]] == [("row", changed.pk)]
    assert [(m["type"], m.get("step_id")) for m in without.json()["messages"]] == [
        ("turn", None),
        ("row", held.pk),
        ("row", changed.pk),
    ]


@pytest.mark.parametrize(
    ("view", "said"),
    [
        ("not json", "'view' must be JSON"),
        ('{"turns": "all"}', "'view' must be an object"),
        ('{"turns": {}, "newest_seq": "x"}', "'newest_seq' must be a number"),
        ("[" * 100_000 + "]" * 100_000, "'view' is longer than"),
        (
            '{"turns": {"1": {"held": {"2": "x"}}}, "newest_seq": ' + "[" * 5_000 + "]" * 5_000 + "}",
            "'view' must be",
        ),
    ],
)
def test_rows_endpoint_refuses_a_malformed_view_with_the_reason(
    alice_client: Client, conversation: Conversation, view: str, said: str
) -> None:
    response = alice_client.get(rows_url(conversation), {"since": "2000-01-01T00:00:00Z", "view": view})

    assert response.status_code == 400
    assert said in response.json()["error"]


def test_rows_endpoint_with_a_view_shows_another_users_conversation_to_no_one(
    bob_client: Client, conversation: Conversation
) -> None:
    view = json.dumps({"turns": {}, "newest_seq": 0})

    response = bob_client.get(rows_url(conversation), {"since": "2000-01-01T00:00:00Z", "view": view})

    assert response.status_code == 404


# --- stdio servers only staff may start ------------------------------------------------------


def test_a_stdio_server_only_staff_may_start_is_offered_to_alice_disabled_with_the_reason(
    alice_client: Client,
) -> None:
    demo_server = McpServerFactory(demo=True)
    private = McpServerFactory(name="local-tools")

    html = alice_client.get(reverse("inspector-conversations")).content.decode()

    demo_box = html[html.index(f'value="{demo_server.pk}"') :].split(">", 1)[0]
    private_box = html[html.index(f'value="{private.pk}"') :].split(">", 1)[0]
    assert "disabled" not in demo_box
    assert "disabled" in private_box
    assert "only staff may start it" in html


def test_alice_cannot_start_a_conversation_with_a_stdio_server_only_staff_may_start(
    alice_client: Client,
) -> None:
    private = McpServerFactory(name="local-tools")

    response = alice_client.post(
        reverse("inspector-conversation-create"), new_conversation_data(servers=[private.pk])
    )

    assert response.status_code == 400
    assert "local-tools starts a process on the worker" in str(response.context["form"].errors["servers"])
    assert not Conversation.objects.exists()


def test_staff_may_start_a_conversation_with_any_stdio_server(client: Client) -> None:
    staff = UserFactory(username="carol", is_staff=True)
    client.force_login(staff)
    private = McpServerFactory(name="local-tools")

    html = client.get(reverse("inspector-conversations")).content.decode()
    response = client.post(
        reverse("inspector-conversation-create"), new_conversation_data(servers=[private.pk])
    )

    assert "disabled" not in html[html.index(f'value="{private.pk}"') :].split(">", 1)[0]
    assert response.status_code == 302
    assert [s.name for s in Conversation.objects.get().servers.all()] == ["local-tools"]
