"""The read audit: every view that shows a conversation's record says who read it, and a page
that polls writes one entry per few minutes, not one per poll."""

from __future__ import annotations

from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from conversations.models import AuditEvent, Conversation, Exchange, Step, Team, Turn
from conversations.record.audit import READ_AUDIT_WINDOW_SECONDS, audit_read
from inspector.routing import websocket_urlpatterns
from tests.factories import ComparisonFactory, ConversationFactory, ExchangeFactory, StepFactory, TurnFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice(db: None) -> User:
    return User.objects.create_user("alice", password="pw")


@pytest.fixture
def bob(alice: User) -> User:
    bob = User.objects.create_user("bob", password="pw")
    Team.objects.create(name="platform").members.add(alice, bob)
    return bob


def recorded(owner: User) -> tuple[Conversation, Turn, Step, Step, Exchange]:
    turn = TurnFactory(conversation=ConversationFactory(owner=owner))
    first = StepFactory(turn=turn, prompt="system: tools...\nuser: weather?")
    second = StepFactory(turn=turn, prompt="system: tools...\nuser: weather?\ntool: sunny")
    exchange = ExchangeFactory(step=second)
    return turn.conversation, turn, first, second, exchange


def client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize(
    ("via", "path"),
    [
        ("page", "/c/{c}/"),
        ("turn", "/c/{c}/turns/{t}/"),
        ("turn steps", "/c/{c}/turns/{t}/steps?before=9"),
        ("rows", "/c/{c}/rows?since=2020-01-01T00:00:00"),
        ("exchange body", "/c/{c}/exchanges/{e}/body?part=response"),
        ("spliced prompt", "/c/{c}/steps/{s}/prompt?raw=1"),
        ("prompt diff", "/c/{c}/steps/{s}/prompt-diff"),
        ("api", "/api/conversations/{c}"),
    ],
)
def test_every_full_record_read_is_audited(alice: User, bob: User, via: str, path: str) -> None:
    conversation, turn, _, second, exchange = recorded(alice)
    url = path.format(c=conversation.public_id, t=turn.pk, e=exchange.pk, s=second.pk)

    response = client_for(bob).get(url)

    assert response.status_code == 200
    event = AuditEvent.objects.get(action="opened", via=via)
    assert event.actor == bob and event.conversation_public_id == conversation.public_id
    assert event.detail["via"] == via


def test_a_comparison_is_a_read_of_each_of_its_runs(alice: User) -> None:
    comparison = ComparisonFactory(owner=alice)
    runs = [ConversationFactory(owner=alice, comparison=comparison) for _ in range(2)]

    client_for(alice).get(f"/compare/{comparison.public_id}/")

    read = set(AuditEvent.objects.filter(via="comparison").values_list("conversation_public_id", flat=True))
    assert read == {run.public_id for run in runs}


def test_polling_the_rows_writes_one_entry_per_window(alice: User) -> None:
    conversation, *_ = recorded(alice)
    client = client_for(alice)
    url = f"/c/{conversation.public_id}/rows?since=2020-01-01T00:00:00"

    for _ in range(5):
        assert client.get(url).status_code == 200

    assert AuditEvent.objects.filter(via="rows").count() == 1
    # Once the window has passed, the next poll is a new read.
    AuditEvent.objects.update(at=timezone.now() - timedelta(seconds=READ_AUDIT_WINDOW_SECONDS + 1))
    client.get(url)
    assert AuditEvent.objects.filter(via="rows").count() == 2


def test_reading_another_part_or_as_another_person_is_another_entry(alice: User, bob: User) -> None:
    conversation, turn, first, second, exchange = recorded(alice)

    for user in (alice, bob, alice):
        client = client_for(user)
        client.get(f"/c/{conversation.public_id}/steps/{first.pk}/prompt")
        client.get(f"/c/{conversation.public_id}/steps/{second.pk}/prompt")

    subjects = sorted(AuditEvent.objects.values_list("actor__username", "subject"))
    assert subjects == [
        ("alice", f"step {first.pk}"),
        ("alice", f"step {second.pk}"),
        ("bob", f"step {first.pk}"),
        ("bob", f"step {second.pk}"),
    ]


def test_a_repeat_of_another_kind_of_read_is_not_folded_into_the_first(alice: User) -> None:
    conversation, *_ = recorded(alice)

    assert audit_read(actor=alice, conversation=conversation, via="page") is not None
    assert audit_read(actor=alice, conversation=conversation, via="page") is None
    assert audit_read(actor=alice, conversation=conversation, via="rows") is not None


def test_a_refused_read_is_not_audited(alice: User) -> None:
    conversation, turn, *_ = recorded(alice)
    carol = User.objects.create_user("carol")

    assert client_for(carol).get(f"/c/{conversation.public_id}/turns/{turn.pk}/").status_code == 404
    assert not AuditEvent.objects.exists()


@pytest.mark.django_db(transaction=True)
async def test_opening_the_live_socket_is_a_read(async_db_connections: None) -> None:
    alice = await User.objects.acreate(username="alice")
    conversation = await sync_to_async(ConversationFactory)(owner=alice)
    communicator = WebsocketCommunicator(
        URLRouter(websocket_urlpatterns), f"/ws/conversations/{conversation.public_id}/"
    )
    communicator.scope["user"] = alice

    connected, _ = await communicator.connect()
    await communicator.disconnect()

    assert connected
    event = await AuditEvent.objects.aget(via="websocket")
    assert event.actor_id == alice.pk and event.conversation_public_id == conversation.public_id
