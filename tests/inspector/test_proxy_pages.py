"""A proxy session's conversation page, API and socket: shown like a loop's turns, to its owner,
team mates and staff only."""

from __future__ import annotations

import threading

import pytest
from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.test import Client

from conversations.models import Step, Team
from conversations.proxy.keys import create_key
from conversations.proxy.models import ProxyKey, ProxySession
from conversations.proxy.recording import record_mcp, record_model_call
from inspector import consumers
from inspector.routing import websocket_urlpatterns
from tests.conversations.proxy.wire import chat_call, tools_call, tools_list

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("async_db_connections")]
TOKYO = {"timezone": "Asia/Tokyo"}


def _session(owner: User) -> tuple[ProxyKey, ProxySession]:
    key = create_key(owner, name="laptop")[0]
    record_mcp(key, session="s", server_name="time", records=[tools_list(["get_current_time"])])
    record_model_call(
        key,
        session="s",
        fmt="openai_chat",
        exchange=chat_call(
            calls=[
                ("call_1", "mcp__time__get_current_time", TOKYO),
                ("call_2", "mcp__time__get_current_time", {"timezone": "Europe/Oslo"}),
            ]
        ),
    )
    record_mcp(
        key,
        session="s",
        server_name="time",
        records=[tools_call("get_current_time", TOKYO, call_id="call_1", text="TOKYO-NOON")],
    )
    record_mcp(
        key,
        session="s",
        server_name="time",
        records=[tools_call("get_current_time", {"timezone": "America/Lima"}, rpc_id=9, text="LIMA-TEN")],
    )
    return key, ProxySession.objects.get(key=key)


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_owner_sees_each_model_call_with_its_linked_tools_call_and_what_stayed_unlinked() -> None:
    alice = User.objects.create_user("alice")
    _, session = _session(alice)

    page = _client(alice).get(f"/c/{session.conversation.public_id}/")

    html = page.content.decode()
    assert page.status_code == 200
    assert "Recorded by proxy" in html and 'id="follow-up"' not in html
    decide = Step.objects.get(turn__conversation=session.conversation, kind="decide")
    row = html[html.index(f'id="step-{decide.pk}"') :]
    row = row[: row.find('<section class="step ', 1)]
    # The model's call, the linked tools/call's JSON-RPC request (with its _meta) and result, side by side.
    assert "ran — linked by its call id in _meta" in row and "TOKYO-NOON" in row
    assert "tool-call-inspector/call_id" in row
    assert "unlinked: no tools/call ran it" in row
    assert "unlinked: no recorded model call asked for this tools/call" in html and "LIMA-TEN" in html


def test_a_question_cannot_be_asked_in_a_proxy_session() -> None:
    alice = User.objects.create_user("alice")
    _, session = _session(alice)

    answer = _client(alice).post(f"/c/{session.conversation.public_id}/ask", {"question": "hi"})

    assert answer.status_code == 409 and "recorded by a proxy" in answer.content.decode()


def test_team_mates_and_staff_see_the_session_and_a_second_user_gets_404_on_page_and_api() -> None:
    alice = User.objects.create_user("alice")
    bob = User.objects.create_user("bob")
    carol = User.objects.create_user("carol")
    staff = User.objects.create_user("sam", is_staff=True)
    Team.objects.create(name="t").members.add(alice, carol)
    _, session = _session(alice)
    public_id = session.conversation.public_id

    for user, status in ((bob, 404), (carol, 200), (staff, 200)):
        client = _client(user)
        assert client.get(f"/c/{public_id}/").status_code == status, user
        assert client.get(f"/api/conversations/{public_id}").status_code == status, user
    listed = _client(alice).get("/").content.decode()
    assert "recorded by proxy" in listed


async def test_a_second_user_gets_404_on_the_socket_and_the_owner_hears_each_record_live() -> None:
    alice = await User.objects.acreate(username="alice")
    bob = await User.objects.acreate(username="bob")
    key, session = await sync_to_async(_session)(alice)
    conversation = await sync_to_async(lambda: session.conversation)()
    path = f"/ws/conversations/{conversation.public_id}/"
    stranger = WebsocketCommunicator(URLRouter(websocket_urlpatterns), path)
    stranger.scope["user"] = bob
    connected, code = await stranger.connect()
    assert not connected and code == consumers.CLOSE_NOT_FOUND
    owner = WebsocketCommunicator(URLRouter(websocket_urlpatterns), path)
    owner.scope["user"] = alice
    assert (await owner.connect())[0]

    # The proxies record from their own threads.
    recorder = threading.Thread(
        target=record_model_call,
        args=(key,),
        kwargs={
            "session": "s",
            "fmt": "openai_chat",
            "exchange": chat_call(text="It is LIVE-NOON.", tool_results=[("call_1", "12:00")]),
        },
    )
    recorder.start()
    await sync_to_async(recorder.join, thread_sensitive=False)()
    messages = [await owner.receive_json_from(timeout=10)]
    while not any(m["type"] == "row" and "LIVE-NOON" in m.get("html", "") for m in messages):
        messages.append(await owner.receive_json_from(timeout=10))
    await owner.disconnect()
