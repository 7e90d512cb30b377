"""Each call of a model step names the tools/call that ran it: the loop's own turns too."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User

from conversations.loop.wire import CALL_ID_META_KEY
from conversations.models import Exchange, Step
from conversations.record.transcripts.document import transcript_document
from conversations.runner import turn_run
from conversations.services import conversation_start, demo_profile_ensure
from servers import gateway
from servers.services import demo_server_ensure

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


def test_the_loop_sends_the_call_id_in_meta_and_the_document_links_each_call_to_its_tools_call() -> None:
    alice = User.objects.create_user("alice")
    conversation, turn = conversation_start(
        owner=alice,
        model_profile=demo_profile_ensure(),
        question="What will the weather be like in Beijing tomorrow?",
        servers=[demo_server_ensure()],
        dispatch=False,
    )
    turn_run(turn_id=turn.pk)

    decide = Step.objects.get(
        turn=turn, kind="decide", calls__isnull=False, parent=None, title__startswith="calls"
    )
    [call] = decide.calls
    tools_call = Exchange.objects.get(turn=turn, label="tools/call")
    # What the real stdio server was sent carries the model's call id.
    assert json.loads(tools_call.request_body)["params"]["_meta"][CALL_ID_META_KEY] == call["id"]
    document = transcript_document(conversation=conversation)
    steps = document["turns"][0]["steps"]
    [linked] = next(step for step in steps if step["id"] == decide.pk)["calls"]  # type: ignore[misc]
    assert linked["executed_exchange"] == tools_call.pk and linked["linked_by"] == "call_id"
