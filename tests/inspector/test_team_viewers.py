"""A class following its lecturer: team "class-101" has the lecturer (and a teaching assistant) as
members and two students as viewers. The students see everything the members own, live, and may
act on none of it (each attempt a 403 that says why); the team sees nothing of the students'.
Dave is staff. Real requests through Django's test Client, and the websocket through the whole
ASGI stack with each browser's session cookie."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.test import Client

from conversations.models import Conversation, Step, Team, Turn
from conversations.selectors import (
    ConversationFilters,
    conversation_get,
    conversation_list,
    conversation_page,
    conversation_search,
    following,
    may_act,
    visible_to,
)
from inspector import live
from inspector.asgi import application
from servers.models import Operation, PendingInput, SavedCall
from tests.factories import ConversationFactory, McpServerFactory, StepFactory, TurnFactory
from tests.inspector.test_consumers import _caught_up, _conversation, _path

READ_ONLY = "You follow this"
STUDENTS = ("student1", "student2")
WAIT = 10.0


def _class_101() -> dict[str, User]:
    people = {
        name: User.objects.create_user(name) for name in ("lecturer", "assistant", *STUDENTS, "outsider")
    }
    people["dave"] = User.objects.create_user("dave", is_staff=True)
    team = Team.objects.create(name="class-101")
    team.members.add(people["lecturer"], people["assistant"])
    team.viewers.add(people["student1"], people["student2"])
    return people


@pytest.fixture
def people(db: None) -> dict[str, User]:
    return _class_101()


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@dataclass
class Lecture:
    """The lecturer's conversation: a finished turn whose tool call has an MCP App, and a
    running turn after it."""

    conversation: Conversation
    finished: Turn
    tool_step: Step
    running: Turn


@pytest.fixture
def lecture(people: dict[str, User]) -> Lecture:
    server = McpServerFactory(name="apps", allow_non_staff_spawn=True)  # the assistant may ask
    conversation = ConversationFactory(
        owner=people["lecturer"], title="Lecture: the weather", servers=[server]
    )
    ui_tool = {
        "server_id": server.pk,
        "name": "counter",
        "_meta": {"ui": {"resourceUri": "ui://counter/app.html"}},
    }
    finished = TurnFactory(
        conversation=conversation, question="What is the weather in Oslo?", tools=[ui_tool]
    )
    decide = StepFactory(turn=finished, text="calling counter")
    tool_step = StepFactory(
        turn=finished, parent=decide, kind=Step.Kind.TOOL, server=server, tool_name="counter", result={}
    )
    running = TurnFactory(conversation=conversation, question="And in Bergen?", status=Turn.Status.RUNNING)
    return Lecture(conversation, finished, tool_step, running)


# --- the rule ---------------------------------------------------------------------------------


def test_students_see_the_members_conversations_but_act_on_none_and_no_one_sees_a_students(
    people: dict[str, User],
) -> None:
    owned = {name: ConversationFactory(owner=people[name], title=f"{name}'s") for name in people}
    seen = {
        name: sorted(c.title for c in conversation_list(user=user) if c.owner_id != user.pk)
        for name, user in people.items()
    }
    acted = {
        name: sorted(
            c.title
            for c in visible_to(Conversation.objects.all(), user=user, owner="owner", acting=True)
            if c.owner_id != user.pk
        )
        for name, user in people.items()
    }

    members = ["assistant's", "lecturer's"]
    assert seen == {
        "lecturer": ["assistant's"],
        "assistant": ["lecturer's"],
        "student1": members,
        "student2": members,
        "outsider": [],
        "dave": sorted(f"{name}'s" for name in people if name != "dave"),
    }
    assert acted == {**seen, "student1": [], "student2": []}
    # The one-row forms answer as the querysets do, for every persona and every owner.
    for name, user in people.items():
        for conversation in owned.values():
            listed = conversation_list(user=user).filter(pk=conversation.pk).exists()
            acting = visible_to(
                Conversation.objects.filter(pk=conversation.pk), user=user, owner="owner", acting=True
            )
            assert may_act(user, conversation.owner_id) == acting.exists(), (name, conversation.title)
            try:
                found = conversation_get(user=user, public_id=conversation.public_id)
            except Conversation.DoesNotExist:
                assert not listed, (name, conversation.title)
                continue
            assert listed and following(found) == (not acting.exists()), (
                name,
                conversation.title,
            )


def test_the_list_search_and_counts_include_the_followed_members_conversations(
    people: dict[str, User],
) -> None:
    for name in ("lecturer", "assistant", "student2", "outsider"):
        TurnFactory(
            conversation=ConversationFactory(owner=people[name], title=f"{name}'s"), question="Oslo weather?"
        )
    student = people["student1"]

    found = conversation_search(user=student, filters=ConversationFilters(q="Oslo"))
    page = conversation_page(found, None)

    assert sorted(c.title for c in found) == ["assistant's", "lecturer's"]
    assert page.paginator.count == 2
    assert conversation_search(user=student, filters=ConversationFilters(owner="lecturer")).count() == 1
    assert conversation_search(user=student, filters=ConversationFilters(owner="student2")).count() == 0
    listed = _client(student).get("/api/conversations").json()
    assert sorted(c["title"] for c in listed["results"]) == ["assistant's", "lecturer's"]
    assert listed["count"] == 2
    html = _client(student).get("/?q=Oslo").content.decode()
    assert "lecturer&#x27;s" in html and "assistant&#x27;s" in html and "student2&#x27;s" not in html


# --- what a student sees ----------------------------------------------------------------------


@pytest.mark.parametrize("student", STUDENTS)
def test_each_student_sees_the_lecturers_conversation_everywhere_it_is_shown(
    people: dict[str, User], lecture: Lecture, student: str
) -> None:
    client = _client(people[student])
    c, turn = lecture.conversation.public_id, lecture.finished.pk

    assert "Lecture: the weather" in client.get("/").content.decode()
    for path in (
        f"/c/{c}/",
        f"/c/{c}/rows?since=2020-01-01T00:00:00",
        f"/c/{c}/export?format=json",
        f"/c/{c}/turns/{turn}/",
        f"/c/{c}/turns/{turn}/walk",
        f"/api/conversations/{c}",
        f"/api/turns/{turn}/steps",
    ):
        assert client.get(path).status_code == 200, path
    compare = client.get(f"/compare/?from={c}&turn={turn}")
    assert compare.status_code == 200
    assert "What is the weather in Oslo?" in compare.content.decode()


def test_the_page_shows_a_student_no_question_form_and_no_buttons_that_act(
    people: dict[str, User], lecture: Lecture
) -> None:
    url = f"/c/{lecture.conversation.public_id}/"

    lecturers = _client(people["lecturer"]).get(url).content.decode()
    students = _client(people["student1"]).get(url).content.decode()

    for control in ('id="follow-up"', "cancel-form", "replay-form", "step-app-form"):
        assert control in lecturers, control
        assert control not in students, control
    assert "You follow this conversation read-only" in students
    assert "You follow this conversation read-only" not in lecturers
    rows = _client(people["student1"]).get(f"{url}rows?since=2020-01-01T00:00:00").json()["messages"]
    assert rows and not any("cancel-form" in m["html"] or "replay-form" in m["html"] for m in rows)


# --- what a student may not do ----------------------------------------------------------------


def test_a_student_gets_403_asking_in_the_lecturers_conversation_and_nothing_is_asked(
    people: dict[str, User], lecture: Lecture
) -> None:
    lecture.running.status = Turn.Status.DONE
    lecture.running.save()
    client = _client(people["student1"])

    response = client.post(f"/c/{lecture.conversation.public_id}/ask", {"question": "Is it on the exam?"})

    assert response.status_code == 403
    assert "You follow this conversation read-only" in response.content.decode()
    assert not Turn.objects.filter(question="Is it on the exam?").exists()
    # Even a question the form would refuse: the answer is that they may not ask, not what is wrong.
    assert client.post(f"/c/{lecture.conversation.public_id}/ask", {"question": " "}).status_code == 403


def test_a_student_gets_403_on_every_other_path_that_acts_on_the_lecturers_conversation(
    people: dict[str, User], lecture: Lecture
) -> None:
    client = _client(people["student1"])
    c = lecture.conversation.public_id
    before = Conversation.objects.count()

    replay = client.post(f"/c/{c}/turns/{lecture.finished.pk}/replay")
    cancel = client.post(f"/c/{c}/turns/{lecture.running.pk}/cancel")
    api_cancel = client.post(f"/api/turns/{lecture.running.pk}/cancel")
    app = client.post(f"/c/{c}/steps/{lecture.tool_step.pk}/app")

    assert [replay.status_code, cancel.status_code, api_cancel.status_code, app.status_code] == [403] * 4
    for page in (replay, cancel, app):
        assert "You follow this conversation read-only" in page.content.decode()
    assert api_cancel.json()["detail"].startswith("You follow this conversation read-only")
    assert Conversation.objects.count() == before
    lecture.running.refresh_from_db()
    assert lecture.running.status == Turn.Status.RUNNING and lecture.running.cancel_requested_at is None
    assert not Operation.objects.filter(kind=Operation.Kind.APP).exists()


def test_a_student_gets_403_on_every_path_that_acts_on_the_lecturers_workbench(
    people: dict[str, User],
) -> None:
    server = McpServerFactory(name="files")
    lecturer = people["lecturer"]
    call = Operation.objects.create(
        server=server,
        user=lecturer,
        kind=Operation.Kind.TOOLS_CALL,
        target="read",
        status=Operation.Status.RUNNING,
    )
    question = PendingInput.objects.create(operation=call, params={"message": "Delete it?"})
    sampling = PendingInput.objects.create(operation=call, kind="sampling", params={"messages": []})
    saved = SavedCall.objects.create(server=server, owner=lecturer, name="lecturer-weekly", tool="read")
    lecture = ConversationFactory(owner=lecturer)
    turn = TurnFactory(
        conversation=lecture,
        tools=[
            {"server_id": server.pk, "name": "read", "_meta": {"ui": {"resourceUri": "ui://read/app.html"}}}
        ],
    )
    step = StepFactory(
        turn=turn, parent=StepFactory(turn=turn), kind=Step.Kind.TOOL, server=server, tool_name="read"
    )
    app = Operation.objects.create(
        server=server,
        user=lecturer,
        kind=Operation.Kind.APP,
        target="read",
        step=step,
        result={},
        status="ok",
    )
    client = _client(people["student1"])

    assert client.get(f"/servers/op/{call.public_id}/").status_code == 200
    assert "lecturer-weekly" in client.get("/servers/files/").content.decode()
    refused = {
        "cancel": client.post(f"/servers/op/{call.public_id}/cancel"),
        "answer": client.post(f"/servers/op/{call.public_id}/questions/{question.pk}", {"action": "decline"}),
        "sampling": client.post(
            f"/servers/op/{call.public_id}/questions/{sampling.pk}", {"action": "refuse"}
        ),
        "save": client.post(f"/servers/op/{call.public_id}/save", {"name": "mine"}),
        "run": client.post(f"/servers/saved/{saved.public_id}/run"),
        "delete": client.post(f"/servers/saved/{saved.public_id}/delete"),
        "app open": client.post(f"/servers/op/{app.public_id}/app"),
        "app call": client.post(
            f"/servers/op/{app.public_id}/app/call",
            json.dumps({"name": "read", "arguments": {}}),
            "application/json",
        ),
        "app traffic": client.post(
            f"/servers/op/{app.public_id}/app/traffic", json.dumps({"messages": []}), "application/json"
        ),
    }

    assert {what: r.status_code for what, r in refused.items()} == dict.fromkeys(refused, 403)
    for what, response in refused.items():
        text = response.json()["error"] if what.startswith("app") else response.content.decode()
        assert text.startswith(READ_ONLY), what
    call.refresh_from_db()
    assert call.status == Operation.Status.RUNNING
    assert set(PendingInput.objects.values_list("status", flat=True)) == {PendingInput.Status.WAITING}
    assert list(SavedCall.objects.values_list("name", flat=True)) == ["lecturer-weekly"]
    assert Operation.objects.count() == 2  # nothing started: no run, no app read or call
    assert 'id="mcp-app"' not in client.get(f"/servers/op/{app.public_id}/").content.decode()


# --- the students' own, and the members as before ---------------------------------------------


def test_students_do_not_see_each_others_conversations_nor_does_the_lecturer(people: dict[str, User]) -> None:
    homework = ConversationFactory(owner=people["student2"], title="student2's homework")
    turn = TurnFactory(conversation=homework)

    for name in ("student1", "lecturer", "assistant", "outsider"):
        client = _client(people[name])
        for path in (
            f"/c/{homework.public_id}/",
            f"/c/{homework.public_id}/export?format=json",
            f"/c/{homework.public_id}/turns/{turn.pk}/walk",
            f"/api/conversations/{homework.public_id}",
            f"/compare/?from={homework.public_id}&turn={turn.pk}",
        ):
            assert client.get(path).status_code == 404, (name, path)
        assert client.post(f"/c/{homework.public_id}/ask", {"question": "?"}).status_code == 404, name
        assert "student2&#x27;s homework" not in client.get("/").content.decode(), name
    assert _client(people["student2"]).get(f"/c/{homework.public_id}/").status_code == 200
    assert _client(people["dave"]).get(f"/c/{homework.public_id}/").status_code == 200


def test_a_member_and_staff_still_ask_and_cancel_in_the_lecturers_conversation(
    people: dict[str, User], lecture: Lecture
) -> None:
    c = lecture.conversation.public_id
    page = _client(people["assistant"]).get(f"/c/{c}/").content.decode()
    assert 'id="follow-up"' in page and READ_ONLY not in page
    # docs/teaching.md §7: a team mate's turn fills Compare's form too (not a 404).
    compare = _client(people["assistant"]).get(f"/compare/?from={c}&turn={lecture.finished.pk}")
    assert compare.status_code == 200 and "What is the weather in Oslo?" in compare.content.decode()

    cancelled = _client(people["dave"]).post(f"/api/turns/{lecture.running.pk}/cancel")
    assert cancelled.status_code == 202
    Turn.objects.filter(pk=lecture.running.pk).update(status=Turn.Status.CANCELLED)  # as its runner would
    asked = _client(people["assistant"]).post(f"/c/{c}/ask", {"question": "And in Tromsø?"})

    assert asked.status_code == 302
    assert Turn.objects.get(question="And in Tromsø?").asked_by == people["assistant"]


# --- live, on the websocket -------------------------------------------------------------------


async def _socket(user: User, conversation: Conversation) -> WebsocketCommunicator:
    client = Client()
    await sync_to_async(client.force_login)(user)
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    socket = WebsocketCommunicator(
        application,
        _path(conversation),
        headers=[(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1"), (b"cookie", cookie)],
    )
    connected, code = await socket.connect(timeout=WAIT)
    assert connected, code
    return socket


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("async_db_connections")
async def test_each_student_gets_the_lecturers_rows_live_without_buttons_and_not_another_students() -> None:
    people = await sync_to_async(_class_101)()
    conversation, turn, step = await sync_to_async(_conversation)(people["lecturer"])
    lecturer = await _socket(people["lecturer"], conversation)
    students = [await _socket(people[name], conversation) for name in STUDENTS]

    for student in students:
        await student.send_json_to({"type": "catch_up", "since": "2000-01-01T00:00:00+00:00"})
        caught = await _caught_up(student)
        assert [m["type"] for m in caught] == ["turn", "row"]
        assert "cancel-form" not in caught[0]["html"]
    ring = uuid.uuid4().hex
    layer = get_channel_layer()
    await layer.group_send(
        live.conversation_group(conversation.public_id),
        {"type": "turn.changed", "turn_id": turn.pk, "ring": ring},
    )
    await layer.group_send(
        live.conversation_group(conversation.public_id),
        {"type": "step.changed", "turn_id": turn.pk, "step_id": step.pk, "ring": ring},
    )
    # One ring, rendered once per kind of viewer: the lecturer's turn has its Cancel button.
    told = await lecturer.receive_json_from(timeout=WAIT)
    assert told["type"] == "turn" and "cancel-form" in told["html"]
    for student in students:
        turn_message = await student.receive_json_from(timeout=WAIT)
        row = await student.receive_json_from(timeout=WAIT)
        assert turn_message["type"] == "turn" and "cancel-form" not in turn_message["html"]
        assert row["type"] == "row" and "thinking about Beijing" in row["html"]

    homework, _, _ = await sync_to_async(_conversation)(people["student2"])
    client = Client()
    await sync_to_async(client.force_login)(people["student1"])
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    peeking = WebsocketCommunicator(
        application,
        _path(homework),
        headers=[(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1"), (b"cookie", cookie)],
    )
    connected, code = await peeking.connect(timeout=WAIT)
    assert not connected and code == 4404
    for socket in (lecturer, *students):
        await socket.disconnect()
